"""thumbctl: smart-cropped thumbnails in several aspect ratios, through a durable ledger.

The library works on its own; the ``thumbctl`` command is a thin layer over it::

    from thumbctl import Ledger, SubmitOptions, prepare_submission, submit

    with Ledger("ledger.db") as ledger:
        prepared = prepare_submission(Path("photos"), SubmitOptions(out_dir=Path("thumbs")), ledger)
        batch = submit(ledger, prepared, SubmitOptions().limits)
        print(batch.batch_id, batch.state, batch.counts)
"""

from .errors import (
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
from .intake import IntakeReport, PreparedSubmission, SubmitOptions, prepare_submission, submit
from .ledger import Ledger
from .models import BatchView, EventView, ItemView
from .settings import Limits, Profile, Ratio, parse_ratio, parse_ratios
from .sources import ScanRules

__version__ = "0.1.0"

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
    "parse_ratio",
    "parse_ratios",
    "prepare_submission",
    "submit",
]
