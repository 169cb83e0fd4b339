"""Intake: a folder, manifest or bucket turned into a recorded, admitted batch.

Owns the submission (:mod:`.submission`: normalize, digest, admit, record), the two steps that keep
names in their lane (:mod:`.lanes`), outputs an earlier run made (:mod:`.reuse`), outputs rendered
again for new encoder settings (:mod:`.rerender`) and the crop fixes remembered per photo
(:mod:`.focus`).

Imports: everything below it (core, config, ledger, storage, imaging, sources, publishing).
"""
