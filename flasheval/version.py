"""The package version (its own module, so that every layer can read it without importing the API)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
