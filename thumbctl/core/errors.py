"""Errors: one small hierarchy, each carrying a stable code and an exit code.

Two families live here:

* :class:`ThumbctlError` and its subclasses end a *command* (a rejected
  submission, an idempotency conflict, a busy ledger). The CLI maps them to
  exit codes in one place.
* :class:`ItemFailure` ends or delays one *item*. Its code is one of
  :data:`ITEM_ERROR_CODES`; whether it is retried is decided there, in one
  place, by :func:`is_transient`.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes, as documented in the README and ``--help``."""

    OK = 0
    PARTIAL = 1
    USAGE = 2
    CONFLICT = 3
    CANCELLED = 4
    REJECTED = 65
    LEDGER_DAMAGED = 74
    UNAVAILABLE = 75
    INTERRUPTED = 130


EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success (batch succeeded, or the command did what was asked)",
    ExitCode.PARTIAL: "finished, but some items failed — or reconcile found problems",
    ExitCode.USAGE: "usage error (bad flags, unknown batch, no PostgreSQL driver for a postgresql:// --db, "
    "a PostgreSQL login or database the server refuses)",
    ExitCode.CONFLICT: "idempotency conflict: the key was already used with different content",
    ExitCode.CANCELLED: "the batch was cancelled",
    ExitCode.REJECTED: "submission rejected permanently: retrying cannot help",
    ExitCode.LEDGER_DAMAGED: "the ledger is damaged (ledger_corrupt) or was deleted or replaced while in use "
    "(ledger_gone): retrying cannot help; the message says how to recover",
    ExitCode.UNAVAILABLE: "temporarily unavailable (queue saturated; ledger busy, full or unwritable; PostgreSQL "
    "server down, starting or out of connections): retry later",
    ExitCode.INTERRUPTED: "interrupted by Ctrl-C",
}


class ThumbctlError(Exception):
    """Base of every error that ends a command.

    ``code`` is a stable snake_case string, ``transient`` says whether the
    same call may succeed later, ``exit_code`` is what the CLI exits with.
    """

    code: str = "error"
    transient: bool = False
    exit_code: ExitCode = ExitCode.PARTIAL

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code

    def to_json(self) -> dict[str, object]:
        """What ``--json`` prints on stdout when a command fails, so a script always gets a document."""
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "transient": self.transient,
                "exit_code": int(self.exit_code),
            }
        }


class UsageError(ThumbctlError):
    """The command line itself is wrong (exit 2)."""

    code = "usage"
    exit_code = ExitCode.USAGE


class BatchNotFound(UsageError):
    code = "batch_not_found"


class BatchIdAmbiguous(UsageError):
    """A batch id prefix that more than one batch starts with."""

    code = "batch_id_ambiguous"


class ItemNotFound(UsageError):
    code = "item_not_found"


class ReviewConflict(UsageError):
    """The review page applied to a photo that changed since it was shown (another tab, a submit)."""

    code = "review_conflict"


class LedgerMissing(UsageError):
    """The ledger file named (by --db, THUMBCTL_DB or the config) does not exist."""

    code = "no_ledger"


class CannotWrite(UsageError):
    """A file the user named (a report, a metrics file) cannot be written there."""

    code = "cannot_write"


class StoreRequired(UsageError):
    """A PostgreSQL ledger has no default store: ``--store`` (or THUMBCTL_STORE, config key store) must name one."""

    code = "store_required"


class StoreTaken(UsageError):
    """The store named belongs to another ledger: gc's reference check of either ledger would be unsafe."""

    code = "store_taken"


class ConfigError(UsageError):
    """A setting from the config file or a ``THUMBCTL_*`` variable is wrong (exit 2); the message says where."""

    code = "config_error"


class StorageError(ThumbctlError):
    """A file operation the command needed was refused (permissions, a full disk); exit 1."""

    code = "io_error"
    exit_code = ExitCode.PARTIAL


class BucketMissing(UsageError):
    """The S3 bucket of a store or output target does not exist (exit 2)."""

    code = "bucket_missing"


class BucketForbidden(UsageError):
    """The S3 server refuses access to the bucket: wrong or missing credentials, or no permission (exit 2)."""

    code = "bucket_forbidden"


class BadS3Settings(UsageError):
    """An S3 endpoint (option, AWS_ENDPOINT_URL or profile) that is no http(s) URL of a host (exit 2)."""

    code = "bad_s3_settings"


class RejectedError(ThumbctlError):
    """The submission can never be accepted as it is (exit 65)."""

    code = "rejected"
    exit_code = ExitCode.REJECTED


class IdempotencyConflict(ThumbctlError):
    """The idempotency key was already used for a different request (exit 3)."""

    code = "idempotency_conflict"
    exit_code = ExitCode.CONFLICT

    def __init__(self, message: str, *, batch_id: str) -> None:
        super().__init__(message)
        self.batch_id = batch_id


class UnavailableError(ThumbctlError):
    """Try again later (exit 75). ``retry_after`` is a hint in seconds."""

    code = "unavailable"
    transient = True
    exit_code = ExitCode.UNAVAILABLE

    def __init__(self, message: str, *, code: str | None = None, retry_after: float = 30.0) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class AdmissionRefused(UnavailableError):
    code = "admission_refused"


class StorageUnreachable(UnavailableError, OSError):
    """The S3 server cannot be reached now, or answers 5xx after the retries (exit 75). Also an
    OSError, so a worker fails the item with the transient ``io_error`` and it is tried again."""

    code = "storage_unreachable"


class LedgerFault(ThumbctlError):
    """The ledger itself failed a statement (busy, full, unwritable, damaged, gone).

    The ledger backends (:mod:`thumbctl.ledger.connection` for SQLite, :mod:`thumbctl.ledger.postgres`)
    are the one place that turns database errors into these.
    """

    code = "ledger_fault"


class LedgerUnavailable(LedgerFault, UnavailableError):
    """The ledger cannot be written now, for a reason that can go away (exit 75)."""

    code = "ledger_unavailable"


class LedgerBusy(LedgerUnavailable):
    """Another process held the write lock past the busy policy's bound."""

    code = "ledger_busy"


class LedgerContention(LedgerBusy):
    """A server ledger broke a deadlock between two transactions (or a serialization conflict):
    the one rolled back is run again at once, within the busy policy's bound."""


class LedgerConnectionLost(LedgerUnavailable):
    """The connection to a server ledger broke (a restart, a network cut): reopened and the
    operation run again, within the busy policy's bound, before this ends a command."""

    code = "ledger_unavailable"


class LedgerFull(LedgerUnavailable):
    """The disk (or the file system's quota) holding the ledger is full."""

    code = "ledger_full"


class LedgerIOError(LedgerUnavailable):
    """The ledger's file cannot be read or written (I/O error, read-only file system or mount)."""

    code = "ledger_io_error"


class LedgerDamaged(LedgerFault):
    """The ledger cannot be used as it is, and waiting will not change that (exit 74)."""

    code = "ledger_damaged"
    exit_code = ExitCode.LEDGER_DAMAGED


class LedgerCorrupt(LedgerDamaged):
    """SQLite found damaged pages in the ledger."""

    code = "ledger_corrupt"


class RowDamaged(LedgerCorrupt):
    """One stored value the command needs does not parse (JSON cut short, text garbled): the rest of
    the ledger is sound. Names the table, the row and the column, and the way out."""

    def __init__(self, table: str, row: object, column: str, detail: str, way_out: str) -> None:
        super().__init__(f"the ledger's {table} row {row} has a damaged {column} ({detail}): {way_out}")
        self.table, self.row, self.column = table, row, column

    def to_json(self) -> dict[str, object]:
        """The error document, with ``damaged_row`` (table, row, column): one row, not the whole ledger."""
        doc = super().to_json()
        doc["error"]["damaged_row"] = {"table": self.table, "row": str(self.row), "column": self.column}  # type: ignore[index]
        return doc


class LedgerGone(LedgerDamaged):
    """The ledger file was deleted or replaced while this process had it open."""

    code = "ledger_gone"


class LedgerError(ThumbctlError):
    """The ledger file cannot be used (not a database, newer schema, unwritable)."""

    code = "ledger_error"
    exit_code = ExitCode.USAGE


class LedgerLoginRefused(LedgerError):
    """A PostgreSQL server refused this login for good: no such role or database, a wrong
    password, or no rule admitting it (exit 2: retrying the same URL cannot succeed)."""

    code = "ledger_login_refused"


class Interrupted(ThumbctlError):
    """The user pressed Ctrl-C (exit 130)."""

    code = "interrupted"
    exit_code = ExitCode.INTERRUPTED


#: Item error codes: code -> (transient?, what it means). The one place that
#: classifies failures as retryable or not.
ITEM_ERROR_CODES: dict[str, tuple[bool, str]] = {
    "unsupported_format": (
        False,
        "content is not an image format thumbctl reads, or not a regular file (a FIFO, a device)",
    ),
    "corrupt_image": (False, "a recognised format that fails to decode"),
    "too_many_pixels": (False, "over the pixel limit, read from the header"),
    "too_large": (False, "source file over the byte limit"),
    "source_missing": (False, "the source vanished, or a symlink dangles; a URL source answered 404 or 410"),
    "source_changed": (False, "content differs from the digest accepted at submit"),
    "path_outside_root": (
        False,
        "the source resolves outside the submitted root or is reached through a symlink swapped in after submit, "
        "or an output would be written through a symlink in OUT (or above it, swapped in after submit)",
    ),
    "unsafe_name": (False, "the file name cannot be an item id (not UTF-8, control characters, a backslash, too long)"),
    "bad_name": (
        False,
        "the thumbnail's name (from --name and the source's path) lies in OUT/batches/, where the batch documents "
        "live, or has an extension that is not an image's (.html, .json); nothing is written (choose another --name)",
    ),
    "name_taken": (
        False,
        "a file thumbctl did not publish is at the thumbnail's name; it is left as it is (--overwrite replaces it)",
    ),
    "store_not_on_host": (
        False,
        "this worker's host lacks the local store folder the ledger recorded (a PostgreSQL ledger's local store "
        "must be on a filesystem every worker host shares, at the same path)",
    ),
    "out_not_on_host": (
        False,
        "this worker's host lacks the local output folder the batch recorded (a PostgreSQL ledger's local OUT "
        "must be on a filesystem every worker host shares, at the same path)",
    ),
    "source_unreachable": (
        True,
        "a URL source could not be downloaded for now: its name did not resolve, the connection failed, or it "
        "answered 429 or 5xx on every try",
    ),
    "source_timeout": (True, "a URL source's download (redirects and retries included) passed --download-timeout"),
    "source_forbidden_address": (
        False,
        "a URL source (or a redirect) is not http/https, is under no --allow-url prefix, names credentials, or its "
        "host is a loopback, private, link-local, multicast, reserved or IPv4-carrying IPv6 address that no "
        "--allow-network admits; it is never connected to",
    ),
    "source_http_error": (
        False,
        "a URL source answered a 4xx other than 404/410 (those are source_missing) or another status that is no "
        "image, led through more than 5 redirects, or its TLS certificate does not verify",
    ),
    "worker_crashed": (True, "the worker died while rendering this item"),
    "timeout": (False, "the decode of the source or one render took longer than --item-timeout"),
    "deadline_exceeded": (False, "the batch deadline passed"),
    "io_error": (True, "permission denied, symlink loop or another OS error"),
    "attempts_exhausted": (False, "every attempt of the retry budget failed"),
    "ledger_corrupt": (
        False,
        "the item's row in the ledger was damaged (a stored value that does not parse); reconcile --repair "
        "recorded it failed so that retry renders it again",
    ),
}


def is_transient(code: str) -> bool:
    """Whether an item failing with ``code`` may be retried."""
    return ITEM_ERROR_CODES.get(code, (False, ""))[0]


class ItemFailure(Exception):
    """One item cannot be produced; ``code`` is a key of ITEM_ERROR_CODES."""

    def __init__(self, code: str, detail: str) -> None:
        if code not in ITEM_ERROR_CODES:
            raise ValueError(f"unknown item error code {code!r}")
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail

    @property
    def transient(self) -> bool:
        return is_transient(self.code)
