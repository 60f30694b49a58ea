"""Every architecture fact goes through ``isagen.targets``: no processor name (``gfx942``, ``gfx90a``
...) is spelled in code outside isagen/targets.py.

What counts: every string constant in the code of isagen/, kernels/, runtime/ and cli.py, including
the pieces of f-strings, help texts and error messages (those take the names from ``TARGETS``).
What does not: docstrings (module, class and function) and comments, which may keep naming the
targets they describe; tools/ and tests/, which are not the product.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("isagen", "kernels", "runtime", "cli.py")
EXEMPT = {"isagen/targets.py"}
PROCESSOR = re.compile(r"gfx9[0-9][0-9a-z]")


def arch_literals(source: str, filename: str) -> list[str]:
    """``filename:line: 'literal'`` for each string constant in code that names a gfx9 processor."""
    tree = ast.parse(source, filename)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docstrings.add(id(first.value))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if PROCESSOR.search(node.value):
                found.append((node.lineno, f"{filename}:{node.lineno}: {node.value!r}"))
    return [text for _, text in sorted(found)]


def scanned_files() -> list[str]:
    """Repository-relative paths of the .py files scanned, each real file once: isagen/kernels,
    isagen/runtime and isagen/cli.py are symlinks to the top-level folders and are not followed."""
    out = []
    for top in SCANNED:
        path = ROOT / top
        if path.is_file():
            out.append(top)
            continue
        for folder, dirs, files in os.walk(path):        # os.walk does not descend into symlinks
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                file = Path(folder) / name
                if name.endswith(".py") and not file.is_symlink():
                    out.append(file.relative_to(ROOT).as_posix())
    return [p for p in out if p not in EXEMPT]


def test_scan_covers_every_code_file_once():
    files = scanned_files()
    assert len(files) == len({(ROOT / f).resolve() for f in files})
    for expected in ("cli.py", "kernels/gemm.py", "runtime/emu/mfma.py", "isagen/isa/decoder.py",
                     "isagen/objects/toolchain.py"):
        assert expected in files
    assert "isagen/targets.py" not in files and not any(f.startswith(("tests/", "tools/")) for f in files)


def test_no_processor_names_in_code_outside_targets():
    offenders = [hit for f in scanned_files()
                 for hit in arch_literals((ROOT / f).read_text(encoding="utf-8"), f)]
    assert not offenders, ("processor names spelled outside isagen/targets.py (use TARGETS, DEFAULT_TARGET "
                           "or a Target field):\n" + "\n".join(offenders))


PLANTED = '''"""Module docstring naming gfx942 is fine."""
# a comment naming gfx950 is fine
LDS_BANKS = 64 if target == "gfx950" else 32


def f(t):
    """So is a function docstring about gfx942."""
    return f"unsupported {t} (supported: gfx942, gfx90a)"


class C:
    """And a class docstring (gfx950)."""
    names = ("gfx940",)
'''


def test_planted_literals_are_reported_with_file_and_line():
    assert arch_literals(PLANTED, "planted.py") == [
        "planted.py:3: 'gfx950'",
        "planted.py:8: ' (supported: gfx942, gfx90a)'",
        "planted.py:13: 'gfx940'",
    ]


def test_names_built_from_the_table_are_not_literals():
    clean = 'from isagen.targets import TARGETS\nHELP = f"one of {\', \'.join(TARGETS)}"\n'
    assert arch_literals(clean, "clean.py") == []
