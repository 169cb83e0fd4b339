"""The engine: rendering the items a ledger holds, in a pool of worker processes.

Owns the pool and its supervising loop (:mod:`.pool`), one worker (:mod:`.worker`: its claim loop;
:mod:`.lease`: claims and their heartbeat; :mod:`.claimrun`: one claim and its checkpoints;
:mod:`.decoding`: the source read again and decoded; :mod:`.delivery`: staging and publishing each
derivative) and its process (:mod:`.workerproc`, :mod:`.heap`), a derivative's pixels
(:mod:`.rendering`), the foreground run (:mod:`.runner`), the submit session behind ``submit``,
``retry``, ``watch`` and ``render`` (:mod:`.session`: submit, render, mirror), resuming a batch
(:mod:`.resume`) and the watched folder (:mod:`.watch`).

Imports: everything below it, and :mod:`thumbctl.upkeep` (the mirror after a run).
"""
