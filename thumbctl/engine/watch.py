"""A watched folder (``thumbctl watch DIR``): the whole folder submitted again whenever its files
have settled, as ``submit`` would submit it (the stat cache makes unchanged files free).

A round starts only when the folder has been quiet for the settle time: every file the scan would
submit has kept its size and modification time that long, as seen by this process, and no file
appeared or went away meanwhile. A file still being written therefore holds the round back (it is
reported as waiting, however long it keeps changing); a file whose writer pauses longer than the
settle time looks finished, which is what ``--settle`` is for. The scan is that of ``submit``
(hidden entries, output folders and stores left out, ``--include`` and ``--exclude``), so what is
waited for is exactly what a round reads.

Changes wake the loop through watchfiles when it is installed (``thumbctl[watch]``), else, or with
``poll``, a scan every ``poll_seconds``. Either way each wake-up compares a fresh scan with the last
one: events only say when to look.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..config.options import RunOptions, SubmitOptions
from ..core.errors import Interrupted, RejectedError, ThumbctlError, UsageError
from ..core.faults import Faults
from ..sources.scan import scan_directory
from ..storage.outputs import looks_like_output_folder
from ..storage.ownership import is_store_folder
from .runner import RunObserver
from .session import Mirror, SilentSession, SubmitSession

if TYPE_CHECKING:
    from ..core.models import BatchView
    from ..intake.prepared import IntakeReport
    from ..upkeep.mirror import MirrorReport
    from .runner import RunResult

#: (size, modification time in ns) of a file: what must stay the same for the settle time.
Stat = tuple[int, int]


class WakeUp(StrEnum):
    """How the loop learns that something may have changed."""

    EVENTS = "watchfiles"
    POLL = "poll"


@dataclass(frozen=True)
class WatchOptions:
    #: Seconds a file's size and modification time must stay the same before a round reads it.
    settle: float = 2.0
    #: Scan on a timer even when watchfiles is installed (network folders, where inotify sees nothing).
    poll: bool = False
    #: Seconds between scans when polling.
    poll_seconds: float = 1.0
    #: ``--delete``: after each round, remove what the folder no longer publishes.
    mirror: bool = False
    #: ``--delete-dropped``: the mirror also removes sizes, formats and ratios no longer asked for.
    mirror_dropped: bool = False
    #: ``--delete-excluded``: the mirror also removes the names of photos ``--include``/``--exclude`` leave out.
    mirror_excluded: bool = False


@dataclass(frozen=True)
class Unsettled:
    """A file that changed less than the settle time ago; ``changing_for``: seconds since it was
    first seen changing (a file that never stops growing shows a growing figure)."""

    path: str
    changing_for: float


@dataclass(frozen=True)
class Round:
    """One submission of the folder and its run."""

    number: int
    batch: BatchView
    report: IntakeReport
    #: The run (None when the batch needed none: every output was there already).
    run: RunResult | None = None
    mirrored: MirrorReport | None = None

    @property
    def interrupted(self) -> bool:
        return self.run is not None and self.run.supervision.interrupted


class WatchObserver(Protocol):
    """What the watcher tells its caller (the reporter renders it; the library never prints)."""

    def watching(self, root: Path, wake_up: WakeUp, why: str | None, options: WatchOptions) -> None: ...

    def waiting(self, unsettled: Sequence[Unsettled]) -> None: ...

    def round_submitted(self, number: int, batch: BatchView, report: IntakeReport) -> None: ...

    def run_progress(self, batch_id: str) -> AbstractContextManager[RunObserver]: ...

    def round_finished(self, done: Round) -> None: ...

    def round_refused(self, number: int, error: ThumbctlError) -> None: ...


def check_watchable(text: str) -> Path:
    """DIR as a watch needs it: an existing local folder; its real path."""
    if not text.strip():
        raise UsageError("DIR is empty: name a folder", code="bad_source")
    if text.strip().lower().startswith(("s3://", "http://", "https://")):
        raise UsageError(f"DIR: {text!r} is not a local folder; watch a folder on this host", code="bad_source")
    source = Path(text)
    if not source.exists():
        raise UsageError(f"DIR {source} does not exist", code="source_not_found")
    if not source.is_dir():
        raise UsageError(
            f"DIR {source} is not a folder: watch takes a folder (submit takes a manifest)", code="bad_source"
        )
    return Path(os.path.realpath(source))


# -- settling --------------------------------------------------------------------------------------


@dataclass
class Settling:
    """The folder as seen scan after scan, and whether it is due for a round (pure: the clock is
    given, so the rules are tested without waiting)."""

    settle: float
    seen: dict[str, Stat] = field(default_factory=dict)
    #: When each file's current stat was first seen, and when it was first seen changing.
    since: dict[str, float] = field(default_factory=dict)
    changing_since: dict[str, float] = field(default_factory=dict)
    #: When a file last appeared or went away.
    listing_changed: float = float("-inf")
    #: The folder as the last round submitted it (None: no round yet).
    submitted: dict[str, Stat] | None = None

    def observe(self, stats: dict[str, Stat], now: float) -> None:
        """Take a scan of the folder at ``now``. The files of the first scan were there before the
        watch: settled unless they change (the first round still waits for a quiet folder)."""
        first = not self.seen and not self.since
        if set(stats) != set(self.seen):
            self.listing_changed = now
        for path, current in stats.items():
            if self.seen.get(path) == current or first:
                continue
            if path not in self.seen or path not in self.changing_since or self._settled(path, now):
                self.changing_since[path] = now  # a new run of changes starts
            self.since[path] = now
        for path in set(self.seen) - set(stats):
            self.since.pop(path, None)
            self.changing_since.pop(path, None)
        self.seen = stats

    def _settled(self, path: str, now: float) -> bool:
        return now - self.since.get(path, float("-inf")) >= self.settle

    def unsettled(self, now: float) -> list[Unsettled]:
        return [
            Unsettled(path, now - self.changing_since.get(path, now))
            for path in sorted(self.seen)
            if not self._settled(path, now)
        ]

    def quiet(self, now: float) -> bool:
        return now - self.listing_changed >= self.settle and not self.unsettled(now)

    def due(self, now: float) -> bool:
        """A round is due: the folder differs from what was last submitted and has been quiet."""
        return self.seen != self.submitted and self.quiet(now)

    def next_check(self, now: float) -> float | None:
        """Seconds until the folder may be quiet (None: nothing is settling)."""
        if self.seen == self.submitted:
            return None
        ends = [self.listing_changed + self.settle, *(at + self.settle for at in self.since.values())]
        return max(0.0, max(ends) - now)


# -- scanning and waking up ---------------------------------------------------------------------


@dataclass(frozen=True)
class FolderScan:
    """The files a round would read: submit's scan of the folder, with each file's stat."""

    root: Path
    options: SubmitOptions
    #: Folders never scanned: OUT and the store when they are inside DIR.
    left_out: frozenset[str]

    def skip(self, path: str) -> bool:
        return path in self.left_out or looks_like_output_folder(path) or is_store_folder(path)

    def __call__(self) -> dict[str, Stat]:
        stats = {}
        for candidate in scan_directory(self.root, self.options.rules, skip=self.skip).candidates:
            try:
                info = os.stat(candidate.path)
            except OSError:  # gone between the listing and the stat: the next scan sees it gone
                continue
            if stat.S_ISREG(info.st_mode):
                stats[candidate.item_id] = (info.st_size, info.st_mtime_ns)
        return stats

    def ignored(self, path: str) -> bool:
        """Whether a change at ``path`` is in a folder the scan leaves out (no reason to look)."""
        return any(path == folder or path.startswith(folder + os.sep) for folder in self.left_out)


class Waiter(Protocol):
    def wait(self, timeout: float | None) -> None:
        """Return after a change or ``timeout`` seconds (None: until a change or a stop)."""


class PollWaiter:
    """No events: every wait ends after ``poll_seconds`` (or sooner, at ``timeout``), so the
    caller scans again."""

    def __init__(self, poll_seconds: float, should_stop: Callable[[], bool]) -> None:
        self.poll_seconds = poll_seconds
        self.should_stop = should_stop

    def wait(self, timeout: float | None) -> None:
        end = time.monotonic() + min(self.poll_seconds, self.poll_seconds if timeout is None else timeout)
        while not self.should_stop() and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))


class _StopFlag:
    """watchfiles' ``stop_event``: anything with ``is_set()``."""

    def __init__(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop

    def is_set(self) -> bool:
        return self.should_stop()


class EventWaiter:
    """Waits on watchfiles (inotify on Linux): a wait ends at the first batch of changes in the
    folder (changes in ``ignored`` folders do not count), at ``timeout``, or on a stop."""

    TICK_MS = 250

    def __init__(self, root: Path, ignored: Callable[[str], bool], should_stop: Callable[[], bool]) -> None:
        import watchfiles

        self.should_stop = should_stop
        self.changes: Iterator[set[tuple[object, str]]] = watchfiles.watch(
            root,
            watch_filter=lambda change, path: not ignored(path),
            debounce=self.TICK_MS,
            step=50,
            stop_event=_StopFlag(should_stop),
            rust_timeout=self.TICK_MS,
            yield_on_timeout=True,
            raise_interrupt=False,
            force_polling=False,
        )

    def wait(self, timeout: float | None) -> None:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.should_stop() and (end is None or time.monotonic() < end):
            if next(self.changes, None):
                return


def open_waiter(scan: FolderScan, options: WatchOptions, should_stop: Callable[[], bool]) -> tuple[Waiter, str | None]:
    """watchfiles' waiter, or the polling one (forced, or watchfiles missing): the waiter and why it polls."""
    if options.poll:
        return PollWaiter(options.poll_seconds, should_stop), "--poll"
    try:
        return EventWaiter(scan.root, scan.ignored, should_stop), None
    except ImportError:
        return PollWaiter(options.poll_seconds, should_stop), "watchfiles is not installed"


# -- the loop ----------------------------------------------------------------------------------

#: Seconds before a round refused for a passing reason (a busy ledger, admission) is tried again,
#: doubling up to the cap.
RETRY_FIRST = 5.0
RETRY_CAP = 60.0
#: Seconds between two "waiting" reports of the same files (a file that keeps growing).
WAITING_EVERY = 5.0
#: The time between two scans is at least this many times the last scan's (at most a third of the
#: time spent scanning while files keep changing).
SCAN_SHARE = 3.0


@dataclass
class Watcher:
    """Watch ``root``; each due round submits it with ``options`` into the ledger ``db`` and renders
    it with ``run_options`` (the first Ctrl-C cancels a running round durably, as submit's does,
    and ends the watch)."""

    root: Path
    db: Path | str
    options: SubmitOptions
    run_options: RunOptions
    watch_options: WatchOptions
    observer: WatchObserver
    interrupts: Callable[[], int] = lambda: 0
    clock: Callable[[], float] = time.monotonic
    rounds: int = 0
    scan: FolderScan = field(init=False)
    settling: Settling = field(init=False)
    _waiting: tuple[str, ...] = ()
    _waiting_said: float = float("-inf")
    #: After a transient refusal (a busy ledger, admission), no round before this time.
    _retry_at: float = float("-inf")
    _refusals: int = 0
    faults: Faults = field(default_factory=Faults)

    def __post_init__(self) -> None:
        self.scan = FolderScan(self.root, self.options, _left_out(self.root, self.options))
        self.settling = Settling(self.watch_options.settle)

    def stopped(self) -> bool:
        return self.interrupts() > 0

    def run(self) -> Round | None:
        """Watch until Ctrl-C (or a round was interrupted); the last round run. The first round's
        refusal (a bad OUT, a rejected batch) ends the watch with its error."""
        waiter, why = open_waiter(self.scan, self.watch_options, self.stopped)
        self.observer.watching(
            self.root, WakeUp.POLL if isinstance(waiter, PollWaiter) else WakeUp.EVENTS, why, self.watch_options
        )
        last = None
        while not self.stopped():
            started = time.monotonic()
            done = self.check()
            if done is not None:
                last = done
                if done.interrupted:
                    break
                continue  # scan again at once: files may have changed during the round
            scanned = time.monotonic()
            waiter.wait(self._next_check())
            self._rest(SCAN_SHARE * (scanned - started) - (time.monotonic() - scanned))
        return last

    def _rest(self, seconds: float) -> None:
        """Wait ``seconds`` before the next scan, so that scanning a large folder while its files
        keep changing (a copy of thousands of photos) takes at most its share of the time. A change
        seen later only starts its settle time later: never a round sooner."""
        end = time.monotonic() + seconds
        while not self.stopped() and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))

    def check(self) -> Round | None:
        """Scan once; run a round when the folder is due for one."""
        snapshot = self.scan()
        now = self.clock()
        self.settling.observe(snapshot, now)
        if not self.settling.due(now) or now < self._retry_at:
            self._say_waiting(now)
            return None
        self._waiting = ()
        if not snapshot:  # nothing to submit; a mirror never empties OUT for a folder that looks empty
            self.settling.submitted = snapshot
            return None
        return self._round(snapshot)

    def _next_check(self) -> float | None:
        """How long to wait for a change: until the folder may be quiet (a little after, so the
        next scan finds it so), or the retry after a refusal; None: until something changes."""
        now = self.clock()
        after = self.settling.next_check(now)
        if after is not None and now < self._retry_at:
            after = max(after, self._retry_at - now)
        return None if after is None else after + 0.01

    def _say_waiting(self, now: float) -> None:
        unsettled = self.settling.unsettled(now)
        names = tuple(u.path for u in unsettled)
        if names and (names != self._waiting or now - self._waiting_said >= max(WAITING_EVERY, self.settling.settle)):
            self.observer.waiting(unsettled)
            self._waiting_said = now
        self._waiting = names
        if unsettled:
            self.faults.hit("watch_unsettled")

    def _round(self, snapshot: dict[str, Stat]) -> Round | None:
        self.rounds += 1
        try:
            done = submit_round(self, self.rounds)
        except ThumbctlError as error:
            if self.rounds == 1 or isinstance(error, UsageError):
                raise
            self.observer.round_refused(self.rounds, error)
            if error.transient and not isinstance(error, RejectedError):
                self._refusals += 1
                self._retry_at = self.clock() + min(RETRY_CAP, RETRY_FIRST * 2 ** (self._refusals - 1))
            else:
                self.settling.submitted = snapshot  # tried again at the folder's next change
            return None
        self._refusals = 0
        self.settling.submitted = snapshot
        return done


def submit_round(watcher: Watcher, number: int) -> Round | None:
    """Submit the whole folder as ``submit`` would and render the batch in the foreground; then,
    with the mirror on, remove what the folder no longer publishes (a :class:`SubmitSession` whose
    store ``watch`` settled before its first round). None when Ctrl-C came while the sources were
    read (nothing recorded)."""
    choices = watcher.watch_options
    mirror = Mirror(choices.mirror_dropped, choices.mirror_excluded) if choices.mirror else None
    observer = RoundObserver(watcher.observer, number, watcher.interrupts)
    session = SubmitSession(
        watcher.db, watcher.options, watcher.run_options, observer, mirror=mirror, settle_first=False, clear_first=False
    )
    try:
        outcome = session.run(watcher.root)
    except Interrupted:
        return None
    done = Round(number, outcome.batch, outcome.report, outcome.run, outcome.mirrored)
    watcher.observer.round_finished(done)
    return done


class RoundObserver(SilentSession):
    """A round's session as the watch observer hears it: Ctrl-C counted for the whole watch."""

    def __init__(self, observer: WatchObserver, number: int, interrupts: Callable[[], int]) -> None:
        self.observer = observer
        self.number = number
        self.interrupts = interrupts

    def counting_interrupts(self) -> AbstractContextManager[Callable[[], int]]:
        return nullcontext(self.interrupts)

    def submitted(self, batch: BatchView, report: IntakeReport, *, final: bool) -> None:
        self.observer.round_submitted(self.number, batch, report)

    def run_progress(self, batch_id: str) -> AbstractContextManager[RunObserver]:
        return self.observer.run_progress(batch_id)


def _left_out(root: Path, options: SubmitOptions) -> frozenset[str]:
    """OUT and the store, as real paths, when they are folders inside DIR (a round writes there)."""
    folders = set()
    for where in (options.out_dir, options.store_dir):
        if isinstance(where, Path):
            real = os.path.realpath(where)
            if real == str(root) or real.startswith(str(root) + os.sep):
                folders.add(real)
    return frozenset(folders)
