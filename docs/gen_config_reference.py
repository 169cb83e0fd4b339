"""Write the settings tables of docs/configuration.md from the settings table (thumbctl/configkeys.py).

Run from anywhere: ``python docs/gen_config_reference.py`` (``--check`` exits 1 when a table is out of
date instead of writing it). Each table sits between a pair of markers in docs/configuration.md
(``<!-- begin NAME: generated ... -->`` and ``<!-- end NAME -->``); the prose around them is written
by hand. ``tests/test_docs.py`` regenerates them in memory and fails when they differ.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "configuration.md"
sys.path.insert(0, str(ROOT))

from thumbctl.config.resolve import CONFIG_ENV, ENVIRONMENT_KEYS, KEYS, PROFILE_ENV, Key, display_value  # noqa: E402


def cell(text: str) -> str:
    """Text fit for a table cell: a ``|``, even inside backticks, would end the cell."""
    return text.replace("|", "\\|")


def flag_of(key: Key) -> str:
    if not key.flag:
        return "(none: variable or file)"
    option = f"{key.flag}/--no-{key.flag[2:]}" if key.switch else key.flag
    text = f"`{option} {key.metavar}`" if key.metavar else f"`{option}`"
    if key.short:
        text += f", `{key.short}`"
    return text + (" (repeat)" if key.repeat else "")


def default_of(key: Key) -> str:
    return key.doc_default or f"`{display_value(key.name, key.default())}`"


def meaning_of(key: Key) -> str:
    if key.doc:
        return key.doc
    text = key.help.rstrip(".")
    return text[:1].lower() + text[1:]


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def settings_table() -> str:
    rows = [(f"`{key.name}`", flag_of(key), f"`{key.env}`", default_of(key), meaning_of(key)) for key in KEYS]
    return table(("key", "flag", "variable", "default", "meaning"), rows)


def environment_table() -> str:
    rows = [(f"`{key.name}`", f"`{key.env}`", default_of(key), meaning_of(key)) for key in ENVIRONMENT_KEYS]
    return table(("setting", "variable", "default", "meaning"), rows)


def variables_table() -> str:
    rows = [
        (f"`{CONFIG_ENV}`", "the config file to read instead of `./thumbctl.toml` or the per-user one"),
        (f"`{PROFILE_ENV}`", "`--profile`"),
    ]
    rows += [
        (f"`{key.env}`", f"`{key.flag}`, file key `{key.name}`" if key.flag else f"file key `{key.name}`")
        for key in KEYS
    ]
    rows += [(f"`{key.env}`", f"setting `{key.name}` (no flag, no file key)") for key in ENVIRONMENT_KEYS]
    return table(("variable", "flag / file key"), rows)


TABLES: dict[str, Callable[[], str]] = {
    "settings": settings_table,
    "environment-settings": environment_table,
    "variables": variables_table,
}


def regenerated(text: str) -> str:
    """``text`` (docs/configuration.md) with every generated table written afresh."""
    for name, build in TABLES.items():
        pattern = re.compile(rf"(<!-- begin {name}: [^\n]*-->\n).*?(\n<!-- end {name} -->)", re.S)
        if not pattern.search(text):
            raise RuntimeError(f"{TARGET.name} has no markers for the table {name!r}")
        text = pattern.sub(lambda match, build=build: match.group(1) + build() + match.group(2), text)
    return text


def main(argv: list[str]) -> int:
    current = TARGET.read_text()
    text = regenerated(current)
    if "--check" in argv:
        if current != text:
            print("docs/configuration.md is stale: run python docs/gen_config_reference.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote the settings tables of {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
