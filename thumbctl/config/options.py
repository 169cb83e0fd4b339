"""The option objects of a submission and of a run, kept apart from the code that uses them.

They are read for defaults (``thumbctl.config.resolve``, every command's help), so this module imports
nothing heavy: no Pillow, no multiprocessing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.profile import Limits, Profile, UrlRules
from ..core.retries import Backoff
from ..core.scanrules import ScanRules
from .s3location import S3Options
from .settings import DEFAULT_SOURCE, KEYS_BY_NAME, environment_setting

#: ``reconcile`` and ``gc``: temp files whose writer may still be alive are left this long (seconds)
#: before they count as stale.
DEFAULT_GRACE = 3600.0


@dataclass(frozen=True)
class SiteMarkup:
    """How the markup and the manifests of an OUT refer to its thumbnails (``--sizes``,
    ``--base-url``): documents only, so neither is part of a derivative's key or of the request."""

    #: The ``sizes`` attribute; None: ``auto``, then the widest file's width.
    sizes: str | None = None
    #: What every URL starts with (ends in ``/``); "": paths relative to OUT.
    base_url: str = ""
    #: Where the batch documents and the catalogue's sheet go (``--documents``, as recorded); "": OUT.
    documents: str = ""

    def to_json(self) -> dict[str, object]:
        return {"sizes": self.sizes, "base_url": self.base_url, "documents": self.documents}

    @classmethod
    def from_json(cls, doc: object) -> SiteMarkup:
        """The markup recorded as ``doc`` (anything else: the defaults)."""
        if not isinstance(doc, dict):
            return cls()
        sizes, base_url, documents = doc.get("sizes"), doc.get("base_url"), doc.get("documents")
        return cls(
            sizes if isinstance(sizes, str) else None,
            base_url if isinstance(base_url, str) else "",
            documents if isinstance(documents, str) else "",
        )


#: The markup of an OUT no submit gave ``--sizes``, ``--base-url`` or ``--documents``.
DEFAULT_MARKUP = SiteMarkup()


@dataclass(frozen=True)
class SubmitOptions:
    """Everything a submission needs besides its source."""

    #: OUT: a folder, or an ``s3://bucket/prefix`` URL (text).
    out_dir: Path | str = Path("thumbs")
    profile: Profile = field(default_factory=Profile)
    limits: Limits = field(default_factory=Limits)
    rules: ScanRules = field(default_factory=ScanRules)
    key: str | None = None
    max_attempts: int = 3
    deadline_seconds: float | None = None
    #: The name template (``--name``, see :mod:`thumbctl.core.naming`); None: the default.
    name_template: str | None = None
    #: ``--overwrite``: a file at a thumbnail's name that thumbctl did not publish may be replaced.
    overwrite: bool = False
    #: ``--store``: where the objects are kept; None: beside the SQLite ledger (required for PostgreSQL).
    store_dir: Path | str | None = None
    #: ``--documents``: where the batch documents go (a folder or ``s3://``); None: OUT.
    documents_dir: Path | str | None = None
    #: What URL sources may reach, and the deadline of each download.
    url_rules: UrlRules = field(default_factory=UrlRules)
    #: How OUT's markup and manifests refer to the thumbnails (recorded for the OUT at each submit).
    markup: SiteMarkup = field(default_factory=SiteMarkup)

    def recorded_limits(self, *, urls: bool) -> dict[str, object]:
        """The limits a batch records for its workers to read its sources under; with URL sources
        (``urls``), the URL rules too."""
        limits: dict[str, object] = {"max_pixels": self.limits.max_pixels, "max_bytes": self.limits.max_bytes}
        if urls:
            limits["urls"] = self.url_rules.to_json()
        return limits


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


#: Test only: the workers' lease length in seconds, so a test sees a killed host's leases expire in
#: seconds instead of the default 30 (the heartbeat then beats every third of it).
LEASE_ENV = KEYS_BY_NAME["lease_seconds"].env


def lease_seconds(default: float) -> float:
    """The workers' lease: ``$THUMBCTL_LEASE_SECONDS`` when set (1 s to a day), else ``default``."""
    setting = environment_setting(KEYS_BY_NAME["lease_seconds"])
    return default if setting.source == DEFAULT_SOURCE else setting.value


@dataclass(frozen=True)
class RunOptions:
    workers: int = field(default_factory=default_workers)
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 10.0
    backoff: Backoff = field(default_factory=Backoff)
    item_timeout: float = 300.0
    #: Write the batch's contact sheet at the end of a foreground run.
    sheet: bool = True
    #: The S3 settings of ``s3://`` stores and outputs (the workers open theirs with them).
    s3: S3Options = field(default_factory=S3Options)
