"""The ``thumbctl`` command line (Typer): :func:`main` is the console script, :data:`app` the Typer app.

The cyclic garbage collector is off while the command line's modules are imported: they make
long-lived objects only, and collections triggered by their many allocations found nothing to free
(``docs/architecture.md``, "Start-up and Typer").
"""

import gc

_collecting = gc.isenabled()
gc.disable()
try:
    from .app import app, main
finally:
    if _collecting:
        gc.enable()

__all__ = ["app", "main"]
