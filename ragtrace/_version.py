"""The package version, in a module of its own that imports nothing, so that any module can read it."""

__version__ = "0.1.0"
