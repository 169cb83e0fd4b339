"""Sources: what a submission names and how thumbctl reads it.

Owns the folder scan and safe reads under a root (:mod:`.scan`), manifests (:mod:`.manifest`), the
entries a submission names (:mod:`.entries`), item ids and friendly-name stems (:mod:`.itemids`) and
bounded, checked URL downloads (:mod:`.downloads`).

Imports: :mod:`thumbctl.core`, :mod:`thumbctl.config`, :mod:`thumbctl.storage` (S3 reads) and
:mod:`thumbctl.imaging` (format sniffing).
"""
