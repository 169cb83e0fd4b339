"""Storage behind one seam: an object store (:mod:`.objects`) and an output target (:mod:`.outputs`),
each an interface with the local folder as its first implementation, over the descriptor-safe file
primitives of :mod:`.fsafe`. Publishing at a name follows one set of rules (:mod:`.publishing`) on
every target, through each target's name slot (a local folder's: :mod:`.localslot`). Nothing here
imports the ledger.

Imports: :mod:`thumbctl.core`, :mod:`thumbctl.config` and :mod:`thumbctl.imaging` (a name's format
sniffed for its Content-Type); never the ledger.
"""
