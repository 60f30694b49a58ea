"""The hip backend, as far as a machine without an AMD GPU allows: hip-python imports, error mapping
with hip-python's real ``hipError_t``, the launch config and kernarg blob handed to
``hipModuleLaunchKernel``, the once-per-process module cache, the arch-mismatch refusal (checked
against llvm-readelf's reading of the code object) and the one-HIP-runtime check."""

from __future__ import annotations

import ctypes
import re
import shutil
import struct
import subprocess
import types

import pytest

from isagen.errors import IsagenError, LaunchError

hip_python = pytest.importorskip("hip.hip", reason="hip-python is not installed (pip install 'isagen[rocm]')")
from isagen.runtime import gpu  # noqa: E402
from isagen.runtime.backends import hip as hipb  # noqa: E402

E = hip_python.hipError_t


# --------------------------------------------------------------------------- code objects for the tests
def _tiny_program(target: str):
    from isagen.builders.program import KernelBuilder
    k = KernelBuilder("tiny", target, workgroup_size=64)
    k.args.pointer("x", "f32", "read_only")
    k.args.pointer("y", "f32")
    k.args.value("n", "i32")
    k.args.value("alpha", "f32")
    k.free(k.tid)
    return k.finish(check=False)


@pytest.fixture(scope="module")
def code_objects():
    """Real code objects: gfx942 and gfx950 with the production target ID, and gfx942 feature-any."""
    from isagen.objects import emit, toolchain
    out = {}
    for tid in ("gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-", "gfx942"):
        program = _tiny_program(tid.split(":")[0])
        try:
            out[tid] = toolchain.assemble(emit.render_assembly(program, tid), tid)
        except IsagenError as e:
            pytest.skip(f"no assembler for {tid}: {e}")
    return out


# --------------------------------------------------------------------------- import and constants
def test_hip_python_imports_without_rocm_and_fails_lazily():
    assert hip_python.HIP_LAUNCH_PARAM_BUFFER_POINTER == 1
    assert hip_python.HIP_LAUNCH_PARAM_BUFFER_SIZE == 2
    assert hip_python.HIP_LAUNCH_PARAM_END == 3
    assert hipb.hip_api() is hip_python


def test_errors_are_named_from_the_real_enum():
    # values from HIP's hip_runtime_api.h (hipError_t), the names hip-python mirrors
    published = {"hipErrorInvalidValue": 1, "hipErrorOutOfMemory": 2, "hipErrorInvalidDeviceFunction": 98,
                 "hipErrorInvalidImage": 200, "hipErrorNoBinaryForGpu": 209, "hipErrorNotFound": 500,
                 "hipErrorIllegalAddress": 700, "hipErrorLaunchFailure": 719}
    for name, value in published.items():
        err = getattr(E, name)
        assert int(err) == value
        with pytest.raises(hipb.HipError) as info:
            hipb.check((err, None), "hipModuleLoadData(kernel 'axpy')", hip_python)
        assert str(info.value) == f"hipModuleLoadData(kernel 'axpy') failed: {name} ({value})"
        assert info.value.name == name and info.value.code == value
        assert isinstance(info.value, LaunchError)
    assert hipb.check((E.hipSuccess, "module"), "x", hip_python) == "module"
    assert hipb.check((E.hipSuccess, 1, 2), "x", hip_python) == (1, 2)
    assert hipb.check((E.hipSuccess,), "x", hip_python) is None


def test_missing_hip_runtime_is_one_clear_line(code_objects):
    """Here libamdhip64.so does not exist: hip-python's lazy dlopen error becomes a LaunchError."""
    with pytest.raises(LaunchError, match=r"hipModuleLoadData.*cannot load the HIP runtime.*libamdhip64"):
        hipb.call(hip_python, "hipModuleLoadData", code_objects["gfx942:sramecc+:xnack-"],
                  what="hipModuleLoadData(kernel 'tiny')")


def test_real_hip_python_takes_the_launch_arguments():
    """hip-python converts every argument before its lazy dlopen: the exact values ``launch`` and
    ``HipModule.function`` hand it (int stream, int address of the extra config, bytes name) get as
    far as loading the runtime, which is missing here; a value of the wrong type would fail first."""
    blob = _tiny_program("gfx942").args.pack(x=0x1000, y=0x2000, n=10, alpha=1.0)
    with pytest.raises(LaunchError, match="cannot load the HIP runtime"):
        hipb.launch(None, (4, 1, 1), (64, 1, 1), blob, stream=0x5EED, hip=hip_python)
    with pytest.raises(LaunchError, match="cannot load the HIP runtime"):
        hipb.call(hip_python, "hipModuleGetFunction", None, b"tiny", what="hipModuleGetFunction('tiny')")
    with pytest.raises(TypeError):                                    # what a wrong argument type gives
        hip_python.hipModuleLaunchKernel(None, 4, 1, 1, 64, 1, 1, 0, 0x5EED, None, "config")


# --------------------------------------------------------------------------- arch checks
@pytest.mark.skipif(not shutil.which("llvm-readelf-19"), reason="llvm-readelf-19 not installed")
def test_code_object_target_agrees_with_llvm_readelf(code_objects):
    for tid, co in code_objects.items():
        path = f"/tmp/isagen-test-{tid.replace(':', '_')}.co"
        with open(path, "wb") as f:
            f.write(co)
        out = subprocess.run(["llvm-readelf-19", "-h", "--notes", path], capture_output=True, text=True).stdout
        line = next(ln for ln in out.splitlines() if "Flags:" in ln)     # LLVM 19 names no gfx950 here...
        proc = re.search(r"amdhsa.target:\s+'?amdgcn-amd-amdhsa--(gfx\d+)", out).group(1)   # ...but its notes do
        ours = hipb.code_object_target(co)
        assert ours.processor == proc == tid.split(":")[0]
        for feat in ("sramecc", "xnack"):
            m = re.search(rf"{feat}([+-])", line)
            assert getattr(ours, feat) == (m.group(1) if m else None), (tid, line)


def test_arch_mismatch_is_refused_naming_both(code_objects):
    co950 = code_objects["gfx950:sramecc+:xnack-"]
    with pytest.raises(LaunchError) as info:
        hipb.check_arch(co950, "gfx942:sramecc+:xnack-", "kernel 'tiny'")
    msg = str(info.value)
    assert "gfx950" in msg and "gfx942:sramecc+:xnack-" in msg and "\n" not in msg
    co942 = code_objects["gfx942:sramecc+:xnack-"]
    hipb.check_arch(co942, "gfx942:sramecc+:xnack-")          # same ID: fine
    with pytest.raises(LaunchError, match=r"sramecc\+ code does not load with sramecc-"):
        hipb.check_arch(co942, "gfx942:sramecc-:xnack-")
    hipb.check_arch(code_objects["gfx942"], "gfx942:sramecc-:xnack+")   # feature-any loads anywhere
    with pytest.raises(IsagenError, match="not a 64-bit ELF"):
        hipb.code_object_target(b"not an elf")


# --------------------------------------------------------------------------- one HIP runtime
def test_single_runtime_check_reads_proc_maps():
    torch_copy = "/opt/venv/lib/python3.11/site-packages/torch/lib/libamdhip64.so"
    one = (f"7f00-7f10 r--p 00000000 08:01 11 {torch_copy}\n"
           f"7f10-7f20 r-xp 00010000 08:01 11 {torch_copy}\n"
           "7f20-7f30 r--p 00000000 08:01 12 /usr/lib/libc.so.6\n")
    assert hipb.hip_runtime_copies(one) == [torch_copy]
    hipb.check_single_runtime(one)
    two = one + "7f40-7f50 r-xp 00000000 08:01 13 /opt/rocm-6.4.1/lib/libamdhip64.so.6.4.60401\n"
    with pytest.raises(LaunchError) as info:
        hipb.check_single_runtime(two)
    assert torch_copy in str(info.value) and "/opt/rocm-6.4.1/lib/libamdhip64.so.6.4.60401" in str(info.value)
    assert "import torch before" in str(info.value)
    assert hipb.hip_runtime_copies() == []          # this process: no HIP runtime mapped at all


# --------------------------------------------------------------------------- launching (recorded, not run)
class FakeHip(types.SimpleNamespace):
    """hip-python's surface with the real enum and constants; records what a launch hands to HIP,
    reading the kernarg blob through the config array as HIP's loader would."""

    def __init__(self):
        super().__init__(hipError_t=E, HIP_LAUNCH_PARAM_BUFFER_POINTER=hip_python.HIP_LAUNCH_PARAM_BUFFER_POINTER,
                         HIP_LAUNCH_PARAM_BUFFER_SIZE=hip_python.HIP_LAUNCH_PARAM_BUFFER_SIZE,
                         HIP_LAUNCH_PARAM_END=hip_python.HIP_LAUNCH_PARAM_END, loads=[], lookups=[], launches=[],
                         launch_error=None)

    def hipModuleLoadData(self, image):
        self.loads.append(bytes(image))
        return (E.hipSuccess, f"module{len(self.loads)}")

    def hipModuleGetFunction(self, module, name):
        self.lookups.append((module, name))
        if name == b"missing":
            return (E.hipErrorNotFound, None)
        return (E.hipSuccess, (module, name))

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        cfg = (ctypes.c_void_p * 5).from_address(extra)
        keys = [cfg[0], cfg[2], cfg[4]]
        size = ctypes.c_size_t.from_address(cfg[3]).value
        blob = ctypes.string_at(cfg[1], size)
        self.launches.append(dict(f=f, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared, stream=stream,
                                  params=params, keys=keys, blob=blob))
        return (self.launch_error or E.hipSuccess,)


def test_launch_hands_hip_the_packed_blob(code_objects):
    args = _tiny_program("gfx942").args
    blob = args.pack(x=0x7F0000001000, y=0x7F0000002000, n=1000, alpha=2.5)
    fake = FakeHip()
    hipb.launch("fn", (4, 1, 1), (64, 1, 1), blob, stream=0xABCDEF, hip=fake)
    (rec,) = fake.launches
    assert rec["keys"] == [1, 2, 3]                 # BUFFER_POINTER, BUFFER_SIZE, END
    assert rec["params"] is None                    # exactly one of kernelParams / extra
    assert rec["blob"] == blob and len(blob) == 24
    assert struct.unpack("<QQif", blob) == (0x7F0000001000, 0x7F0000002000, 1000, 2.5)
    assert rec["grid"] == (4, 1, 1) and rec["block"] == (64, 1, 1) and rec["stream"] == 0xABCDEF
    fake.launch_error = E.hipErrorLaunchFailure
    with pytest.raises(hipb.HipError, match=r"hipModuleLaunchKernel\(grid=\(4, 1, 1\), block=\(64, 1, 1\)\) "
                                             r"failed: hipErrorLaunchFailure \(719\)"):
        hipb.launch("fn", (4, 1, 1), (64, 1, 1), blob, hip=fake)


def test_module_loaded_once_per_process_and_device(code_objects, monkeypatch):
    monkeypatch.setattr(hipb, "_modules", {})
    monkeypatch.setattr(hipb, "_runtime_checked", False)
    fake = FakeHip()
    co = code_objects["gfx942:sramecc+:xnack-"]
    m1 = hipb.load_module(co, 0, device_arch="gfx942:sramecc+:xnack-", hip=fake)
    m2 = hipb.load_module(co, 0, device_arch="gfx942:sramecc+:xnack-", hip=fake)
    assert m1 is m2 and len(fake.loads) == 1 and fake.loads[0] == co
    assert m1.function("tiny") is m1.function("tiny") and fake.lookups == [("module1", b"tiny")]
    hipb.load_module(co, 1, device_arch="gfx942:sramecc+:xnack-", hip=fake)       # another GPU: its own load
    assert len(fake.loads) == 2
    with pytest.raises(hipb.HipError, match=r"hipModuleGetFunction\('missing'\) failed: hipErrorNotFound \(500\)"):
        m1.function("missing")
    # a mismatched arch is refused before HIP sees the image
    with pytest.raises(LaunchError, match="gfx950"):
        hipb.load_module(code_objects["gfx950:sramecc+:xnack-"], 0, device_arch="gfx942:sramecc+:xnack-", hip=fake)
    assert len(fake.loads) == 2


def test_backend_run_launches_on_torchs_stream(code_objects, monkeypatch, tmp_path):
    """HipBackend.run with torch's device queries stubbed: the module is loaded once, the function is
    the kernel's symbol, the blob is the kernel's KernArgs packing of the tensors' addresses, the
    stream is torch's current one; a device of another arch is refused before anything loads."""
    import contextlib
    import types as _t

    import torch

    import isagen
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path))
    k = isagen.build("axpy_f32", "gfx942")
    monkeypatch.setattr(hipb, "_modules", {})
    monkeypatch.setattr(gpu, "rocm_gpu_available", lambda: (True, ""))
    monkeypatch.setattr(torch.cuda, "device", lambda i: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda i=None: _t.SimpleNamespace(cuda_stream=0x5EED))
    monkeypatch.setattr(gpu, "device_arch", lambda i: "gfx942:sramecc+:xnack-")
    fake = FakeHip()
    be = hipb.HipBackend(hip=fake)
    x, y = torch.randn(3000), torch.randn(3000)
    bound, values, sizes = k.bind((x, y), {"alpha": 0.5})
    grid = k.launch.grid_for(sizes)
    assert be.run(k, bound, values, grid, k.launch.block, outputs=["y"]) is None
    be.run(k, bound, values, grid, k.launch.block, outputs=["y"])
    assert fake.loads == [k.code_object] and fake.lookups == [("module1", b"axpy_f32")]
    rec = fake.launches[-1]
    assert rec["blob"] == k.args.pack(x=x.data_ptr(), y=y.data_ptr(), alpha=0.5, n=3000)
    assert rec["grid"] == (2, 1, 1) and rec["block"] == (256, 1, 1) and rec["stream"] == 0x5EED
    monkeypatch.setattr(hipb, "_modules", {})
    monkeypatch.setattr(gpu, "device_arch", lambda i: "gfx950:sramecc+:xnack-")
    with pytest.raises(LaunchError, match=r"kernel 'axpy_f32' was built for gfx942:sramecc\+:xnack- but the GPU "
                                          r"is gfx950:sramecc\+:xnack-: rebuild with target='gfx950'"):
        be.run(k, bound, values, grid, k.launch.block)
    assert len(fake.loads) == 1
