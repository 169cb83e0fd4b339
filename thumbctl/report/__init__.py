"""Output: the reporter (results on stdout, diagnostics on stderr, JSON on demand) and the live view
of a run. Nothing here is imported by the library below it; the CLI is its one user.

Imports: anything below the interfaces; never :mod:`thumbctl.cli`.
"""
