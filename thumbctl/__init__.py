"""thumbctl: smart-cropped thumbnails in several aspect ratios, through a durable ledger.

The library works on its own; the ``thumbctl`` command is a thin layer over it. One call submits
and renders, as ``thumbctl submit`` does::

    from thumbctl import SubmitOptions, render

    batch = render("photos", SubmitOptions(out_dir=Path("thumbs")))  # the ledger thumbctl uses
    print(batch.batch_id, batch.state, batch.counts)

The steps apart (record now, render later with ``thumbctl work``)::

    from thumbctl import Ledger, SubmitOptions, default_ledger, prepare_submission, submit

    with Ledger(default_ledger()) as ledger:
        prepared = prepare_submission(Path("photos"), SubmitOptions(out_dir=Path("thumbs")), ledger)
        batch = submit(ledger, prepared, SubmitOptions().limits)
"""

import sys
from _signal import SIG_BLOCK, SIGINT, pthread_sigmask, raise_signal


def _started_as_the_command() -> bool:
    """Whether this interpreter was started to run the ``thumbctl`` command: ``python -m thumbctl``
    (``sys.argv[0]`` is ``-m`` while runpy imports the package) or the console script (the
    ``__main__`` script named ``thumbctl``). A program that imports the library is neither."""
    if sys.argv[:1] == ["-m"]:
        started = sys.orig_argv
        return "-mthumbctl" in started or started[started.index("-m") + 1 :][:1] == ["thumbctl"]
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    return script is not None and script == sys.argv[0] and script.rsplit("/", 1)[-1] == "thumbctl"


# Before anything else the command imports: Ctrl-C is held back (blocked, so it stays pending), not
# raised in the middle of an import. The command takes it where it can act on it and report it
# (thumbctl.cli.session.interruptible). ``_signal``, not ``signal``: it is loaded at start, while
# ``signal`` would first import modules, a window in which a press would end in a traceback.
try:
    if _started_as_the_command():
        pthread_sigmask(SIG_BLOCK, (SIGINT,))
except KeyboardInterrupt:  # pressed before the mask took hold: pending again, for the command to report
    if not _started_as_the_command():
        raise
    pthread_sigmask(SIG_BLOCK, (SIGINT,))
    raise_signal(SIGINT)

import importlib  # noqa: E402 - after the Ctrl-C hold above
from typing import TYPE_CHECKING, Any  # noqa: E402

if TYPE_CHECKING:
    from .api import default_ledger, render
    from .config.options import SubmitOptions
    from .core.errors import (
        EXIT_CODE_MEANINGS,
        ITEM_ERROR_CODES,
        ExitCode,
        IdempotencyConflict,
        ItemFailure,
        RejectedError,
        ThumbctlError,
        UnavailableError,
        UsageError,
    )
    from .core.models import BatchView, EventView, ItemView
    from .core.profile import Limits, Profile, Ratio, parse_ratio, parse_ratios
    from .core.scanrules import ScanRules
    from .intake.acceptance import submit
    from .intake.prepared import IntakeReport, PreparedSubmission
    from .intake.submission import prepare_submission
    from .ledger import Ledger

from .core.version import __version__ as __version__  # noqa: E402

__all__ = [
    "EXIT_CODE_MEANINGS",
    "ITEM_ERROR_CODES",
    "BatchView",
    "EventView",
    "ExitCode",
    "IdempotencyConflict",
    "IntakeReport",
    "ItemFailure",
    "ItemView",
    "Ledger",
    "Limits",
    "PreparedSubmission",
    "Profile",
    "Ratio",
    "RejectedError",
    "ScanRules",
    "SubmitOptions",
    "ThumbctlError",
    "UnavailableError",
    "UsageError",
    "default_ledger",
    "parse_ratio",
    "parse_ratios",
    "prepare_submission",
    "render",
    "submit",
]

#: Where each public name lives. They are imported on first use, so ``import thumbctl`` (and every
#: command that needs neither Pillow nor the worker pool) stays cheap: see :func:`__getattr__`.
_EXPORTS = {
    "EXIT_CODE_MEANINGS": "core.errors",
    "ITEM_ERROR_CODES": "core.errors",
    "ExitCode": "core.errors",
    "IdempotencyConflict": "core.errors",
    "ItemFailure": "core.errors",
    "RejectedError": "core.errors",
    "ThumbctlError": "core.errors",
    "UnavailableError": "core.errors",
    "UsageError": "core.errors",
    "IntakeReport": "intake.prepared",
    "PreparedSubmission": "intake.prepared",
    "SubmitOptions": "config.options",
    "prepare_submission": "intake.submission",
    "submit": "intake.acceptance",
    "render": "api",
    "default_ledger": "api",
    "Ledger": "ledger",
    "BatchView": "core.models",
    "EventView": "core.models",
    "ItemView": "core.models",
    "Limits": "core.profile",
    "Profile": "core.profile",
    "Ratio": "core.profile",
    "parse_ratio": "core.profile",
    "parse_ratios": "core.profile",
    "ScanRules": "core.scanrules",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and cache the name here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
