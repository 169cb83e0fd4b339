"""The catalogue of an OUT: one record per live name, whichever batch published it.

A name's record joins what the ledger keeps about it: the name itself (``names``), the item that
published it (source, content digest, fit, alt), the render of its derivative key (``derivatives``:
the crop window and its score, the framing, the placeholder) and the crop fix remembered for its
content and ratio (``focus_points``). An output whose render recorded no window (made by an early
version, before windows were recorded) has ``crop`` None: shown as unknown, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .redact import shown_source


@dataclass(frozen=True)
class CatalogueEntry:
    """One live name of an OUT and what made it."""

    #: The published name: a path under ``out_dir`` or an ``s3://`` key under it.
    name: str
    out_dir: str
    source: str
    source_root: str | None
    source_digest: str | None
    ratio: str
    size: int
    format: str
    fit: str
    #: What the render of the name's bytes recorded (the item's result, with the crop window, the
    #: framing, the placeholder and the preview of its derivative key's render).
    result: dict[str, object]
    #: The remembered crop fix for this content and ratio (None: the smart crop).
    focus: tuple[float, float] | None
    #: The crop fix the name's bytes were rendered with (None: the smart crop); not ``focus`` while
    #: the render of a fix is queued, or was cancelled or failed.
    rendered_focus: tuple[float, float] | None
    #: The object the name holds (a path in the store, or an ``s3://`` key).
    object_path: str
    #: The source's width and height (upright), when known.
    source_size: tuple[int, int] | None
    alt: str
    #: The version of the bytes at the name (what the mirror and gc compare), and when it was published.
    version: str | None
    changed_at: str
    batch_id: str

    @property
    def crop(self) -> dict[str, object] | None:
        """The window of the source the output shows, its score and policy (``{"box", "score",
        "policy"}``); None when no render of it recorded one."""
        crop = self.result.get("crop")
        return crop if isinstance(crop, dict) else None

    @property
    def placeholder(self) -> dict[str, str]:
        """The placeholder: ``dominant_colour`` and ``lqip`` (empty when none was recorded)."""
        return {name: str(self.result[name]) for name in ("dominant_colour", "lqip") if name in self.result}

    @property
    def width(self) -> int | None:
        return _whole(self.result.get("width"))

    @property
    def height(self) -> int | None:
        return _whole(self.result.get("height"))

    @property
    def score(self) -> float | None:
        """The crop window's score (higher is better), or None when unknown."""
        score = (self.crop or {}).get("score")
        return float(score) if isinstance(score, int | float) else None

    @property
    def relative_name(self) -> str:
        """The name relative to its OUT, as a site refers to it."""
        prefix = self.out_dir.rstrip("/") + "/"
        return self.name[len(prefix) :] if self.name.startswith(prefix) else self.name

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.relative_name,
            "path": self.name,
            "out": self.out_dir,
            "source": shown_source(self.source),
            "source_digest": self.source_digest,
            "ratio": self.ratio,
            "size": self.size,
            "format": self.format,
            "fit": self.fit,
            "width": self.width,
            "height": self.height,
            "crop": self.crop,
            "score": self.score,
            "focus": list(self.focus) if self.focus else None,
            "placeholder": self.placeholder or None,
            "alt": self.alt,
            "version": self.version,
            "changed_at": self.changed_at,
            "batch_id": self.batch_id,
        }


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
