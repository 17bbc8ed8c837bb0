"""flasheval: place a language-model checkpoint on a reference leaderboard cheaply.

The public API is re-exported from the private modules below as they land.
"""

from flasheval.errors import FlashevalError, InputError

__version__ = "0.1.0"

__all__ = ["FlashevalError", "InputError", "__version__"]
