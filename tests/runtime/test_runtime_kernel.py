"""``isagen.build`` / ``Kernel``: the launch contract, kernel-argument packing checked against the code
object's metadata as LLVM reads it, and one clear error line for every kind of bad call."""

from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest
import torch
import yaml

import isagen
from isagen.builders.contract import LaunchInfo, ScalarParam, TensorParam, evaluate
from isagen.errors import IsagenError, LaunchError, SpecError

SPECS = ("axpy_f32", "add_bf16", "scale_f16")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ISAGEN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("ISAGEN_BACKEND", "emu")
    yield {name: isagen.build(name, "gfx942") for name in SPECS}
    mp.undo()


# --------------------------------------------------------------------------- the contract
def test_expressions():
    env = {"n": 1000, "m": 7}
    assert evaluate("cdiv(n, 256)", env) == 4 and evaluate("max(m, 8) * 2 - n % 3", env) == 15
    assert evaluate("n * 4 + 1024 <= 4096", env) is False and evaluate(12, env) == 12
    with pytest.raises(SpecError, match="names 'k', which is not a size"):
        evaluate("cdiv(k, 2)", env, "grid[0]")
    for bad in ("__import__('os')", "n.bit_length()", "n / 2", "n ** 2", "[n]", "1.5 * n"):
        with pytest.raises(SpecError):
            evaluate(bad, env)
    with pytest.raises(LaunchError, match="divides by zero"):
        evaluate("n // (m - 7)", env)


def test_launch_info_round_trips_and_checks_requirements():
    info = LaunchInfo(tensors=(TensorParam("a", "bf16", ("m", "k")), TensorParam("c", "f32", ("m", 16), "out")),
                      scalars=(ScalarParam("eps", "f32", 1e-6),), grid=("cdiv(m, tile)", 1, 1), block=(256, 1, 1),
                      requires=(("k % 8 == 0", "k must be a multiple of 8"),), constants={"tile": 64})
    assert LaunchInfo.from_json(info.to_json()) == info
    assert info.size_symbols == ["m", "k"] and info.grid_for({"m": 1000, "k": 64}) == (16, 1, 1)
    with pytest.raises(LaunchError, match=r"k must be a multiple of 8 \(m=1000, k=60\)"):
        info.grid_for({"m": 1000, "k": 60})
    assert info.source_of("a") == ("tensor", "a") and info.source_of("eps") == ("scalar", "eps")
    assert info.source_of("m") == ("size", "m")
    with pytest.raises(SpecError, match="names a twice"):
        LaunchInfo(tensors=(TensorParam("a", "f32", ("n",)),), scalars=(ScalarParam("a", "f32"),))


def test_kernel_signature_matches_the_spec(kernels):
    k = kernels["axpy_f32"]
    assert [(t.name, t.dtype, t.shape, t.role) for t in k.launch.tensors] == \
        [("x", "f32", ("n",), "in"), ("y", "f32", ("n",), "inout")]
    assert [(s.name, s.dtype) for s in k.launch.scalars] == [("alpha", "f32")]
    assert k.launch.block == (256, 1, 1) and k.target == "gfx942" and k.symbol == "axpy_f32"
    z = kernels["add_bf16"]
    assert [(t.name, t.role) for t in z.launch.tensors] == [("x", "in"), ("y", "in"), ("z", "out")]
    assert "add_bf16(x: bf16[n], y: bf16[n], z: bf16[n])" in repr(z)


# --------------------------------------------------------------------------- kernarg packing vs the .co
def _readelf_args(co: bytes, tmp_path) -> dict:
    path = tmp_path / "k.co"
    path.write_bytes(co)
    out = subprocess.run(["llvm-readelf-19", "--notes", str(path)], capture_output=True, text=True, check=True).stdout
    text = out[out.index("---"):out.index("...", out.index("---")) + 3]
    (kd,) = yaml.safe_load(text.replace("!str ", ""))["amdhsa.kernels"]
    return kd


@pytest.mark.skipif(not shutil.which("llvm-readelf-19"), reason="llvm-readelf-19 not installed")
@pytest.mark.parametrize("name", SPECS)
def test_packed_kernargs_match_the_code_object_metadata(kernels, name, tmp_path):
    """Bind a real call, pack it, and decode the blob with the offsets, sizes and kinds LLVM reads from
    the code object's metadata note: every argument holds what the call gave."""
    k = kernels[name]
    kd = _readelf_args(k.code_object, tmp_path)
    n = 1001
    tensors = {t.name: torch.zeros(n, dtype=isagen.api.torch_dtype(t.dtype)) for t in k.launch.tensors}
    scalars = {s.name: 1.75 for s in k.launch.scalars}
    bound, values, sizes = k.bind((), {**tensors, **scalars})
    blob = k.args.pack(**values)
    assert len(blob) == kd[".kernarg_segment_size"] and sizes == {"n": n}
    covered = set()
    for md in kd[".args"]:
        off, size, name_ = md[".offset"], md[".size"], str(md[".name"])
        covered.update(range(off, off + size))
        raw = blob[off:off + size]
        if md[".value_kind"] == "global_buffer":
            assert size == 8 and struct.unpack("<Q", raw)[0] == tensors[name_].data_ptr()
        elif name_ == "n":
            assert struct.unpack("<I", raw)[0] == n
        else:
            assert size == 4 and struct.unpack("<f", raw)[0] == np.float32(scalars[name_])
    assert {str(md[".name"]) for md in kd[".args"]} == {a.name for a in k.args}
    # bytes no metadata argument covers are padding (HIP does not deliver them): they must be zero
    assert all(blob[i] == 0 for i in range(len(blob)) if i not in covered)
    assert kd[".max_flat_workgroup_size"] == k.launch.block[0] and kd[".name"] == name


# --------------------------------------------------------------------------- bad calls: one line each
def _err(fn, *args, **kwargs) -> str:
    with pytest.raises(IsagenError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_bad_calls_name_the_argument(kernels):
    k = kernels["axpy_f32"]
    x, y = torch.randn(100), torch.randn(100)
    assert "tensor 'x' has dtype torch.float64, expected torch.float32" in _err(k, x.double(), y, alpha=1.0)
    assert "tensor 'y' has shape (99,) (n=99), but tensor 'x' has n=100" in _err(k, x, y[:99], alpha=1.0)
    assert "tensor 'x' has shape (10, 10), expected 1 dimension(s) [n]" in _err(k, x.view(10, 10), y, alpha=1.0)
    assert "tensor 'x' is not contiguous" in _err(k, torch.randn(200)[::2], y, alpha=1.0)
    assert "tensor 'y' is on meta; the emulator backend takes CPU tensors" in \
        _err(k, x, torch.empty(100, device="meta"), alpha=1.0)
    assert "missing scalar argument 'alpha' (f32)" in _err(k, x, y)
    assert "unknown argument(s) beta" in _err(k, x, y, alpha=1.0, beta=2.0)
    assert "missing tensor argument(s): y" in _err(k, x, alpha=1.0)
    assert "argument 'alpha' is f32; got 'two'" in _err(k, x, y, alpha="two")
    assert "argument 'y' must be a torch.Tensor, got ndarray" in _err(k, x, y.numpy(), alpha=1.0)
    assert "tensor 'x' given twice" in _err(k, x, y, x=x, alpha=1.0)
    assert "takes 2 tensor(s) (x, y), got 3" in _err(k, x, y, y, alpha=1.0)
    assert "unknown backend backend='cuda'" in _err(k.run, x, y, alpha=1.0, backend="cuda")
    assert "axpy_f32: scalar 'alpha' (f32) must be a Python number, got a torch.Tensor (pass .item())" in \
        _err(k, x, y, alpha=torch.tensor(2.0))
    assert "axpy_f32: argument 'alpha' = 1e+39 does not fit in f32" in _err(k, x, y, alpha=1e39)


def test_bad_builds_name_the_spec():
    msg = _err(isagen.build, "axpy_f33")
    assert "unknown spec 'axpy_f33' (did you mean 'axpy_f32'?)" in msg
    assert "no such spec file" in _err(isagen.build, "nowhere/k.yaml")
    assert "params.block" in _err(isagen.build, "axpy_f32", "gfx942", block=100)
    assert "unknown parameter 'blok'" in _err(isagen.build, "axpy_f32", "gfx942", blok=128)
    assert "unsupported target 'gfx90a'" in _err(isagen.build, "axpy_f32", "gfx90a")
    with pytest.raises(SpecError):
        isagen.build("axpy_f33")


def test_import_isagen_stays_light():
    code = "import sys, isagen; assert 'torch' not in sys.modules and 'yaml' not in sys.modules; " \
           "assert callable(isagen.build) and isagen.Kernel.__name__ == 'Kernel'"
    subprocess.run([__import__("sys").executable, "-c", code], check=True,
                   env={**__import__("os").environ,
                        "PYTHONPATH": str(__import__("pathlib").Path(isagen.__file__).parent.parent)})


# --------------------------------------------------------------------------- running (the emulator)
@pytest.mark.parametrize("n", [1, 1001, 4096, 6145])
def test_elementwise_kernels_match_torch_in_the_emulator(kernels, n):
    g = torch.Generator().manual_seed(n)
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    # f32 axpy: one fused multiply-add, so the float64 result rounded once (within an ulp)
    yk = y.clone()
    out = kernels["axpy_f32"](x, yk, alpha=-1.375)
    assert out is yk
    torch.testing.assert_close(yk, (-1.375 * x.double() + y.double()).float(), rtol=1.2e-7, atol=1e-30)
    # bf16 add and f16 scale: fp32 math rounded to nearest even, as torch's own CPU ops do: bit-exact
    xb, yb, zb = x.bfloat16(), y.bfloat16(), torch.full((n,), float("nan"), dtype=torch.bfloat16)
    kernels["add_bf16"](xb, yb, zb)
    assert torch.equal(zb, xb + yb)
    xh, yh = x.half(), torch.zeros(n, dtype=torch.float16)
    r = kernels["scale_f16"].run(xh, yh, alpha=0.3, timing=True)
    assert torch.equal(yh, xh * 0.3)
    assert r.backend == "emu" and r.grid == (-(-n // 4096), 1, 1) and r.block == (256, 1, 1)
    assert r.stats["wave_instructions"] > 0 and r.time_ms > 0


def test_an_empty_problem_launches_nothing(kernels):
    x, y = torch.empty(0), torch.empty(0)
    r = kernels["axpy_f32"].run(x, y, alpha=1.0)
    assert r.grid == (0, 1, 1) and r.stats is None
