"""A numpy model of the tile primitives' data movement (no emulator, no GPU).

It executes what the primitives *describe* — the lane expressions behind every LDS-DMA and every
``ds_read`` — on byte arrays: global memory -> LDS image (with the buffer range check and the
leading-pad mask), LDS image -> per-lane register bytes (with ``ds_read_b64_tr_b16``'s 16-lane
transpose).  Tests feed the result through an independent model of the MFMA lane layouts and
compare with numpy's matmul, which checks swizzle, fragment mapping and the k bijection together
before any code runs; the bank analysis reads the same addresses.
"""

from __future__ import annotations

import numpy as np

from isagen.tiles import lanexpr as lx
from isagen.tiles.lds_to_reg import READ_BYTES


def dma_tile(gl, memory: np.ndarray, base: int, records: int, image: np.ndarray, stage: int, env: dict,
             pad: int | None = None) -> None:
    """Run every loader wave's DMA blocks of ``gl`` (a ``GlobalToLds``) for one tile into ``image``.

    ``memory`` is the global byte array, ``base`` the buffer base as an index into it (may be
    negative or past the end), ``records`` num_records.  Each dword is range-checked on its own
    (offset + 4i < num_records) and reads 0 outside; with ``pad``, lanes whose reduction index is
    below it load 0 (the leading partial tile)."""
    width = gl.width
    region = gl.stages[stage].offset
    for w in range(gl.waves):
        for j in range(gl.blocks_per_wave):
            off = lx.evaluate(gl.offset_expr(j, wave=w), env)
            pos = lx.evaluate(gl.position(j, wave=w), env) + region
            masked = np.zeros(64, bool)
            if pad is not None:
                kc = lx.evaluate(gl.k_coord(*gl.coords(j, wave=w)), env)
                masked = kc < pad
            for lane in range(64):
                data = np.zeros(width, np.uint8)
                if not masked[lane]:
                    for d in range(0, width, 4):
                        o = int(off[lane]) + d
                        n = min(4, width - d)
                        if o + n <= records and 0 <= base + o and base + o + n <= memory.size:
                            data[d:d + n] = memory[base + o:base + o + n]
                        elif o + n <= records:
                            raise AssertionError(f"in-range DMA lane {lane} reads outside the test memory "
                                                 f"(offset {o}, base {base})")
                image[pos[lane]:pos[lane] + width] = data


def read(image: np.ndarray, inst, env: dict) -> np.ndarray:
    """The bytes one read instruction puts in each lane's destination: (64, width) uint8.

    ``ds_read_b64_tr_b16``: every lane reads 8 bytes at its address; then in each block of 16 lanes,
    destination lane ``i`` element ``e`` (16-bit) is source lane ``4e + i//4``'s element ``i % 4``."""
    width = READ_BYTES[inst.mnemonic]
    addr = lx.evaluate(inst.addr, env)
    raw = np.stack([image[a:a + width] for a in addr])
    if inst.mnemonic != "ds_read_b64_tr_b16":
        return raw
    el = raw.view(np.uint16).reshape(64, 4)
    out = np.empty_like(el)
    for lane in range(64):
        blk, i = divmod(lane, 16)
        for e in range(4):
            out[lane, e] = el[16 * blk + 4 * e + i // 4, i % 4]
    return out.view(np.uint8).reshape(64, 8)
