"""The reporter: output for people and programs, Rich on a terminal, plain lines elsewhere, JSON on
demand (see :mod:`thumbctl.report.output` for which stream a line goes to).

Each command's reports live with their concept: a run's (:mod:`.runs`, with the mirror's in
:mod:`.mirror`), the reading commands' (:mod:`.views`), upkeep's (:mod:`.upkeep`), a watch's
(:mod:`.watch`), the catalogue's (:mod:`.catalogue`); the live view of a run is :mod:`.progress`.
"""

from __future__ import annotations

from .catalogue import CatalogueReports
from .runs import RunReports
from .upkeep import UpkeepReports
from .views import ViewReports
from .watch import WatchReports


class Reporter(RunReports, ViewReports, UpkeepReports, WatchReports, CatalogueReports):
    """Renders results on stdout and diagnostics on stderr; ``json_mode`` sends one document to
    stdout instead of the results.

    ``stdout`` is a shorthand for a results console writing to that file.
    """
