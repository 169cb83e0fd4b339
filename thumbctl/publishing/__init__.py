"""Publishing: the one place where the ledger and storage meet.

Owns the publisher (:mod:`.publisher`: the per-name lock, the check of the name, the publish and the
commit), thumbnail names from a template (:mod:`.naming`), which store a ledger uses and the binding
of the two (:mod:`.stores`), and where a batch writes (:mod:`.targets`).

Imports: :mod:`thumbctl.core`, :mod:`thumbctl.config`, :mod:`thumbctl.ledger`, :mod:`thumbctl.storage`,
:mod:`thumbctl.imaging`, :mod:`thumbctl.sources`.
"""
