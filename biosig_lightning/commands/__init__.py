"""Subcommands of the ``biosig`` console script, one module each with ``run(argv)``."""
