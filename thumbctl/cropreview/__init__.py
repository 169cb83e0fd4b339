"""The crop review: the library behind ``thumbctl review``'s page.

Owns the photos of an OUT as the page shows them (:mod:`.photos`: grouped by content, worst score
first, filtered and paged), an Apply as a batch of the photo's names with their new fix
(:mod:`.rebatch`), who renders it (:mod:`.renders`: a ``thumbctl work`` process per batch) and the
session the page's requests call (:mod:`.session`: list, show, Apply, Reset, Approve, progress).

Imports: everything below the interfaces; never an interface.
"""
