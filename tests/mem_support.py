"""Helpers for the memory-bound kernel tests (tests/test_mem_*.py): build a generator variant once per
test session, run it in the emulator (sanitizer on), compare with a float64 reference.

Tolerances are one rounding of the output type (two units in the last place, so that an fp32 result
lying within a few fp32 ulps of a rounding boundary may land on either side) plus a small absolute
term for the fp32 math, relative to the data's scale; much tighter than torch.testing's defaults.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np
import torch

import isagen

TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
# (rtol, atol per unit of data scale): bf16/f16 one ulp of the output (2^-7, 2^-10), f32 a few ulps
TOL = {"bf16": (2.0 ** -7, 2e-6), "f16": (2.0 ** -10, 2e-6), "f32": (4e-6, 2e-6)}
_DIR = Path(tempfile.mkdtemp(prefix="isagen_mem_tests_"))


def spec_text(generator: str, name: str, params: dict) -> str:
    ps = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items())
    return f"kernel: {generator}\nname: {name}\ntargets: [gfx942, gfx950]\nparams: {{{ps}}}\n"


@functools.cache
def _build(generator: str, target: str, items: tuple):
    params = dict(items)
    name = "t_" + "_".join([generator] + [f"{k}{v}" for k, v in items]).replace(".", "p")
    path = _DIR / f"{name}.yaml"
    path.write_text(spec_text(generator, name, params))
    return isagen.build(str(path), target)


def kernel(generator: str, target: str = "gfx942", **params):
    """The built kernel (cached for the session) of ``generator`` with ``params``."""
    return _build(generator, target, tuple(sorted(params.items())))


def run(k, *tensors, **scalars):
    """Launch in the emulator; the sanitizer (on by default) raises on any report.  Returns the stats."""
    result = k.run(*tensors, backend="emu", **scalars)
    stats = result.stats
    assert stats is not None and stats["sanitized"], "the emulator ran without its sanitizer"
    assert stats["reports"] == 0, stats
    return stats


def rand(shape, dtype: str, seed: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale + shift).to(TORCH[dtype])


def assert_close(got: torch.Tensor, want: torch.Tensor, dtype: str, what: str, scale: float = 1.0,
                 rtol: float | None = None, atol: float | None = None) -> None:
    r, a = TOL[dtype]
    rtol = r if rtol is None else rtol
    atol = a * scale if atol is None else atol
    g, w = got.double(), want.double()
    assert g.shape == w.shape, f"{what}: shape {tuple(g.shape)} != {tuple(w.shape)}"
    nan_ok = torch.isnan(g) & torch.isnan(w)
    same_inf = torch.isinf(w) & (g == w)
    bad = ~((g - w).abs() <= atol + rtol * w.abs()) & ~nan_ok & ~same_inf
    if bad.any():
        i = tuple(int(v) for v in torch.nonzero(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {g.numel()} elements off (rtol {rtol:g}, atol {atol:g}); "
                             f"first at {i}: got {g[i].item()!r}, want {w[i].item()!r}")


def lowbias32(x: int) -> int:
    """Chris Wellons' lowbias32 on Python ints (an independent copy for the RNG tests)."""
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x


def keep_mask(seed: int, offset: int, rows: int, cols: int, p: float) -> np.ndarray:
    """The documented dropout mask (docs/kernels.md), element by element in Python."""
    key = lowbias32(seed)
    p32 = float(np.float32(p))
    thr = 0 if p32 <= 0 else min(int(p32 * 2 ** 32), 2 ** 32 - 1)
    out = np.empty((rows, cols), bool)
    for r in range(rows):
        for c in range(cols):
            out[r, c] = lowbias32(offset + key + r * cols + c) >= thr
    return out
