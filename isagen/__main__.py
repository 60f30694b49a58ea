"""``python -m isagen``: the command line (see ``isagen.cli``)."""

import gc

# importing the command line (the target table, the assembler's modules) makes ~20 collections of the youngest
# generation, which find nothing: modules, classes and functions live to the end (issue 17).  What
# the import made goes to the permanent generation (gc.freeze): left in the youngest, the first
# collection after it would scan all of it, and the next ones carry it up the generations.
gc.disable()
from isagen.cli import run  # noqa: E402

gc.freeze()
gc.enable()
run()
