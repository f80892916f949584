"""``python -m biosig_lightning`` is the ``biosig`` command."""

from biosig_lightning.cli import entry_point

if __name__ == "__main__":
    entry_point()
