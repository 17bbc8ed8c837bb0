"""``python -m flasheval`` (and ``accelerate launch -m flasheval``) entry point."""

import sys

from flasheval.cli import main

sys.exit(main())
