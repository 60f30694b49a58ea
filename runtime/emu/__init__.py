"""The CPU emulator (installed as ``isagen.runtime.emu``; the runtime's ``emu`` backend,
``isagen.runtime.backends.emu``, runs kernels through it).

Executes AMD code objects (gfx942 / gfx950 machine code, from isagen, Triton, clang ...) on the CPU,
vectorised over the 64 lanes of a wave and over the waves that stand at the same PC, and checks
them as it goes (the sanitizer, on by default): missing ``s_waitcnt``, missing ``s_nop`` wait states,
LDS races without ``s_barrier``, out-of-bounds global and LDS accesses, reads of registers nothing
wrote, hangs.  See docs/emulator.md.

    from isagen.runtime.emu import Device
    dev = Device("gfx942")
    mod = dev.load_module(co_bytes)
    x = dev.to_device(np_array)                    # int(x) is its address
    mod.launch("kernel", grid=(gx, gy, gz), block=(bx, by, bz), args=[x, y, np.int32(n)], shared_bytes=0)
    out = dev.from_device(y, shape, dtype)
"""

from isagen.runtime.emu.device import Device, DeviceBuffer
from isagen.runtime.emu.report import REPORT_CATEGORIES, EmulatorError, Report

__all__ = ["Device", "DeviceBuffer", "EmulatorError", "Report", "REPORT_CATEGORIES"]
