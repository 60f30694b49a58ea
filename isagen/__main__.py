"""``python -m isagen``: the command line (see ``isagen.cli``)."""

from isagen.cli import exit_now, main

exit_now(main())
