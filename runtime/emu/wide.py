"""Whole-access gathers and scatters over a byte buffer (global memory, LDS).

A lane's 8- or 16-byte access at an address that is a multiple of its size is one element of the
buffer viewed as 8- or 16-byte items, so it moves as one ``take`` / one indexed store of that element
instead of one per dword (5-10x fewer index computations and memory operations for
``global_load_dwordx4``, ``ds_read_b64``, ``ds_read2st64_b64`` ...).  The bytes moved are the same:
callers use these only where every offset is a multiple of the size (``aligned``), and fall back to
their dword or byte paths otherwise.  Stores keep numpy's sequential order for repeated indices (the
last lane writing an element wins), as the dword path does for each of its dwords.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

_VIEW: dict[int, np.dtype] = {4: np.dtype(np.uint32), 8: np.dtype(np.uint64), 16: np.dtype("V16")}


def wide_size(nbytes: int) -> bool:
    """Whether accesses of ``nbytes`` can use the wide path (4, 8 or 16 bytes)."""
    return nbytes in _VIEW


def aligned(off: np.ndarray, nbytes: int) -> bool:
    """Whether every byte offset of ``off`` is a multiple of ``nbytes`` (a power of two)."""
    return not (off & (nbytes - 1)).any()


def _items(buf: np.ndarray, nbytes: int) -> np.ndarray:
    n = buf.size - buf.size % nbytes          # a view needs whole items (the tail is never addressed whole)
    return buf[:n].view(_VIEW[nbytes])


def _void_ok(buf) -> bool:
    """Whether ``buf``'s array type has numpy's void dtypes (numpy does; CuPy does not)."""
    return type(buf).__module__.startswith("numpy")


def gather(buf: np.ndarray, off: np.ndarray, nbytes: int) -> np.ndarray:
    """uint32 ``[..., nbytes // 4]``: the ``nbytes`` at each byte offset of ``off`` (aligned, int64)
    of the contiguous uint8 buffer ``buf`` (whose start is aligned to ``nbytes``)."""
    if nbytes == 16 and not _void_ok(buf):     # CuPy has no 16-byte void dtype: two 8-byte items
        idx = (off >> 3)[..., None] + np.arange(2)
        return np.take(_items(buf, 8), idx).view(np.uint32).reshape(off.shape + (4,))
    items = _items(buf, nbytes)
    out = np.take(items, off >> (nbytes.bit_length() - 1))
    return out.view(np.uint32).reshape(off.shape + (nbytes // 4,))


def scatter(buf: np.ndarray, off: np.ndarray, vals: np.ndarray, nbytes: int) -> None:
    """Store ``vals`` (uint32 ``[k, nbytes // 4]`` or anything reshaping to it) at the byte offsets
    ``off`` (int64 ``[k]``, aligned) of ``buf``."""
    v = np.ascontiguousarray(vals, dtype=np.uint32).reshape(off.shape + (nbytes // 4,))
    if nbytes == 16 and not _void_ok(buf):
        _items(buf, 8)[(off >> 3)[..., None] + np.arange(2)] = v.view(np.uint64).reshape(off.shape + (2,))
        return
    items = _items(buf, nbytes)
    items[off >> (nbytes.bit_length() - 1)] = v.view(_VIEW[nbytes]).reshape(off.shape)
