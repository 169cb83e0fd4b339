"""The ``thumbctl`` command line (Typer): :func:`main` is the console script, :data:`app` the Typer app."""

from .app import app, main

__all__ = ["app", "main"]
