"""Review: what a person looks at to judge a batch.

Owns the contact sheet (:mod:`.sheet`, its crops :mod:`.crops`), paste-ready markup
(:mod:`.markup`) and operational statistics (:mod:`.stats`).

Imports: everything below the engine; never the engine or an interface.
"""
