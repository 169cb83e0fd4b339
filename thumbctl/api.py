"""The one-call Python API: submit a folder or manifest and render it, as ``thumbctl submit`` does.

::

    from thumbctl import SubmitOptions, render

    batch = render("photos", SubmitOptions(out_dir=Path("thumbs")), db="ledger.db")
    print(batch.state, batch.counts)

It records the batch durably, renders it with the worker pool until it is terminal and returns
its view; the errors are those of the command (:mod:`thumbctl.core.errors`: a rejected submission,
an idempotency conflict, a busy or unreachable ledger). Submitting the same request again
replays the batch and renders only what is missing, as on the command line.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .config.options import RunOptions, SubmitOptions
from .core.models import BatchView


def render(
    source: str | Path,
    options: SubmitOptions | None = None,
    *,
    db: str | Path | None = None,
    workers: int | None = None,
    store: str | Path | None = None,
) -> BatchView:
    """Submit ``source`` (a folder or a ``.json``/``.jsonl``/``.csv`` manifest) with ``options``
    into the ledger ``db`` (a file, or a ``postgresql://`` URL; default: the command line's, see
    :func:`default_ledger`), render it with ``workers``
    processes (default: one per CPU) and return the batch once it is terminal. The rendered objects
    are kept in ``store`` (default: ``options.store_dir``, else beside a SQLite ledger: ``ledger.store``;
    a PostgreSQL ledger needs one). Its ``state`` says
    how it ended (``succeeded``, ``partial``, ``failed``, ``cancelled``); failures are in
    ``batch.failures``."""
    from .engine.session import SubmitSession

    options = options or SubmitOptions()
    db = default_ledger() if db is None else db
    if store is not None:
        options = replace(options, store_dir=store if isinstance(store, str) and "://" in store else Path(store))
    run = RunOptions() if workers is None else RunOptions(workers=workers)
    return SubmitSession(db, options, run).run(Path(source)).batch


def default_ledger() -> Path | str:
    """The ledger ``thumbctl`` uses without ``--db``: ``THUMBCTL_DB``, else the config file's
    ``db``, else ``ledger.db`` in the per-user state folder (``~/.local/state/thumbctl`` on Linux)."""
    from .config.resolve import resolve_ledger_path

    return resolve_ledger_path(None)
