"""The ``thumbctl`` command line (Typer): :func:`main` is the console script, :data:`app` the Typer app.

Imports: anything below it, except :mod:`thumbctl.storage` and :mod:`thumbctl.imaging`: no SQL,
pixels or storage policy here.

The cyclic garbage collector is off while the command line's modules are imported: they make
long-lived objects only (classes, functions), and the collections their many allocations would
trigger find nothing to free (``docs/architecture.md``, "Start-up").
"""

import gc

_collecting = gc.isenabled()
gc.disable()
try:
    from .app import main, whole_app
finally:
    if _collecting:
        gc.enable()

del globals()["app"]  # the submodule's name here: as before, ``thumbctl.cli.app`` read as an attribute is the Typer app
__all__ = ["app", "main"]


def __getattr__(name: str) -> object:
    """:data:`app`, the whole Typer app, built on first use (a command line builds only its command)."""
    if name == "app":
        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
