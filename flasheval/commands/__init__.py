"""One module per CLI subcommand; each exposes ``register(subparsers) -> None``.

``register`` adds the subcommand's parser and sets ``func=run`` where
``run(args: argparse.Namespace) -> int`` does the work and returns the exit code.
"""
