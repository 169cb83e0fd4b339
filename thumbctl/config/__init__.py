"""Configuration: every setting once, and where a command's value for it comes from.

Owns the settings table (:mod:`.settings`: each setting's file key, variable, option, parser and
default), the config file (:mod:`.file`), resolution (:mod:`.resolve`: flag > ``THUMBCTL_*``
environment > config file > default), the option objects of a submission and a run
(:mod:`.options`), the per-user folders (:mod:`.userdirs`) and the ``s3://`` location parser
(:mod:`.s3location`).

Imports: :mod:`thumbctl.core` only. Lower layers receive the values; they never read the table.
"""
