"""This package's version, in a module of its own so that any layer can read it without
importing ``parl`` itself (whose ``__init__`` names every layer)."""

__version__ = "0.1.0"
