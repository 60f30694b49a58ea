"""GPU tests of the hip backend: run on a ROCm machine with a gfx942/gfx950 GPU and hip-python
(``pytest -m rocm``); skipped elsewhere with the reason.  They check the elementwise kernels against
torch on the device, the launch on torch's current stream, one module load per process, one HIP
runtime in the process, the arch-mismatch refusal on the real device, and the torch ops on GPU
tensors."""

from __future__ import annotations

import pytest
import torch

import isagen
from isagen.errors import LaunchError
from isagen.runtime.gpu import rocm_gpu_available

_ok, _why = rocm_gpu_available()
if _ok:
    try:
        import hip  # noqa: F401
    except ImportError:
        _ok, _why = False, "hip-python is not installed (pip install 'isagen[rocm]')"

pytestmark = [pytest.mark.rocm, pytest.mark.skipif(not _ok, reason=f"needs an AMD GPU with ROCm: {_why}")]

SPECS = ("axpy_f32", "add_bf16", "scale_f16")


@pytest.fixture(scope="module")
def arch():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName.split(":")[0]


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("n", [1, 255, 4097, 1 << 20])
def test_elementwise_on_the_gpu_matches_torch(name, n, arch):
    from isagen.runtime.run import compare, reference
    k = isagen.build(name, arch)
    dtype = isagen.api.torch_dtype(k.launch.tensors[0].dtype, arch)
    tensors = {t.name: torch.randn(n, device="cuda").to(dtype) for t in k.launch.tensors}
    before = {n_: t.clone() for n_, t in tensors.items()}
    scalars = {s.name: 1.25 for s in k.launch.scalars}
    result = k.run(**tensors, **scalars, backend="hip")
    assert result.backend == "hip"
    want = reference(k, before, scalars, {"n": n})
    for t in k.launch.tensors:
        if t.written:
            assert compare(t.name, tensors[t.name], want[t.name], t.dtype).ok
        else:
            assert torch.equal(tensors[t.name], before[t.name])       # inputs untouched


def test_launch_orders_with_torch_stream_and_times(arch):
    k = isagen.build("axpy_f32", arch)
    s = torch.cuda.Stream()
    x, y = torch.randn(1 << 20, device="cuda"), torch.zeros(1 << 20, device="cuda")
    with torch.cuda.stream(s):
        y.fill_(1.0)                           # queued on s; the kernel must run after it on s
        r = k.run(x, y, alpha=2.0, backend="hip", timing=True)
    s.synchronize()
    assert torch.allclose(y, 2.0 * x + 1.0) and r.time_ms > 0


def test_one_module_load_and_one_hip_runtime(arch):
    from isagen.runtime.backends import hip as hipb
    k = isagen.build("axpy_f32", arch)
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    k(x, y, alpha=1.0)
    loaded = dict(hipb._modules)
    k(x, y, alpha=1.0)
    assert hipb._modules == loaded
    assert len(hipb.hip_runtime_copies()) == 1, hipb.hip_runtime_copies()


def test_arch_mismatch_refused_on_the_device(arch):
    other = "gfx950" if arch == "gfx942" else "gfx942"
    k = isagen.build("axpy_f32", other)
    x, y = torch.randn(100, device="cuda"), torch.randn(100, device="cuda")
    with pytest.raises(LaunchError, match=f"built for {other}.*GPU is {arch}"):
        k(x, y, alpha=1.0)


def test_cpu_tensor_refused_by_hip(arch):
    k = isagen.build("axpy_f32", arch)
    with pytest.raises(LaunchError, match="tensor 'x' is on cpu; the hip backend runs on the GPU"):
        k.run(torch.randn(10), torch.randn(10, device="cuda"), alpha=1.0, backend="hip")


def test_torch_ops_on_gpu_tensors(arch):
    import isagen.runtime.torch_ops  # noqa: F401
    x = torch.randn(3000, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(3000, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(torch.ops.isagen.add_bf16(x, y), x + y)
    xf, yf = x.float(), y.float()
    torch.testing.assert_close(torch.ops.isagen.axpy(xf, yf, 0.5), 0.5 * xf + yf)
