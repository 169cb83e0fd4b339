"""thumbctl's version, written once: the package shows it as ``thumbctl.__version__``."""

__version__ = "0.1.0"
