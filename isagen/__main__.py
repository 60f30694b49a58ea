"""``python -m isagen``: the command line (see ``isagen.cli``)."""

import gc

# importing the command line (the target table, the assembler's modules) makes ~20 collections of the youngest
# generation, which find nothing: modules, classes and functions live to the end (issue 17)
gc.disable()
from isagen.cli import run  # noqa: E402

gc.enable()
run()
