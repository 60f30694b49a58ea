"""The hip-python backend: load isagen code objects on an AMD GPU and launch them on torch tensors.

    module = load_module(co_bytes, device_index)        # once per process, per device and code object
    fn = module.function("axpy")
    launch(fn, grid=(g, 1, 1), block=(256, 1, 1), kernargs=packed_bytes, stream=torch_stream)

The kernel arguments go as one packed blob through ``HIP_LAUNCH_PARAM_BUFFER_POINTER`` (the layout
is the kernel's ``KernArgs``, the same list that wrote the code object's ``.args`` metadata; HIP's
loader copies each declared argument from the blob, so the metadata must cover it, which it does by
construction).  Launches go on torch's current stream, so they order with the surrounding torch work.

One HIP runtime per process: torch's ROCm wheel ships its own ``libamdhip64.so``.  hip-python (6.x and
7.x) opens the library by its bare name, which matches the copy torch already loaded (same SONAME)
only if torch was imported first — so this module imports torch before hip, and after the first HIP
call it checks ``/proc/self/maps`` for a second copy (two runtimes do not share streams or pointers).

Nothing here calls HIP at import time: importing works on any machine.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import struct
import threading

from isagen.errors import CodeObjectError, IsagenError, LaunchError
from isagen.objects.toolchain import target_id_from_eflags
from isagen.runtime import gpu
from isagen.runtime.backends.base import Backend

HIP_RUNTIME_LIBRARY = "libamdhip64"


class HipError(LaunchError):
    """A HIP call failed; the message names the call and the ``hipError_t``."""

    def __init__(self, call: str, err):
        self.call = call
        self.code = int(err)
        self.name = getattr(err, "name", str(err))
        super().__init__(f"{call} failed: {self.name} ({self.code})")


# ---------------------------------------------------------------------------- hip-python import
_hip_module = None


def hip_api():
    """The ``hip.hip`` module of hip-python, imported after torch (one HIP runtime per process)."""
    global _hip_module
    if _hip_module is None:
        try:
            import torch  # noqa: F401  -- must come first: torch's libamdhip64 is then the one hip-python binds
        except ImportError:
            pass
        try:
            from hip import hip
        except ImportError:
            raise LaunchError("the hip backend needs hip-python: pip install 'isagen[rocm]' "
                              "(a hip-python 6.x/7.x release matching your ROCm)") from None
        _hip_module = hip
    return _hip_module


def check(result, what: str, hip=None):
    """Unpack a hip-python result tuple ``(hipError_t, *values)``; raise ``HipError`` naming the call."""
    hip = hip or hip_api()
    if isinstance(result, tuple):
        err, *rest = result
    else:
        err, rest = result, []
    if err != hip.hipError_t.hipSuccess:
        raise HipError(what, err)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


def call(hip, fn: str, *args, what: str | None = None):
    """``hip.<fn>(*args)`` checked: a HIP error raises ``HipError``; hip-python's lazy ``dlopen`` failure
    (no ROCm installed) raises a ``LaunchError`` that says so."""
    try:
        result = getattr(hip, fn)(*args)
    except RuntimeError as e:
        if "dlopen" in str(e):
            raise LaunchError(f"{what or fn}: hip-python cannot load the HIP runtime ({e}); is ROCm installed "
                              "and libamdhip64.so on the library path?") from None
        raise
    return check(result, what or fn, hip)


# ---------------------------------------------------------------------------- code object target
def code_object_target(co: bytes):
    """The target ID (``isagen.objects.toolchain.TargetID``) a code object was built for, from its ELF e_flags."""
    if len(co) < 52 or co[:4] != b"\x7fELF" or co[4] != 2:
        raise CodeObjectError("not a 64-bit ELF code object")
    (machine,) = struct.unpack_from("<H", co, 18)
    if machine != 224:   # EM_AMDGPU
        raise CodeObjectError(f"not an AMDGPU code object (ELF machine {machine})")
    (flags,) = struct.unpack_from("<I", co, 48)
    try:
        return target_id_from_eflags(flags)
    except IsagenError as e:
        raise CodeObjectError(str(e)) from None


def check_arch(co: bytes, device_arch: str, what: str = "kernel") -> None:
    """Refuse a code object that cannot run on a device whose ``gcnArchName`` is ``device_arch``
    (e.g. ``gfx942:sramecc+:xnack-``), naming both: HIP would otherwise fail with a bare
    ``hipErrorNoBinaryForGpu`` or ``hipErrorInvalidImage``."""
    tid = code_object_target(co)
    dev_proc, *features = device_arch.split(":")
    dev = {f[:-1]: f[-1] for f in features if f and f[-1] in "+-"}
    co_id = str(tid)
    if tid.processor != dev_proc:
        raise LaunchError(f"{what} was built for {co_id} but the GPU is {device_arch}: "
                          f"rebuild with target='{dev_proc}'")
    for name, want in (("sramecc", tid.sramecc), ("xnack", tid.xnack)):
        if want is not None and name in dev and dev[name] != want:
            raise LaunchError(f"{what} was built for {co_id} but the GPU is {device_arch} "
                              f"({name}{want} code does not load with {name}{dev[name]})")


# ---------------------------------------------------------------------------- one HIP runtime
def hip_runtime_copies(maps_text: str | None = None) -> list[str]:
    """Distinct ``libamdhip64`` files mapped into this process (from ``/proc/self/maps``)."""
    if maps_text is None:
        try:
            with open("/proc/self/maps") as f:
                maps_text = f.read()
        except OSError:
            return []
    paths = set()
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and HIP_RUNTIME_LIBRARY in os.path.basename(parts[5]):
            paths.add(os.path.realpath(parts[5].strip()) if os.path.exists(parts[5].strip()) else parts[5].strip())
    return sorted(paths)


def check_single_runtime(maps_text: str | None = None) -> None:
    copies = hip_runtime_copies(maps_text)
    if len(copies) > 1:
        raise LaunchError(f"two HIP runtimes are loaded in this process ({', '.join(copies)}); torch's streams and "
                          "pointers are not valid in the other one: import torch before hip-python, and use a "
                          "hip-python 6.x/7.x (10.x prefers /opt/rocm's copy over torch's)")


# ---------------------------------------------------------------------------- modules
class HipModule:
    """A code object loaded on one device, with its kernel functions looked up once."""

    def __init__(self, hip, handle, device_index: int, image: bytes):
        self.hip = hip
        self.handle = handle
        self.image = image              # kept alive with the module: the runtime may refer to it
        self.device_index = device_index
        self._functions: dict[str, object] = {}

    def function(self, name: str):
        fn = self._functions.get(name)
        if fn is None:
            fn = call(self.hip, "hipModuleGetFunction", self.handle, name.encode(),
                      what=f"hipModuleGetFunction('{name}')")
            self._functions[name] = fn
        return fn


_modules: dict[tuple[int, str], HipModule] = {}
_lock = threading.Lock()
_runtime_checked = False


def load_module(co: bytes, device_index: int, *, device_arch: str | None = None, what: str = "kernel",
                hip=None) -> HipModule:
    """The module for this code object on this device: loaded with ``hipModuleLoadData`` the first
    time, then reused for the life of the process.  The caller has made ``device_index`` current."""
    global _runtime_checked
    key = (device_index, hashlib.sha256(co).hexdigest())
    with _lock:
        module = _modules.get(key)
        if module is not None:
            return module
        if device_arch is not None:
            check_arch(co, device_arch, what)
        hip = hip or hip_api()
        handle = call(hip, "hipModuleLoadData", co, what=f"hipModuleLoadData({what})")
        if not _runtime_checked:
            check_single_runtime()
            _runtime_checked = True
        module = _modules[key] = HipModule(hip, handle, device_index, co)
        return module


def kernarg_config(kernargs: bytes):
    """The ``extra`` launch config for a packed kernarg blob: ``{BUFFER_POINTER, &blob, BUFFER_SIZE,
    &size, END}``.  Returns the config array and the objects that must stay alive until the launch
    returns."""
    blob = ctypes.create_string_buffer(bytes(kernargs), max(len(kernargs), 1))
    size = ctypes.c_size_t(len(kernargs))
    config = (ctypes.c_void_p * 5)(1, ctypes.addressof(blob), 2, ctypes.addressof(size), 3)
    return config, (blob, size)


def launch(fn, grid, block, kernargs: bytes, *, stream=0, shared_bytes: int = 0, hip=None) -> None:
    """``hipModuleLaunchKernel`` with the packed kernarg blob (grid counted in workgroups)."""
    hip = hip or hip_api()
    if hip.HIP_LAUNCH_PARAM_BUFFER_POINTER != 1 or hip.HIP_LAUNCH_PARAM_END != 3:
        raise LaunchError("hip-python's HIP_LAUNCH_PARAM_* constants are not the ones HIP defines")
    config, keep = kernarg_config(kernargs)
    gx, gy, gz = grid
    bx, by, bz = block
    call(hip, "hipModuleLaunchKernel", fn, gx, gy, gz, bx, by, bz, shared_bytes, stream, None,
         ctypes.addressof(config), what=f"hipModuleLaunchKernel(grid={tuple(grid)}, block={tuple(block)})")
    del keep   # HIP has copied the kernel arguments by the time the launch call returns


# ---------------------------------------------------------------------------- the backend
class HipBackend(Backend):
    """Runs built kernels on the AMD GPU that holds the tensors (torch's current stream)."""

    name = "hip"

    def __init__(self, hip=None):
        self._hip = hip

    @property
    def hip(self):
        if self._hip is None:
            self._hip = hip_api()
        return self._hip

    def check_device(self, name: str, tensor) -> None:
        if tensor.device.type != "cuda":
            raise LaunchError(f"tensor '{name}' is on {tensor.device}; the hip backend runs on the GPU "
                              "(move it with .cuda(), or use ISAGEN_BACKEND=emu for CPU tensors)")

    def run(self, kernel, tensors: dict, values: dict, grid, block, *, timing: bool = False, outputs=()):
        """Launch ``kernel`` (an ``isagen.Kernel``) on torch's current stream of the tensors' GPU;
        ``values`` maps kernel argument names to tensors or numbers.  The kernel writes ``outputs`` in
        place, so nothing is copied back.  Returns the device time in ms when ``timing``, else None."""
        import torch
        ok, why = gpu.rocm_gpu_available()
        if not ok:
            raise LaunchError(f"the hip backend needs a supported AMD GPU: {why} (use ISAGEN_BACKEND=emu)")
        devices = {t.device.index for t in tensors.values()} - {None}
        device_index = devices.pop() if devices else torch.cuda.current_device()
        with torch.cuda.device(device_index):
            module = load_module(kernel.code_object, device_index, device_arch=gpu.device_arch(device_index),
                                 what=f"kernel '{kernel.name}'", hip=self.hip)
            fn = module.function(kernel.symbol)
            packed = kernel.args.pack(**values)
            stream = torch.cuda.current_stream(device_index)
            if timing:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(stream)
            launch(fn, grid, block, packed, stream=stream.cuda_stream, shared_bytes=kernel.launch.shared_bytes,
                   hip=self.hip)
            if timing:
                end.record(stream)
                end.synchronize()
                return start.elapsed_time(end)
        return None
