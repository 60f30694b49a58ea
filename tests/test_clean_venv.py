"""A plain install in a virtual environment of its own makes code objects for both targets with no
LLVM, ROCm or ziglang on the machine (issue 17), and their machine code is LLVM's.

The venv is made without the host's site-packages; isagen goes in from its wheel, and its declared
dependencies (PyYAML, numpy, msgpack) are the host's installed distributions, linked into a folder the
venv reads through a ``.pth`` file (the test must not need the package index), so the venv holds
exactly isagen and what ``pyproject.toml`` says it needs: no torch, no ziglang, no triton.  The
commands run with ``PATH`` = the venv's ``bin`` alone and no ``ROCM_PATH``/``ISAGEN_LLVM_DIR``.  The
host's LLVM then assembles the ``.s`` each build wrote, and the ``.text`` must be the same bytes.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from isagen.objects.codeobject import read_code_object
from isagen.objects.toolchain import assemble

ROOT = Path(__file__).resolve().parents[1]
SPECS = ("axpy_f32", "gemm_bf16")


def _link_distribution(name: str, into: Path) -> None:
    """Link the top-level entries (packages, modules, ``.libs`` folders, ``.dist-info``) of an installed
    distribution into ``into``."""
    dist = importlib.metadata.distribution(name)
    site = Path(dist.locate_file(""))
    tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
    for top in tops:
        if (site / top).exists() and not (into / top).exists():
            (into / top).symlink_to(site / top)


@pytest.mark.slow
def test_plain_install_in_a_clean_venv_makes_code_objects_without_llvm(tmp_path):
    wheels = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(ROOT)], check=True, cwd=tmp_path, capture_output=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", *map(str, wheels.glob("*.whl"))],
                   check=True, capture_output=True)
    deps = tmp_path / "deps"
    deps.mkdir()
    for name in ("PyYAML", "numpy", "msgpack"):
        _link_distribution(name, deps)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "isagen-test-deps.pth").write_text(f"{deps}\n")

    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path / "home"), "ISAGEN_CACHE_DIR": str(tmp_path / "cache"),
           "LANG": "C.UTF-8"}
    run = dict(env=env, cwd=tmp_path, capture_output=True, text=True)
    # what the venv holds: isagen's dependencies are met, and nothing of the heavy optional kind is there
    check = subprocess.run([str(py), "-m", "pip", "check"], **run)
    assert check.returncode == 0, check.stdout + check.stderr
    probe = subprocess.run([str(py), "-c", "import importlib.util as u, isagen; print(isagen.__file__); "
                            "print([m for m in ('torch', 'ziglang', 'triton', 'click') if u.find_spec(m)])"],
                           check=True, **run).stdout.splitlines()
    assert probe[0].startswith(str(venv)) and probe[1] == "[]"
    toolchain = subprocess.run([str(venv / "bin" / "isagen"), "toolchain"], **run)
    assert "no candidates found" in toolchain.stdout, toolchain.stdout
    for target in ("gfx942", "gfx950"):
        assert f"{target} -> none: no assembler for {target} found" in toolchain.stdout, toolchain.stdout

    out = tmp_path / "out"
    gen = subprocess.run([str(venv / "bin" / "isagen"), "gen", *(str(ROOT / "specs" / f"{s}.yaml") for s in SPECS),
                          "--target", "all", "-o", str(out)], **run)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    cos = sorted(out.glob("*.co"))
    assert len(cos) == 2 * len(SPECS), [p.name for p in out.iterdir()]
    for co in cos:
        target = "gfx950" if "gfx950" in co.name else "gfx942"
        llvm = assemble(co.with_suffix(".s").read_text(), target, name=co.stem)
        assert read_code_object(co.read_bytes()).text == read_code_object(llvm).text, co.name


def test_the_venv_gets_only_isagens_declared_dependencies():
    """The distributions the clean-venv test links are the ones pyproject.toml declares (if a
    dependency is added, that test must give it to the venv too)."""
    import re

    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert block, "pyproject.toml: no [project] dependencies list"
    names = {re.split(r"[<>=!~ ;\[]", d)[0].lower() for d in re.findall(r'"([^"]+)"', block.group(1))}
    assert names == {"pyyaml", "numpy", "msgpack"}
