"""``python -m isagen``: the command line (see ``isagen.cli``)."""

import sys

from isagen.cli import main

sys.exit(main())
