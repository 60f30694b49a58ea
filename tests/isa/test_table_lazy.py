"""The ISA table makes a definition on first use of its name (issue 17: a kernel uses a few dozen
of the ~450 opcodes); what a caller sees is the same as a table made whole."""

import subprocess
import sys

import pytest

from isagen.isa.table import InstrDef, isa_table
from isagen.targets import TARGETS


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_name_makes_its_definition_once(target):
    table = isa_table(target)
    names = list(table.defs)
    assert len(names) == len(table) == len(set(names))
    for name in names:
        d = table[name]
        assert isinstance(d, InstrDef) and d.name == name
        assert table[name] is d and table.defs[name] is d       # made once: the same object after
    assert [d.name for d in table] == names                    # iteration keeps the table's order


def test_a_build_makes_only_the_definitions_it_uses():
    code = ("from isagen.builders.spec import load_spec, bundled_specs_dir\n"
            "from isagen.isa.table import isa_table\n"
            "p = load_spec(str(bundled_specs_dir() / 'axpy_f32.yaml')).build('gfx942')\n"
            "defs = isa_table('gfx942').defs\n"
            "used = {i.desc.name for i in p.instructions()}\n"
            "print(len(defs._made), len(used), len(defs), used <= set(defs._made))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    made, used, total, covered = int(out[0]), int(out[1]), int(out[2]), out[3]
    assert covered == "True" and used <= made < total // 4
