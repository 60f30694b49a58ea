"""``python -m isagen``: the command line (see ``isagen.cli``)."""

from isagen.cli import run

run()
