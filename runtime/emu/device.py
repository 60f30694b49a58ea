"""The emulated device: global memory with allocations and bounds, and the user-facing ``Device``.

Global memory is one growing byte arena; every allocation is a range of it at a GPU-looking
virtual address (``ARENA_BASE + offset``), 256-byte aligned, with an unmapped guard gap after it so an
access running past the end of one allocation does not land in the next.  Every access the
executor makes goes through :meth:`Memory.check`, which finds each lane's allocation with one
``searchsorted`` and flags lanes whose access is not wholly inside one (out of bounds).
"""

from __future__ import annotations

import numpy as np

from isagen.errors import LaunchError
from isagen.runtime.emu import wide
from isagen.runtime.emu import xp as X
from isagen.runtime.emu.arena import ARENA_BASE
from isagen.runtime.emu.dispatch import Module
from isagen.targets import DEFAULT_TARGET, get_target

ALIGN = 256
GUARD = 256


class DeviceBuffer:
    """A device allocation: ``int(buf)`` is its address; ``buf.size`` its length in bytes."""

    __slots__ = ("device", "addr", "size", "name", "freed")

    def __init__(self, device, addr: int, size: int, name: str = ""):
        self.device, self.addr, self.size, self.name, self.freed = device, addr, size, name, False

    def __int__(self) -> int:
        return self.addr

    __index__ = __int__

    def data_ptr(self) -> int:
        return self.addr

    def __repr__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return f"<DeviceBuffer{label} {self.addr:#x} {self.size} bytes>"


class Memory:
    """Byte-addressed global memory: allocations in one arena, vectorised loads/stores with bounds."""

    def __init__(self, capacity: int = 1 << 20, xp=np):
        self.xp = xp                                  # the array module the arena lives in (xp.py)
        self.arena = xp.zeros(capacity, np.uint8)
        self.top = 0                                  # bump pointer (arena offset)
        self.allocs: dict[int, DeviceBuffer] = {}     # address -> buffer
        self._free: list[tuple[int, int]] = []        # (offset, span) of freed ranges
        self._index()

    # ------------------------------------------------------------------ allocation
    def alloc(self, size: int, device=None, name: str = "") -> DeviceBuffer:
        size = int(size)
        if size < 0:
            raise LaunchError(f"cannot allocate {size} bytes")
        span = (max(size, 1) + GUARD + ALIGN - 1) // ALIGN * ALIGN
        off = None
        for i, (o, s) in enumerate(self._free):
            if s >= span:
                off = o
                if s > span:
                    self._free[i] = (o + span, s - span)
                else:
                    del self._free[i]
                break
        if off is None:
            off = self.top
            self.top += span
            if self.top > self.arena.size:
                cap = self.arena.size
                while cap < self.top:
                    cap *= 2
                grown = self.xp.zeros(cap, np.uint8)
                grown[: self.arena.size] = self.arena
                self.arena = grown
        self.arena[off: off + span] = 0
        buf = DeviceBuffer(device, ARENA_BASE + off, size, name)
        self.allocs[buf.addr] = buf
        self._index()
        return buf

    def free(self, buf: DeviceBuffer) -> None:
        addr = int(buf)
        b = self.allocs.pop(addr, None)
        if b is None:
            raise LaunchError(f"free of {addr:#x}: not a live allocation")
        b.freed = True
        span = (max(b.size, 1) + GUARD + ALIGN - 1) // ALIGN * ALIGN
        self._free.append((addr - ARENA_BASE, span))
        self._index()

    def _index(self) -> None:
        bufs = sorted(self.allocs.values(), key=lambda b: b.addr)
        self._bufs = bufs
        self._starts = np.array([b.addr for b in bufs] or [0], np.uint64)
        self._ends = np.array([b.addr + b.size for b in bufs] or [0], np.uint64)
        self._starts_x = self.xp.asarray(self._starts)     # the same, on the engine's device
        self._ends_x = self.xp.asarray(self._ends)

    def owner(self, addr: int) -> DeviceBuffer | None:
        for b in self._bufs:
            if b.addr <= addr < b.addr + max(b.size, 1):
                return b
        return None

    def nearest(self, addr: int) -> str:
        """Words naming the allocation nearest ``addr`` (for out-of-bounds reports)."""
        if not self._bufs:
            return "no allocations exist"
        best = min(self._bufs, key=lambda b: 0 if b.addr <= addr < b.addr + b.size
                   else min(abs(addr - b.addr), abs(addr - (b.addr + b.size))))
        label = f" '{best.name}'" if best.name else ""
        if addr >= best.addr + best.size:
            rel = f"{addr - best.addr - best.size} bytes past the end of"
        elif addr < best.addr:
            rel = f"{best.addr - addr} bytes before"
        else:
            rel = "inside"
        return f"{rel} allocation{label} [{best.addr:#x}, {best.addr + best.size:#x}) of {best.size} bytes"

    # ------------------------------------------------------------------ access
    def check(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """Boolean array: True where ``[addr, addr+nbytes)`` lies inside one live allocation."""
        a = addr.astype(np.uint64, copy=False)
        xp = self.xp
        if a.size > 16:
            # fast path: the lowest and highest access inside one allocation -> all of them are
            if xp is np:
                lo, hi = a.min(), a.max()
            else:       # one transfer from the device for both
                lo, hi = (np.uint64(v) for v in X.to_host(xp.stack((a.min(), a.max()))))
            j = int(np.searchsorted(self._starts, lo, side="right")) - 1
            if j >= 0 and lo >= self._starts[j] and hi + np.uint64(nbytes) <= self._ends[j]:
                return xp.ones(a.shape, np.bool_)
        i = xp.searchsorted(self._starts_x, a, side="right").astype(np.int64) - 1
        i = xp.maximum(i, 0)
        return (a >= self._starts_x[i]) & (a + np.uint64(nbytes) <= self._ends_x[i])

    def offsets(self, addr: np.ndarray) -> np.ndarray:
        return (addr.astype(np.uint64, copy=False) - np.uint64(ARENA_BASE)).astype(np.int64)

    def read(self, addr: np.ndarray, nbytes: int, ok: np.ndarray | None = None) -> np.ndarray:
        """Load ``nbytes`` (1, 2, 4, 8, 12, 16, ...) at each address.  Returns uint32 [..., ceil(n/4)]
        for n >= 4, or the zero-extended value as uint32 [...] for n < 4.  Lanes where ``ok`` is False
        read 0 (and are not touched)."""
        xp = self.xp
        off = self.offsets(addr)
        if ok is not None and ok.all():
            ok = None                         # every lane reads: no masking pass
        if ok is not None:
            off = xp.where(ok, off, 0)
        ar = self.arena
        if nbytes >= 4:
            ndw = nbytes // 4
            if wide.wide_size(nbytes) and wide.aligned(off, nbytes):
                out = wide.gather(ar, off, nbytes)
            elif not (off & 3).any():
                w = ar.view(np.uint32)
                idx = (off >> 2)[..., None] + xp.arange(ndw)
                out = w[idx]
            else:
                idx = off[..., None] + xp.arange(ndw * 4)
                out = xp.ascontiguousarray(ar[idx]).view(np.uint32)
            if ok is not None:
                out = xp.where(ok[..., None], out, np.uint32(0))
            return out
        if nbytes == 1:
            out = ar[off].astype(np.uint32)
        else:
            out = ar[off].astype(np.uint32) | (ar[off + 1].astype(np.uint32) << 8)
        if ok is not None:
            out = xp.where(ok, out, np.uint32(0))
        return out

    def write(self, addr: np.ndarray, data: np.ndarray, nbytes: int, mask: np.ndarray) -> None:
        """Store: ``data`` uint32 [..., ndw] for n >= 4 or uint32 [...] (low bytes) for n < 4, where ``mask``."""
        xp = self.xp
        off = self.offsets(addr)[mask]
        if off.size == 0:
            return
        ar = self.arena
        if nbytes >= 4:
            ndw = nbytes // 4
            d = xp.ascontiguousarray(data[mask], dtype=np.uint32).reshape(-1, ndw)
            if wide.wide_size(nbytes) and wide.aligned(off, nbytes):
                wide.scatter(ar, off, d, nbytes)
            elif not (off & 3).any():
                w = ar.view(np.uint32)
                w[(off >> 2)[:, None] + xp.arange(ndw)] = d
            else:
                ar[off[:, None] + xp.arange(ndw * 4)] = d.view(np.uint8).reshape(-1, ndw * 4)
            return
        d = data[mask].astype(np.uint32)
        ar[off] = (d & 0xFF).astype(np.uint8)
        if nbytes == 2:
            ar[off + 1] = ((d >> 8) & 0xFF).astype(np.uint8)

    def read_bytes(self, addr: int, size: int) -> bytes:
        off = addr - ARENA_BASE
        chunk = self.arena[off: off + size]
        return (chunk if self.xp is np else chunk.get()).tobytes()

    def write_bytes(self, addr: int, data: bytes) -> None:
        off = addr - ARENA_BASE
        self.arena[off: off + len(data)] = self.xp.asarray(np.frombuffer(data, np.uint8))


class Device:
    """A CPU-emulated AMD GPU of one target.

        dev = Device("gfx942")                      # sanitize=True: report missing waits, races, OOB ...
        mod = dev.load_module(co_bytes)
        x = dev.to_device(np_array)                 # int(x) is its device address
        mod.launch("kernel", grid=(gx, gy, gz), block=(bx, by, bz), args=[x, y, np.int32(n)])
        out = dev.from_device(y, shape, dtype)
    """

    def __init__(self, target: str = DEFAULT_TARGET, sanitize: bool = True, *,
                 max_wave_instructions: int = 1 << 22, lds_dma_inst_offset: bool = True,
                 kernarg_preload: bool = True, array_module=None):
        self.target = get_target(target)
        # the engine: "cpu" (numpy) or "cuda" (CuPy on an NVIDIA GPU); array_module numpy/cupy/"cpu"/"cuda",
        # None for $ISAGEN_EMU_DEVICE (default cpu).  See docs/emulator.md, "Engines and speed".
        self.engine = X.resolve(array_module)
        self.sanitize = bool(sanitize)
        # instruction budget per wave: a wave that executes more raises a "budget" report (a hang)
        self.max_wave_instructions = int(max_wave_instructions)
        # whether the instruction offset of `buffer_load ... lds` is added to the LDS address too
        # (LLVM's DMA doc says so for the global form; tinygrad's emulator does not add it)
        self.lds_dma_inst_offset = bool(lds_dma_inst_offset)
        # start kernels with preloaded kernarg SGPRs past the 256-byte compatibility prologue, as
        # firmware that supports kernarg preload does; False runs the prologue (older firmware)
        self.kernarg_preload = bool(kernarg_preload)
        self.memory = Memory(xp=X.module(self.engine))
        # optional observer of every LDS access (with the sanitizer on): called as
        # lds_observer(inst, addresses [waves, 64] int64, active [waves, 64] bool, nbytes, write, dma)
        # once per instruction and group of waves (e.g. isagen.tiles.bank_check.BankObserver)
        self.lds_observer = None

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int, name: str = "") -> DeviceBuffer:
        return self.memory.alloc(nbytes, self, name)

    def free(self, buf: DeviceBuffer) -> None:
        self.memory.free(buf)

    def to_device(self, array, name: str = "") -> DeviceBuffer:
        """Copy a numpy array (or anything ``np.asarray`` takes; torch CPU tensors too) to the device.
        On the cuda engine a CUDA torch tensor or a CuPy array is copied device to device (DLPack)."""
        if self.engine == "cuda":
            src = _cuda_bytes(array)
            if src is not None:
                buf = self.alloc(src.size, name)
                off = buf.addr - ARENA_BASE
                self.memory.arena[off: off + src.size] = src
                return buf
        if hasattr(array, "detach") and hasattr(array, "numpy"):
            array = _torch_to_numpy(array)
        a = np.ascontiguousarray(np.asarray(array))
        buf = self.alloc(a.nbytes, name)
        self.memory.write_bytes(buf.addr, a.tobytes())
        return buf

    def zeros(self, nbytes: int, name: str = "") -> DeviceBuffer:
        return self.alloc(nbytes, name)

    def from_device(self, buf, shape, dtype) -> np.ndarray:
        """Copy ``prod(shape)`` elements of ``dtype`` from the device, starting at ``buf`` (a
        DeviceBuffer or an address inside one)."""
        addr, n, shape, dtype = self._span("from_device", buf, shape, dtype)
        return np.frombuffer(self.memory.read_bytes(addr, n), dtype).reshape(shape).copy()

    def _span(self, who: str, buf, shape, dtype) -> tuple[int, int, tuple[int, ...], np.dtype]:
        """(address, bytes, shape, dtype) of ``prod(shape)`` elements at ``buf`` (``shape``: a count or a
        shape); a LaunchError naming ``who`` unless they lie inside one allocation."""
        dtype = np.dtype(dtype)
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
        n = int(np.prod(shape)) * dtype.itemsize
        addr = int(buf)
        owner = self.memory.owner(addr)
        if owner is None or addr + n > owner.addr + owner.size:
            raise LaunchError(f"{who}: {n} bytes at {addr:#x} are not inside one allocation "
                              f"({self.memory.nearest(addr)})")
        return addr, n, shape, dtype

    def to_array(self, buf, shape, dtype):
        """Like :meth:`from_device`, as an array of the engine's device: numpy on cpu, a CuPy array on
        cuda (no host copy; ``torch.from_dlpack(arr)`` makes it a CUDA tensor without another)."""
        if self.engine == "cpu":
            return self.from_device(buf, shape, dtype)
        addr, n, shape, dtype = self._span("to_array", buf, shape, dtype)
        off = addr - ARENA_BASE
        return self.memory.arena[off: off + n].copy().view(dtype).reshape(shape)

    def copy_to(self, buf, array) -> None:
        """Overwrite the start of ``buf`` with ``array``'s bytes."""
        a = np.ascontiguousarray(np.asarray(array))
        addr = int(buf)
        owner = self.memory.owner(addr)
        if owner is None or addr + a.nbytes > owner.addr + owner.size:
            raise LaunchError(f"copy_to: {a.nbytes} bytes at {addr:#x} do not fit in one allocation")
        self.memory.write_bytes(addr, a.tobytes())

    # ------------------------------------------------------------------ modules
    def load_module(self, co_bytes: bytes):
        return Module(self, co_bytes)


def _torch_to_numpy(t):
    import torch
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _cuda_bytes(array):
    """A CUDA torch tensor or a CuPy array as a contiguous CuPy uint8 array of its bytes (DLPack, on the
    device), or None for anything else."""
    cp = X.module("cuda")
    if isinstance(array, cp.ndarray):
        return cp.ascontiguousarray(array).ravel().view(cp.uint8)
    if hasattr(array, "detach") and getattr(array, "is_cuda", False):
        import torch
        t = array.detach().contiguous()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.view(torch.int16)
        return cp.from_dlpack(t).ravel().view(cp.uint8)
    return None
