"""The wheel installs everything under the isagen namespace: no top-level runtime/kernels/cli."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(ROOT)], check=True, cwd=build, capture_output=True)
    wheel = next(out.glob("isagen-*.whl"))
    return zipfile.ZipFile(wheel).namelist()


def test_only_the_isagen_namespace_is_installed(wheel_names):
    tops = {n.split("/")[0] for n in wheel_names}
    assert tops == {"isagen", next(t for t in tops if t.endswith(".dist-info"))}


def test_repository_layout_maps_into_the_package(wheel_names):
    names = set(wheel_names)
    assert "isagen/kernels/__init__.py" in names
    assert "isagen/runtime/__init__.py" in names
    assert "isagen/cli.py" in names
    assert "isagen/isa/defs/common.yaml" in names
    specs = sorted(p.name for p in (ROOT / "specs").glob("*.yaml"))
    assert specs and all(f"isagen/specs/{s}" in names for s in specs)
    kernels = sorted(p.name for p in (ROOT / "kernels").glob("*.py"))
    assert all(f"isagen/kernels/{k}" in names for k in kernels)


def test_every_source_module_is_in_the_wheel(wheel_names):
    """Each layer folder (isagen/checks, builders, objects, ...) and every module under the linked
    kernels/ and runtime/ trees ships: a new subpackage missing from the package list fails here."""
    names = set(wheel_names)
    sources = {f"isagen/{p.relative_to(ROOT / 'isagen').as_posix()}" for p in (ROOT / "isagen").glob("**/*.py")
               if "__pycache__" not in p.parts}
    sources |= {f"isagen/{top}/{p.relative_to(ROOT / top).as_posix()}" for top in ("kernels", "runtime")
                for p in (ROOT / top).glob("**/*.py") if "__pycache__" not in p.parts}
    assert any(s.startswith("isagen/checks/") for s in sources)
    assert sorted(sources - names) == []
