"""Thumbnail names: where each item of a batch lands in OUT, from a name template (``--name``).

A template is text with fields in braces, e.g. ``{path}.{ratio}.{size}.{ext}``:

``{path}``    the item's path without its extension, relative to the source root (``rooms/sofa``);
              when two items share it (``a.jpg`` and ``a.png``) the later in sorted order keeps
              its extension (``a.png``), as friendly names always did
``{stem}``    the last segment of ``{path}`` (``sofa``): no folders
``{ratio}``   the ratio as ``WxH`` (``16x9``)
``{size}``    the size asked for (``--size``), the longest side in px
``{width}``, ``{height}``  the size produced: computed at submit from the source's header (its
              upright dimensions) and the no-upscale rule, exactly as the worker computes it, so a
              name is known, checked and recorded before anything is rendered
``{ext}``     the output's extension (``jpg``, ``webp``, ``avif``, ``png``)
``{fit}``     how the output frames its source: ``cover`` or ``contain`` (``--fit``, a manifest's ``fit``)

``{{`` and ``}}`` are literal braces. The default (:func:`default_template`) gives today's names for
one size: ``{path}.{ratio}.{ext}``; with several sizes it adds ``{size}``; for a ``contain`` output
it adds ``{fit}`` (``sofa.1x1.contain.jpg``), so the two fits of one ratio never share a name, and
the names of cover outputs stay what they always were.

Rules, checked at submit for every item (a break rejects the whole batch, exit 65, naming the
problem and the items): a name is a safe relative path inside OUT by the same rules as an item id
(not empty, not absolute, no ``.``, ``..`` or empty segment, no control character or backslash,
not under ``.tmp``), each segment at most 255 bytes, and not under ``objects/`` unless the item's
own path put it there; two items of a batch never get the same name (a template that maps two
items to one name, e.g. ``{stem}.{ext}`` for ``a/x.jpg`` and ``b/x.jpg``, or ``{width}`` for two
sizes a small source collapses to one width, is refused, naming both).

A name that stays out of its lane fails only its own items (``bad_name``, :func:`lane_problem`),
whatever put it there (the template's fields, a source folder named ``batches``): a name in
``batches/``, where the batch documents live, or one whose extension is a media type other than a
raster image's (``.html``, ``.json``, ``.gz``), which a web server or a bucket would serve as that
type. A template whose own text gives every name such an extension (``{path}.html``) is refused
when it is read (:func:`check_template`).
"""

from __future__ import annotations

import mimetypes
import string
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

FIELDS = ("path", "stem", "ratio", "size", "width", "height", "ext", "fit")
#: A name is one file name per segment: the usual 255-byte limit of a file system.
MAX_NAME_SEGMENT_BYTES = 255
#: Folders of OUT that belong to thumbctl itself: a template's own text never leads into them.
RESERVED_FOLDERS = ("objects", "batches", ".tmp")
#: The folder of OUT that holds the batch documents (``batches/<batch id>.json``, ``.html``).
DOCUMENTS_FOLDER = "batches"
#: Python's own table of media types by extension (never the machine's ``/etc/mime.types``), so a
#: name is judged alike on every host.
_MEDIA_TYPES = mimetypes.MimeTypes(filenames=())


class NameTemplateError(ValueError):
    """A name template that cannot be used; the message says why."""


def default_template(sizes_count: int = 1, fit: str = "cover") -> str:
    """The template used when none is given: today's ``{path}.{ratio}.{ext}`` for one size asked for,
    and ``{path}.{ratio}.{size}.{ext}`` for several (so the sizes of one source never share a name);
    ``{fit}`` before the extension for any fit but cover."""
    base = "{path}.{ratio}" if sizes_count <= 1 else "{path}.{ratio}.{size}"
    return f"{base}.{{ext}}" if fit == "cover" else f"{base}.{{fit}}.{{ext}}"


@dataclass(frozen=True)
class NameFields:
    """The values a template's fields take for one item."""

    path: str
    ratio: str
    size: int
    width: int
    height: int
    ext: str
    fit: str = "cover"

    @property
    def stem(self) -> str:
        return self.path.rpartition("/")[2]

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "stem": self.stem,
            "ratio": self.ratio,
            "size": self.size,
            "width": self.width,
            "height": self.height,
            "ext": self.ext,
            "fit": self.fit,
        }


def check_template(template: str) -> str:
    """Return ``template`` if its syntax is usable (known fields only, no positional field, no
    conversion or format spec), else raise NameTemplateError. Where its names lead is checked at
    submit, item by item (:func:`assign_names`)."""
    if not template:
        raise NameTemplateError("the name template is empty")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise NameTemplateError(f"name template {template!r}: {exc} (write {{{{ and }}}} for literal braces)") from None
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in FIELDS:
            known = ", ".join(f"{{{name}}}" for name in FIELDS)
            raise NameTemplateError(f"name template {template!r}: unknown field {{{field}}}; fields: {known}")
        if spec or conversion:
            raise NameTemplateError(f"name template {template!r}: {{{field}}} takes no conversion or format spec")
    tail = parts[-1][0].rpartition("/")[2] if parts[-1][1] is None else ""  # the literal end of every name
    problem = extension_problem(f"thumbnail{tail}") if "." in tail else None
    if problem is not None:
        raise NameTemplateError(f"name template {template!r}: every name {problem}; end it in .{{ext}}")
    return template


def _check_literal_text(template: str) -> None:
    """Problems the template's own text causes whatever its fields hold."""
    if template.startswith("/"):
        raise NameTemplateError(f"name template {template!r} is an absolute path; names are relative to OUT")
    prefix = template.split("{", 1)[0]
    first = prefix.split("/", 1)[0]
    if "/" in prefix and first in RESERVED_FOLDERS:
        raise NameTemplateError(f"name template {template!r} writes into OUT/{first}/, which thumbctl keeps for itself")


def render_name(template: str, fields: NameFields) -> str:
    """The item's name (relative to OUT) from a checked template."""
    return template.format(**fields.as_dict())


def relative_path_problem(path: str) -> str | None:
    """Why ``path`` is no plain relative path inside a folder (an item id, a thumbnail's name), or
    None: text that is not UTF-8, control characters, a backslash, an absolute path, or an empty,
    ``.`` or ``..`` segment. Length and reserved folders are the caller's rules."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if any(unicodedata.category(ch) == "Cc" for ch in path):
        return "contains control characters"
    if "\\" in path:
        return "contains a backslash"
    if path.startswith("/"):
        return "is an absolute path"
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return "has an empty, '.' or '..' segment"
    return None


def name_problem(name: str, item_path: str) -> str | None:
    """Why ``name`` cannot be a thumbnail's name, or None. ``item_path`` is the item's ``{path}``:
    a name may lie under a reserved folder only where the item's own path already does."""
    if not name:
        return "is empty"
    problem = relative_path_problem(name)
    if problem is not None:
        return problem
    segments = name.split("/")
    if any(len(segment.encode()) > MAX_NAME_SEGMENT_BYTES for segment in segments):
        return f"has a segment over {MAX_NAME_SEGMENT_BYTES} bytes"
    if segments[0] == ".tmp":
        return "lies in OUT/.tmp/, which thumbctl keeps for itself"
    own = segments[0] in RESERVED_FOLDERS and segments[0] != DOCUMENTS_FOLDER
    if own and len(segments) > 1 and not item_path.startswith(f"{segments[0]}/"):
        return f"lies in OUT/{segments[0]}/, which thumbctl keeps for itself"
    return None


def lane_problem(name: str) -> str | None:
    """Why the safe name ``name`` fails its items (``bad_name``) while the rest of the batch goes on,
    or None: it lies in (or is) OUT/batches/, the batch documents' folder, or its extension is not
    an image's (see :func:`extension_problem`)."""
    if name.split("/", 1)[0] == DOCUMENTS_FOLDER:
        return f"lies in OUT/{DOCUMENTS_FOLDER}/, where thumbctl writes the batch documents"
    return extension_problem(name.rpartition("/")[2])


def extension_problem(file_name: str) -> str | None:
    """Why a thumbnail may not be called ``file_name``, or None: its extension is one Python's
    table of media types knows as something else than a raster image (``.html`` is ``text/html``,
    ``.svg`` a drawing that may hold scripts) or as an encoding (``.gz``). An extension the table
    does not know (``.1x1``, ``.webp`` on some Pythons) is no claim about the bytes: allowed."""
    media, encoding = _MEDIA_TYPES.guess_type(file_name, strict=False)
    if encoding is not None:
        return f"ends in the extension of an encoding ({encoding}), not a raster image's"
    if media is None or (media.startswith("image/") and media != "image/svg+xml"):
        return None
    return f"has the extension .{file_name.rpartition('.')[2]} ({media}), not a raster image's"


@dataclass(frozen=True)
class NamedItem:
    """One item to name: who it is (for messages) and its field values."""

    label: str
    fields: NameFields
    #: This item's own template, when it differs from the batch's (the default's ``{fit}``).
    template: str | None = None


def assign_names(template: str, items: Iterable[NamedItem]) -> list[str]:
    """The name of every item, in order; raises NameTemplateError at the first unsafe name or the
    first two items that would share one (both named in the message). A name out of its lane
    (:func:`lane_problem`) is returned as it is, for the caller to fail its item; it is never
    published, so it shares with no other."""
    check_template(template)
    _check_literal_text(template)
    names: list[str] = []
    seen: dict[str, str] = {}
    for item in items:
        name = render_name(item.template or template, item.fields)
        problem = name_problem(name, item.fields.path)
        if problem is not None:
            raise NameTemplateError(f"name template {template!r} gives {item.label} the name {name!r}, which {problem}")
        names.append(name)
        if lane_problem(name) is not None:
            continue
        if name in seen:
            other = seen[name]
            raise NameTemplateError(
                f"name template {template!r} gives two items the same name {name!r}: {other} and {item.label}"
            )
        seen[name] = item.label
    return names
