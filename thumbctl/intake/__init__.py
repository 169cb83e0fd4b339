"""Intake: a folder, manifest or bucket turned into a recorded, admitted batch.

Owns preparing a submission (:mod:`.submission`, handing on :mod:`.prepared`): where it writes
(:mod:`.destinations`), reading its sources (:mod:`.inspection`), its items (:mod:`.items`) and
normalized request (:mod:`.request`); accepting it (:mod:`.acceptance`): what it takes over from
earlier runs (:mod:`.carryover`) and what follows (:mod:`.completion`); the two steps that keep
names in their lane (:mod:`.lanes`), outputs an earlier run made (:mod:`.reuse`), outputs rendered
again for new encoder settings (:mod:`.rerender`) and the crop fixes remembered per photo
(:mod:`.focus`).

Imports: everything below it (core, config, ledger, storage, imaging, sources, publishing).
"""
