"""The core: plain data and rules every other package shares, with no files, database or processes.

Owns the error hierarchy (:mod:`.errors`), the values passed between packages (:mod:`.models`), a
batch's render profile (:mod:`.profile`: ratios, sizes, formats, limits) and per-format encoder
settings (:mod:`.encoders`), digests (:mod:`.keys`), admission rules (:mod:`.admission`), process
identity for leases (:mod:`.proc`), retry policies (:mod:`.retries`), redaction of secrets in
addresses (:mod:`.redact`) and the fault-injection checkpoints (:mod:`.faults`).

Imports: the standard library and tenacity only; nothing else of thumbctl.
"""
