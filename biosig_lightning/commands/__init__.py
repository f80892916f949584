"""Subcommands, one module each with ``run(argv)``; the CLI dispatches to them (nothing imports this package)."""
