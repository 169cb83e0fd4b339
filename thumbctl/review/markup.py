"""Paste-ready markup: per source and ratio, the files a batch published, a ``srcset`` per
format and a ``<picture>`` element a web page can use as it is.

Everything is built from ledger views (an item's stored ``result`` and paths), so it reads
the same from either ledger backend. An item is one derivative of a source: one ratio, and
one size and format when a batch asks for several; the items of one (source, ratio) form one
picture, whatever their number.

Rules (README, "Paste-ready markup"):

- URLs are relative to OUT's root (the thumbnail names) and percent-encoded, so the markup
  works when OUT is uploaded as a folder and the page sits at its root.
- ``srcset`` lists each produced width once per format, narrowest first; when two outputs of
  one format have the same width (sizes that collapse on a small source), the one asked for
  the smaller size is used.
- The ``<img>`` is the JPEG set, else the PNG set, else the most widely supported modern one.
  Its ``src``, ``width`` and ``height`` are those of its widest file; ``sizes`` starts with
  ``auto`` (a lazy image is then chosen by the width the page lays it out at), then, for browsers
  without it, the image shown at that width, or the viewport's when narrower.
- An AVIF or WebP set is offered as a ``<source>`` only when its files (one per width, as its
  ``srcset`` lists them) total fewer bytes than the ``<img>``'s set: a browser takes the first
  ``<source>`` it supports, so a larger modern file would cost the page bytes. The offered
  ``<source>`` elements come smallest total first. A set whose total cannot be known (a file's
  size unreadable) is offered as before, after the measured ones, AVIF before WebP.
- ``alt`` is the manifest item's ``alt`` text, else empty (``alt=""``, which a screen reader
  skips); never the file name or item id. HTML-escaped.
- While the files load, the ``<img>`` shows the pair's placeholder as its CSS background, with
  no script: its dominant colour (``background-color``) under its tiny image, a 16 px WebP
  ``data:`` URI scaled to cover the box (see ``imaging.placeholder``). Both are absent when the
  ledger has none for the pair (outputs rendered before placeholders were recorded, and only
  reused since; outputs with a transparent background, whose placeholder would stay visible
  through the transparent pixels once the file has loaded).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote

from ..config.options import DEFAULT_MARKUP, SiteMarkup
from ..core.models import BatchView, ItemState, ItemView

if TYPE_CHECKING:
    from ..ledger import ViewsPort
from ..core.profile import OUTPUT_FORMATS
from ..storage.locations import documents_of, is_s3, name_in, output_target_at
from ..storage.outputs import json_document

#: Formats that may be offered as ``<source>`` elements when they are not the ``<img>``'s (ordered by
#: their sets' bytes; in this order when those are unknown).
SOURCE_FORMATS = ("avif", "webp")
#: Which format's files the ``<img>`` takes, first present wins.
FALLBACK_FORMATS = ("jpeg", "png", "webp", "avif")
MEDIA_TYPES = {"avif": "image/avif", "webp": "image/webp", "jpeg": "image/jpeg", "png": "image/png"}
FORMAT_BY_EXTENSION = {extension: fmt for fmt, extension in OUTPUT_FORMATS.items()}

#: Reads (width, height) from an output file's header when the ledger has no render result
#: for it (an output reused from an earlier batch); None when it cannot be read.
HeaderSize = Callable[[str, str], tuple[int, int] | None]


@dataclass(frozen=True)
class OutputFile:
    """One published thumbnail: where it is (relative to OUT), its pixels, format and bytes."""

    path: str
    width: int
    height: int
    format: str
    bytes: int | None
    #: The size asked for, when the ledger records it per item.
    size: int | None = None
    #: What the URL starts with (``--base-url``); "": relative to OUT.
    base_url: str = ""

    @property
    def url(self) -> str:
        return self.base_url + quote(self.path, safe="/")

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "url": self.url,
            "width": self.width,
            "height": self.height,
            "format": self.format,
            "bytes": self.bytes,
            "size": self.size,
        }


@dataclass(frozen=True)
class Placeholder:
    """What a page shows while a pair's files load: its dominant colour and tiny image."""

    colour: str
    lqip: str

    @classmethod
    def from_result(cls, result: dict[str, object] | None) -> Placeholder | None:
        """The placeholder a render result records, if it is one that is safe in a style attribute."""
        colour, lqip = (result or {}).get("dominant_colour"), (result or {}).get("lqip")
        if (
            isinstance(colour, str)
            and HEX_COLOUR.fullmatch(colour)
            and isinstance(lqip, str)
            and DATA_URI.fullmatch(lqip)
        ):
            return cls(colour, lqip)
        return None

    def style(self) -> str:
        return f"background-color:{self.colour};background-image:url({self.lqip});background-size:cover"


HEX_COLOUR = re.compile(r"#[0-9a-f]{6}")
#: A base64 image ``data:`` URI: nothing in it can end the ``url()`` or the attribute.
DATA_URI = re.compile(r"data:image/(webp|jpeg|png);base64,[A-Za-z0-9+/]+={0,2}")


@dataclass(frozen=True)
class PictureSet:
    """The published files of one (source, ratio), its ``alt`` text and placeholder."""

    item_id: str
    ratio: str
    files: tuple[OutputFile, ...]
    alt: str = ""
    placeholder: Placeholder | None = None
    #: The ``sizes`` attribute (``--sizes``); None: ``auto``, then the widest file's width.
    sizes: str | None = None

    def srcsets(self) -> dict[str, str]:
        """Format -> its ``srcset`` string (formats in the order of :meth:`by_format`)."""
        return {fmt: srcset(chosen) for fmt, chosen in self.by_format().items()}

    def by_format(self) -> dict[str, list[OutputFile]]:
        """Format -> its files, one per produced width, narrowest first; formats in a stable order."""
        grouped: dict[str, dict[int, OutputFile]] = {}
        for file in sorted(self.files, key=_file_order):
            grouped.setdefault(file.format, {}).setdefault(file.width, file)
        return {fmt: list(widths.values()) for fmt, widths in grouped.items()}

    def picture(self) -> str | None:
        """The ``<picture>`` element, or None when the pair published nothing."""
        return picture_html(self.by_format(), self.alt, self.placeholder, self.sizes) if self.files else None

    def to_json(self) -> dict[str, object]:
        return {
            "item_id": self.item_id,
            "ratio": self.ratio,
            "files": [file.to_json() for file in sorted(self.files, key=_file_order)],
            "srcset": self.srcsets(),
            "alt": self.alt,
            "dominant_colour": self.placeholder.colour if self.placeholder else None,
            "lqip": self.placeholder.lqip if self.placeholder else None,
            "picture": self.picture(),
        }


def _file_order(file: OutputFile) -> tuple[int, int, int, str]:
    rank = FALLBACK_FORMATS.index(file.format) if file.format in FALLBACK_FORMATS else len(FALLBACK_FORMATS)
    order = SOURCE_FORMATS.index(file.format) if file.format in SOURCE_FORMATS else len(SOURCE_FORMATS) + rank
    return order, file.width, file.size or 0, file.path


def picture_sets(
    out_dir: str,
    items: Iterable[ItemView],
    header_size: HeaderSize | None = None,
    markup: SiteMarkup = DEFAULT_MARKUP,
) -> list[PictureSet]:
    """One :class:`PictureSet` per (item id, ratio) in ledger order, with its succeeded items' files,
    its ``alt`` text and the placeholder the first of its items that has one recorded; ``markup``: the
    OUT's ``--sizes`` and ``--base-url``."""
    grouped: dict[tuple[str, str], list[OutputFile]] = {}
    alts: dict[tuple[str, str], str] = {}
    placeholders: dict[tuple[str, str], Placeholder] = {}
    for item in items:
        pair = (item.item_id, item.ratio)
        files = grouped.setdefault(pair, [])
        alts.setdefault(pair, item.alt)
        file = output_file(out_dir, item, header_size, markup.base_url)
        if file is not None:
            files.append(file)
            if pair not in placeholders and (placeholder := Placeholder.from_result(item.result)):
                placeholders[pair] = placeholder
    return [
        PictureSet(item_id, ratio, tuple(files), alts[item_id, ratio], placeholders.get((item_id, ratio)), markup.sizes)
        for (item_id, ratio), files in grouped.items()
    ]


def output_file(
    out_dir: str, item: ItemView, header_size: HeaderSize | None = None, base_url: str = ""
) -> OutputFile | None:
    """The file a succeeded item published, with its facts from the render result; an item
    reused from an earlier batch (no result) is measured from its file's header."""
    path = item.friendly_path or item.object_path
    if item.state != ItemState.SUCCEEDED or not path:
        return None
    fmt = item_format(item)
    result = item.result or {}
    width, height = result.get("width"), result.get("height")
    if not (isinstance(width, int) and isinstance(height, int)):
        measured = (header_size or _header_size)(path, fmt)
        if measured is None:
            return None
        width, height = measured
    return OutputFile(
        path=os.path.relpath(path, out_dir),
        width=width,
        height=height,
        format=fmt,
        bytes=_output_bytes(result, path),
        size=_asked_size(item),
        base_url=base_url,
    )


def item_format(item: ItemView) -> str:
    """The item's output format: recorded on the item or in its result when the ledger has
    it, else the one its object's extension names (objects are named by their format)."""
    for recorded in (getattr(item, "format", None), (item.result or {}).get("format")):
        if isinstance(recorded, str) and recorded in MEDIA_TYPES:
            return recorded
    path = item.object_path or item.friendly_path or ""
    return FORMAT_BY_EXTENSION.get(path.rpartition(".")[2].lower(), "jpeg")


def _asked_size(item: ItemView) -> int | None:
    for recorded in (getattr(item, "size", None), (item.result or {}).get("size")):
        if isinstance(recorded, int):
            return recorded
    return None


def _output_bytes(result: dict[str, object], path: str) -> int | None:
    recorded = result.get("output_bytes")
    if isinstance(recorded, int):
        return recorded
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _header_size(path: str, fmt: str) -> tuple[int, int] | None:
    from ..imaging.encode import output_header_size

    return output_header_size(path, fmt)


def srcset(files: Iterable[OutputFile]) -> str:
    """``url 320w, url 640w`` for files already one per width."""
    return ", ".join(f"{file.url} {file.width}w" for file in files)


def fallback_format(formats: Iterable[str]) -> str:
    present = set(formats)
    return next(fmt for fmt in (*FALLBACK_FORMATS, *sorted(present)) if fmt in present)


def picture_html(
    by_format: dict[str, list[OutputFile]],
    alt: str = "",
    placeholder: Placeholder | None = None,
    sizes: str | None = None,
) -> str:
    """The ``<picture>``: a ``<source>`` per modern format worth offering, then the fallback ``<img>``;
    ``sizes`` as given, else ``auto`` (lazy images only) then the widest file's width."""
    img_format = fallback_format(by_format)
    largest = by_format[img_format][-1]
    sizes = escape(sizes) if sizes else f"auto, (max-width: {largest.width}px) 100vw, {largest.width}px"
    lines = ["<picture>"]
    for fmt in offered_sources(by_format, img_format):
        lines.append(f'  <source type="{MEDIA_TYPES[fmt]}" srcset="{escape(srcset(by_format[fmt]))}" sizes="{sizes}">')
    shown = f' style="{escape(placeholder.style())}"' if placeholder is not None else ""
    lines.append(
        f'  <img src="{escape(largest.url)}" srcset="{escape(srcset(by_format[img_format]))}" sizes="{sizes}" '
        f'width="{largest.width}" height="{largest.height}" alt="{escape(alt)}"{shown} loading="lazy">'
    )
    lines.append("</picture>")
    return "\n".join(lines)


def offered_sources(by_format: dict[str, list[OutputFile]], img_format: str) -> list[str]:
    """The modern formats offered as ``<source>`` elements, in order (see the module's rules)."""
    fallback_total = total_bytes(by_format[img_format])
    measured: list[tuple[int, int, str]] = []
    unmeasured: list[str] = []
    for rank, fmt in enumerate(SOURCE_FORMATS):
        if fmt not in by_format or fmt == img_format:
            continue
        total = total_bytes(by_format[fmt])
        if total is None or fallback_total is None:
            unmeasured.append(fmt)
        elif total < fallback_total:
            measured.append((total, rank, fmt))
    return [fmt for _, _, fmt in sorted(measured)] + unmeasured


def total_bytes(files: Iterable[OutputFile]) -> int | None:
    """The bytes of ``files`` together, or None when a file's size is unknown."""
    sizes = [file.bytes for file in files]
    return None if any(size is None for size in sizes) else sum(size for size in sizes if size is not None)


def snippets(sets: Iterable[PictureSet]) -> str:
    """Every pair's ``<picture>``, each after an HTML comment naming its source and ratio; a
    pair that published nothing is only the comment, saying so."""
    parts = []
    for pictures in sets:
        picture = pictures.picture()
        label = comment_text(f"{pictures.item_id} · {pictures.ratio}")
        parts.append(f"<!-- {label} -->\n{picture}" if picture else f"<!-- {label}: no thumbnail -->")
    return "".join(part + "\n" for part in parts)


def comment_text(text: str) -> str:
    """Text safe inside an HTML comment: with ``<`` and ``>`` escaped it cannot close the
    comment or open another (``-->``, ``--!>``, ``<!--``)."""
    return escape(text, quote=False)


def batch_snippets(views: ViewsPort, batch: str, markup: Callable[[str], SiteMarkup] = lambda out: SiteMarkup()) -> str:
    """The snippets of ``batch`` (an id or a unique prefix), read from the ledger's views; ``markup``
    gives its OUT's ``--sizes`` and ``--base-url``."""
    view = views.batch(batch, with_failures=False)
    return snippets(picture_sets(view.out_dir, views.items(view.batch_id), markup=markup(view.out_dir)))


def batch_manifest(batch: BatchView, items: list[ItemView], markup: SiteMarkup = DEFAULT_MARKUP) -> dict[str, object]:
    """The document of OUT/batches/<batch_id>.json: every item with its object and friendly path, and
    per source and ratio its published files with a ``srcset`` per format and a ``<picture>``."""
    entries = [
        {
            "item_id": item.item_id,
            "ratio": item.ratio,
            "size": item.size,
            "format": item.format,
            "state": item.state,
            "error_code": item.error_code,
            "derivative_key": item.derivative_key,
            "object_path": item.object_path if item.state == ItemState.SUCCEEDED else None,
            "friendly_path": item.friendly_path if item.state == ItemState.SUCCEEDED else None,
        }
        for item in items
    ]
    pictures = [group.to_json() for group in picture_sets(batch.out_dir, items, markup=markup)]
    doc = {**batch.to_json(with_failures=False), "items": entries, "pictures": pictures}
    doc.pop("replayed", None)
    doc.pop("queue_age_seconds", None)
    return without_local_paths(doc, batch.out_dir)


#: What the local paths of a batch manifest are relative to (its ``paths`` field).
PATHS_RELATIVE_TO = "out"


def without_local_paths(doc: dict[str, object], out_dir: str) -> dict[str, object]:
    """``doc`` as a document in OUT holds it: every local path relative to OUT (``..`` leading out of
    it), so nothing written into OUT names the machine's folders; ``s3://`` locations as they are."""
    if is_s3(out_dir):
        return doc

    def relative(path: object) -> object:
        return os.path.relpath(path, out_dir) if isinstance(path, str) and os.path.isabs(path) else path

    found = {key: relative(doc[key]) for key in ("out_dir", "manifest_path", "source_root") if key in doc}
    items = [
        {**item, "object_path": relative(item["object_path"]), "friendly_path": relative(item["friendly_path"])}
        for item in doc["items"]  # type: ignore[attr-defined]
    ]
    return {**doc, **found, "items": items, "paths": PATHS_RELATIVE_TO}


def manifest_present(batch: BatchView) -> bool:
    """Whether the batch's manifest is in its OUT already (a file, or a document in a bucket)."""
    if not is_s3(batch.manifest_path):
        return os.path.exists(batch.manifest_path)
    root = documents_root(batch)
    return output_target_at(root).document_size(name_in(root, batch.manifest_path)) is not None


def write_batch_manifest(batch: BatchView, items: list[ItemView], markup: SiteMarkup = DEFAULT_MARKUP) -> str:
    """Write the batch's manifest (see :func:`batch_manifest`) where its documents go (OUT, or
    ``--documents``), atomically; returns its path."""
    root = documents_root(batch)
    document = json_document(batch_manifest(batch, items, markup))
    output_target_at(root).write_document(name_in(root, batch.manifest_path), document)
    return batch.manifest_path


def documents_root(batch: BatchView) -> str:
    """Where the batch's documents live: the folder or prefix above its manifest's ``batches/``
    (OUT unless ``--documents`` named another); OUT for a manifest path of another shape."""
    try:
        return documents_of(batch.manifest_path or "")
    except ValueError:
        return batch.out_dir
