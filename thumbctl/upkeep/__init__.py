"""Upkeep: what an operator runs from cron, and what a run leaves tidy after itself.

Owns reconcile's findings and repairs (:mod:`.reconcile`, each :mod:`.problems` with its repair: the
ledger's rows :mod:`.rowchecks`, objects :mod:`.objectchecks`, thumbnails :mod:`.namechecks`, orphans and
temp files :mod:`.strays`), retention (:mod:`.gc`), what the ledger's
stores hold as both see it (:mod:`.inventory`: gc imports it, never reconcile), the mirror mode
(:mod:`.mirror`), handing names to the user (:mod:`.release`), telling crash leftovers from a
user's files (:mod:`.leftovers`), the one-time migration of the old output layout
(:mod:`.legacy_layout`) and the cheap check before each writing command that runs it (:mod:`.migrate`).

Imports: core, config, ledger, storage, imaging, sources and publishing; never the engine.
"""
