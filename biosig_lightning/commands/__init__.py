"""The ``biosig`` subcommands, one module each with ``run(argv: list[str]) -> None``.

``biosig_lightning.cli`` dispatches the command word to these modules; nothing else imports them.
The run-directory library they share is :mod:`biosig_lightning.runs`; the maths of the analysis
commands is in :mod:`biosig_lightning.analysis`.
"""
