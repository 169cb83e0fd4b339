"""The crops on a contact sheet: the windows drawn on the source's frame, one tile per crop
at its true aspect ratio with its caption, and the command that fixes it (:class:`FixLines`: no
folder of the machine is written into OUT, so a photo outside the home folder is named from the
folder that holds its source root, and the page says so: :func:`paste_note`).

What each fit kept is drawn: a cover output's window (solid), a contain output's whole photo area
(dashed) with its padding shaded on the tile, and a trimmed source's box (dotted, once per source).
"""

from __future__ import annotations

import base64
import functools
import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from ..config.s3location import is_s3
from ..config.userdirs import default_ledger_path
from ..core.display import score_text
from ..core.models import ItemView
from ..core.redact import shown_source

FRAME_BOX = (196, 160)  # the source's preview fits in this many CSS px


def relative_href(path: str, page_dir: str) -> str:
    """A URL to ``path`` relative to the page, percent-encoded (names may hold ``#``, ``?``, ``%``);
    a public ``http(s)://`` URL as it is."""
    if path.startswith(("http://", "https://")):
        return path
    folder, name = os.path.split(path)
    if not (os.path.isabs(folder) and os.path.isabs(page_dir)):  # relative to the working folder: not cached
        return quote(os.path.relpath(path, page_dir), safe="/")
    relative = _relative_folder(folder, page_dir)
    return quote(name if relative == "." else f"{relative}/{name}", safe="/")


@functools.lru_cache(maxsize=4096)
def _relative_folder(folder: str, page_dir: str) -> str:
    """``os.path.relpath`` of an absolute folder, once per folder: a sheet links thousands of files
    that lie in a few folders."""
    return os.path.relpath(folder, page_dir)


def source_frame(
    size: tuple[int, int] | None, items: list[ItemView], colours: dict[str, str], photo: bytes | None = None
) -> str:
    """The source scaled down (its preview, or an outline when there is none) with each recorded
    crop window drawn on it once (the derivatives of a ratio share theirs)."""
    if not size:
        return ""
    width, height = size
    scale = min(FRAME_BOX[0] / width, FRAME_BOX[1] / height)
    box_w, box_h = max(1, round(width * scale)), max(1, round(height * scale))
    distinct: dict[tuple[str, tuple[int, int, int, int] | None], ItemView] = {}
    for item in items:
        distinct.setdefault((item.ratio, crop_box(item)), item)
    windows = "".join(crop_window(item, size, colours[item.ratio]) for item in distinct.values())
    trims = {box for item in items if (box := result_box(item, "trim")) is not None}
    windows += "".join(box_span("trimmed", "trimmed box", box, size, "#57534e") for box in sorted(trims))
    picture = (
        f'<img class="photo" src="data:image/jpeg;base64,{base64.b64encode(photo).decode("ascii")}" '
        f'width="{box_w}" height="{box_h}" alt="">'
        if photo
        else ""
    )
    kind = "frame photo" if photo else "frame"
    return (
        f'<div class="{kind}" style="width:{box_w}px;height:{box_h}px" '
        f'role="img" aria-label="crop windows on the source">{picture}{windows}</div>'
    )


def recrop_line(item: ItemView, size: tuple[int, int] | None, db_flag: str = "", base: str | None = None) -> str | None:
    """The ``thumbctl focus`` command that fixes this crop centred where it is now (``--at``, to edit):
    remembered for the photo's content at this ratio, so every later submit renders it so. None when no
    window was recorded. ``db_flag``: `` --db LEDGER`` when the ledger is not the default one;
    ``base``: the folder the line runs in, for a photo outside the home folder (see :func:`shell_path`)."""
    box = crop_box(item)
    if box is None or not size or fit_of(item) != "cover":
        return None
    left, top, right, bottom = box
    x, y = round((left + right) / 2 / size[0], 3), round((top + bottom) / 2 / size[1], 3)
    return f"thumbctl focus {shell_source(item.source, base)} --ratio {item.ratio} --at {x:g},{y:g}{db_flag}"


def shell_source(source: str, base: str | None = None) -> str:
    """A source as a pasted command line names it: a URL or ``s3://`` key as shown (no secret in it),
    a local path as :func:`shell_path` writes it; quoted."""
    if "://" in source:
        return shlex.quote(shown_source(source))
    return shell_path(source, base)


def shell_path(path: str, base: str | None = None) -> str:
    """A local path for a command line, quoted: ``~/…`` under the home folder (the shell expands it),
    else relative to ``base`` (the folder a line from a page in OUT runs in: no folder of the machine
    is written into OUT), else as it is."""
    home = os.path.expanduser("~").rstrip("/")
    if path.startswith(home + "/"):
        return "~/" + shlex.quote(path[len(home) + 1 :])
    if base is not None and not is_s3(base):
        return shlex.quote(os.path.relpath(path, base))
    return shlex.quote(path)


def paste_note(roots: Iterable[str | None]) -> str | None:
    """What a page says of its fix lines when some name photos from the folder that holds their
    root (:func:`paste_base`): where to run them. None when every line works pasted anywhere."""
    names = sorted({os.path.basename(root.rstrip("/")) + "/" for root in roots if root and paste_base(root)})
    return f"run them in the folder that holds {', '.join(names)}" if names else None


def paste_base(root: str | None) -> str | None:
    """The folder a pasted fix line of a photo under ``root`` runs in: the one that holds the root
    (where a seller runs ``thumbctl submit photos``); None for a root under the home folder, a
    bucket's, or none (the lines then work pasted anywhere)."""
    if root is None or is_s3(root) or "://" in root:
        return None
    home = os.path.expanduser("~").rstrip("/")
    return None if root.startswith(home + "/") else os.path.dirname(root.rstrip("/"))


def crop_window(item: ItemView, size: tuple[int, int], colour: str) -> str:
    box = crop_box(item)
    if box is None:
        return ""
    fit = fit_of(item)
    kind = "window" if fit == "cover" else f"window {fit}"
    return box_span(kind, item.ratio if fit == "cover" else f"{item.ratio} {fit}", box, size, colour)


def box_span(kind: str, title: str, box: tuple[int, int, int, int], size: tuple[int, int], colour: str) -> str:
    """A box of ``size``'s frame (in its pixels), drawn in percent of it."""
    width, height = size
    left, top, right, bottom = box
    return (
        f'<span class="{kind}" title="{escape(title)}" style="--c:{colour};'
        f"left:{100 * left / width:.2f}%;top:{100 * top / height:.2f}%;"
        f'width:{100 * (right - left) / width:.2f}%;height:{100 * (bottom - top) / height:.2f}%"></span>'
    )


def fit_of(item: ItemView) -> str:
    """``cover`` (what every output without a recorded fit is) or ``contain``."""
    return str((item.result or {}).get("fit", "cover"))


def result_box(item: ItemView, name: str) -> tuple[int, int, int, int] | None:
    """A box the render recorded under ``name`` (``trim``, ``placed``), if any."""
    value = (item.result or {}).get(name)
    if not isinstance(value, list) or len(value) != 4:
        return None
    left, top, right, bottom = (int(v) for v in value)
    return left, top, right, bottom


def crop_box(item: ItemView) -> tuple[int, int, int, int] | None:
    """The crop window the render recorded, if any (outputs reused at submit record none)."""
    crop = (item.result or {}).get("crop")
    if not isinstance(crop, dict) or len(crop.get("box") or ()) != 4:
        return None
    left, top, right, bottom = (int(v) for v in crop["box"])
    return left, top, right, bottom


def crop_figure(
    item: ItemView, path: str, page_dir: str, colour: str, recrop: str | None = None, caption: str | None = None
) -> str:
    """A crop at its true aspect ratio, linked to the full-size output, with its crop-fix command and
    ``caption`` (HTML; default :func:`crop_caption`).

    Loaded eagerly: a lazy image off screen stays blank in a printout or a headless screenshot."""
    href = escape(relative_href(path, page_dir))
    out_w, out_h = output_size(item)
    dims = f'width="{out_w}" height="{out_h}"' if out_w else f'style="aspect-ratio:{ratio_css(item.ratio)}"'
    alt = escape(f"{item.item_id} {item.ratio}")
    line = (
        f'<code class="recrop" title="the command that fixes this crop: edit --at (x,y in 0..1), run it, '
        f'submit the folder again">'
        f"{escape(recrop)}</code>"
        if recrop
        else ""
    )
    placed = result_box(item, "placed")
    padding = (
        box_span("placed", "the photo; around it, padding", placed, (out_w, out_h), colour) if placed and out_w else ""
    )
    return (
        f'<figure class="tile" style="--c:{colour}"><a href="{href}">'
        f'<img src="{href}" {dims} alt="{alt}">{padding}</a>{line}'
        f"<figcaption>{crop_caption(item) if caption is None else caption}</figcaption></figure>"
    )


def output_size(item: ItemView) -> tuple[int, int] | tuple[None, None]:
    result = item.result or {}
    width, height = result.get("width"), result.get("height")
    if isinstance(width, int) and isinstance(height, int):
        return width, height
    return None, None


def crop_caption(item: ItemView) -> str:
    """``1:1 512×512`` then ``smart 0.81 · 1200×1200 at 310,0`` (the window in source pixels)."""
    out_w, out_h = output_size(item)
    first = f'<span class="ratio">{escape(item.ratio)}</span> {out_w}×{out_h}' if out_w else escape(item.ratio)
    second = crop_text(item)
    if crop_box(item) is not None and (item.result or {}).get("source_smaller_than_target"):
        second += " · source smaller than asked"
    return f"{first}<br>{second}"


def crop_text(item: ItemView) -> str:
    """``smart 0.81 · 1200×1200 at 310,0``: the policy, score and window (source pixels) of a render."""
    crop = (item.result or {}).get("crop")
    box = crop_box(item)
    if not isinstance(crop, dict) or box is None:
        return '<span class="muted">no crop recorded (output reused)</span>'
    left, top, right, bottom = box
    trim = result_box(item, "trim")
    trimmed = f" · trimmed to {trim[2] - trim[0]}×{trim[3] - trim[1]} at {trim[0]},{trim[1]}" if trim else ""
    placed = result_box(item, "placed")
    if fit_of(item) == "contain" and placed is not None:
        at = f"{placed[2] - placed[0]}×{placed[3] - placed[1]} at {placed[0]},{placed[1]}"
        return f"contain · whole photo {right - left}×{bottom - top}, placed {at}, padded{trimmed}"
    score = crop.get("score")
    shown_score = f" {score_text(score)}" if isinstance(score, int | float) else ""
    policy = escape(str(crop.get("policy", "")))
    return f"{policy}{shown_score} · {right - left}×{bottom - top} at {left},{top}{trimmed}"


def ratio_css(ratio: str) -> str:
    """``16:9`` -> ``16 / 9`` for CSS ``aspect-ratio``; anything unexpected -> a square."""
    w, _, h = ratio.partition(":")
    return f"{int(w)} / {int(h)}" if w.isdigit() and h.isdigit() and int(w) and int(h) else "1 / 1"


@dataclass(frozen=True)
class FixLines:
    """How a page writes its fix lines: the ledger they name (``--db``, see :func:`db_flag_of`; ""
    names none) and, per source (by item id), the folder a line runs in when its photo lies outside
    the home folder (:func:`paste_base`)."""

    ledger: str = ""
    bases: dict[str, str | None] = field(default_factory=dict)

    def line(self, item: ItemView, size: tuple[int, int] | None) -> str | None:
        base = self.bases.get(item.item_id)
        return recrop_line(item, size, db_flag_of(self.ledger, base) if self.ledger else "", base)


def db_flag_of(ledger: str, base: str | None = None) -> str:
    """`` --db LEDGER`` for a command pasted from a page, or "" for the default ledger: a file as
    ``~/…``, relative to ``base`` (see :func:`shell_path`) or in full, a server URL without its
    password (libpq finds it in PGPASSWORD or ~/.pgpass)."""
    if "://" in ledger:
        return f" --db {shlex.quote(without_password(ledger))}"
    if Path(ledger) == default_ledger_path():
        return ""
    return f" --db {shell_path(os.path.abspath(ledger), base)}"


def without_password(url: str) -> str:
    """A server URL without the password of its user part (``postgresql://shop@db/thumbs``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=user + host))
