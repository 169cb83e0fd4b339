"""The ``thumbctl`` command line (Typer): :func:`main` is the console script, :data:`app` the Typer app.

Imports: anything below it, except :mod:`thumbctl.storage` and :mod:`thumbctl.imaging`: no SQL,
pixels or storage policy here.
"""

from .app import main, whole_app

del globals()["app"]  # the submodule's name here: as before, ``thumbctl.cli.app`` read as an attribute is the Typer app
__all__ = ["app", "main"]


def __getattr__(name: str) -> object:
    """:data:`app`, the whole Typer app, built on first use (a command line builds only its command)."""
    if name == "app":
        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
