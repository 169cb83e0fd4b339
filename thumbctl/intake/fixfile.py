"""The portable fix file: ``thumbctl-focus.json`` at a source root, the crop fixes a seller commits
with the photos.

It sits in the folder a batch scans, beside a manifest, or at an ``s3://`` prefix, and holds one
entry per photo: its path relative to the root (a URL source by its URL, shown without secrets),
content digest, upright dimensions, perceptual hash (:mod:`thumbctl.imaging.fingerprint`) and the
focus point of each fixed ratio. ``thumbctl focus`` writes it (this module makes and reads the
document; :mod:`thumbctl.storage.rootfiles` swaps it in), every submit of the root reads it. The
document is stable and diff-friendly: sorted, one line per photo, and only what a fix needs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core.errors import UsageError
from ..core.profile import SettingError, parse_ratios

#: What marks the file as thumbctl's (never written over a file without it).
GENERATOR = "thumbctl"
#: The largest fix file read (a 100,000-photo shop's is ~25 MB).
FIX_FILE_LIMIT = 64 * 1024 * 1024
FORMAT_VERSION = 1
ABOUT = (
    "Crop fixes of the photos below this folder, written by `thumbctl focus`; every submit of the folder "
    "applies them. Commit it with the photos. Remove a photo's line to forget its fixes."
)
_HEX = re.compile(r"^[0-9a-f]{16}$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")

Point = tuple[float, float]


@dataclass(frozen=True)
class FixEntry:
    """One photo's fixes: where it is (``path``), what it held (``digest``, dimensions, ``phash``)
    and the focus point of each fixed ratio."""

    path: str
    digest: str
    width: int | None = None
    height: int | None = None
    phash: str | None = None
    focus: Mapping[str, Point] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        found = {"path": self.path, "digest": self.digest, "width": self.width, "height": self.height}
        found |= {"phash": self.phash, "focus": {r: list(p) for r, p in sorted(self.focus.items())}}
        return {k: v for k, v in found.items() if v is not None}


@dataclass(frozen=True)
class FixFile:
    """The entries of a fix file, one per path."""

    entries: tuple[FixEntry, ...] = ()

    def by_path(self) -> dict[str, FixEntry]:
        return {e.path: e for e in self.entries}

    def by_digest(self) -> dict[str, FixEntry]:
        return {e.digest: e for e in self.entries}

    def with_entry(self, entry: FixEntry) -> FixFile:
        """This file with ``entry`` at its path (none when it fixes no ratio)."""
        kept = [e for e in self.entries if e.path != entry.path]
        return FixFile(tuple(sorted([*kept, entry] if entry.focus else kept, key=lambda e: e.path)))

    def pairs(self) -> set[tuple[str, str]]:
        """Every (digest, ratio) the file fixes."""
        return {(e.digest, r) for e in self.entries for r in e.focus}

    def render(self) -> bytes:
        """The document: sorted, one line per photo, so a fix changes one line of a diff."""
        lines = [json.dumps(e.to_json(), ensure_ascii=False) for e in self.entries]
        photos = "[]" if not lines else "[\n" + ",\n".join(f"    {line}" for line in lines) + "\n  ]"
        head = json.dumps({"about": ABOUT, "generator": GENERATOR, "version": FORMAT_VERSION}, indent=2)
        return (head[:-2] + f',\n  "photos": {photos}\n}}\n').encode()


def parse_fix_file(data: bytes, where: str) -> FixFile:
    """The entries of the fix file ``data`` read at ``where``; a :class:`UsageError` (``bad_focus_file``)
    naming the first problem for anything else, and (``focus_file_taken``) for a file thumbctl did not write."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(where, f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        doc = _without_trailing_commas(text, exc, where)
    except (RecursionError, ValueError) as exc:  # nested too deep; a number of thousands of digits
        raise _bad(where, f"not a fix file ({_shown(str(exc))})") from None
    if not isinstance(doc, dict) or doc.get("generator") != GENERATOR:
        raise UsageError(
            f'{where} was not written by thumbctl (no "generator": "thumbctl"); it is left as it is: '
            "move it away to keep crop fixes there",
            code="focus_file_taken",
        )
    version = doc.get("version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise _bad(where, f"version {_shown(repr(version))} is not {FORMAT_VERSION}: written by another thumbctl")
    photos = doc.get("photos")
    if not isinstance(photos, list):
        raise _bad(where, '"photos" must be a list')
    entries: dict[str, FixEntry] = {}
    for number, photo in enumerate(photos, 1):
        entry = _entry(photo, f"{where}: photo {number}")
        entries[entry.path] = entry
    return FixFile(tuple(sorted(entries.values(), key=lambda e: e.path)))


#: A comma before a closing bracket: what removing the last photo's line leaves behind.
_TRAILING_COMMA = re.compile(r",(\s*[\]}])")


def _without_trailing_commas(text: str, error: json.JSONDecodeError, where: str) -> object:
    """The document read as a person edited it: a line removed may leave a comma before a closing
    bracket, which is taken as if it were not there. Anything else that does not parse is refused."""
    try:
        return json.loads(_TRAILING_COMMA.sub(r"\1", text))
    except (json.JSONDecodeError, RecursionError, ValueError):
        raise _bad(where, f"not JSON ({error})") from None


def _entry(photo: object, where: str) -> FixEntry:
    if not isinstance(photo, dict):
        raise _bad(where, "must be an object")
    path, digest = photo.get("path"), photo.get("digest")
    if not isinstance(path, str) or not path or not isinstance(digest, str) or not _DIGEST.match(digest):
        raise _bad(where, 'needs "path" (text) and "digest" (64 hex digits: the photo\'s sha256)')
    width, height, phash = photo.get("width"), photo.get("height"), photo.get("phash")
    if any(v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1) for v in (width, height)):
        raise _bad(where, '"width" and "height" must be whole numbers of pixels')
    if phash is not None and not (isinstance(phash, str) and _HEX.match(phash)):
        raise _bad(where, '"phash" must be 16 hex digits')
    focus = photo.get("focus", {})
    if not isinstance(focus, dict):
        raise _bad(where, '"focus" must map ratios to [x, y]')
    return FixEntry(path, digest, width, height, phash, {_ratio(r, where): _point(p, where) for r, p in focus.items()})


def _ratio(text: str, where: str) -> str:
    try:
        (ratio,) = parse_ratios(text)
    except (SettingError, ValueError):
        raise _bad(where, f"{_shown(repr(text))} is not one ratio such as 4:3") from None
    return str(ratio)


def _shown(text: str) -> str:
    """``text`` as an error message quotes it: at most 40 characters, and how long it was."""
    return text if len(text) <= 40 else f"{text[:30]}… ({len(text)} characters)"


def _point(value: object, where: str) -> Point:
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
        and all(0.0 <= v <= 1.0 for v in value)
    ):
        return (float(value[0]), float(value[1]))
    raise _bad(where, f"focus {_shown(json.dumps(value))} must be [x, y] with both in 0..1")


def _bad(where: str, why: str) -> UsageError:
    return UsageError(
        f"{where}: {why}; fix it, or move it away and run thumbctl focus --export to write it again from the ledger",
        code="bad_focus_file",
    )
