"""The FP8 / FP4 format constants the quantization generators need, without numpy.

``isagen.prims.fp8_model`` (the numpy model the kernels are checked against) re-exports these; the
generators import them from here, so that building a kernel does not load numpy.
"""

from __future__ import annotations

import struct

# format name -> (exponent bias, kind): "fnuz" (no inf, no -0, NaN 0x80) or "fn" (OCP: NaN 0x7f/0xff)
E4M3 = {"e4m3fnuz": (8, "fnuz"), "e4m3fn": (7, "fn")}
MANT = 3
FP8_MAX = {"e4m3fnuz": 240.0, "e4m3fn": 448.0}

MX_BLOCK = 32
E4M3_EMAX = 8        # exponent of e4m3fn's largest normal, 448 = 1.75 * 2^8
E2M1_EMAX = 2        # exponent of fp4's largest normal, 6 = 1.5 * 2^2
FP4_MAX = 6.0


def fp8_format_of(target) -> str:
    """The e4m3 format of a target (name or ``Target``): FNUZ on CDNA3 (gfx942), OCP on CDNA4 (gfx950)."""
    from isagen.targets import get_target
    return "e4m3fnuz" if get_target(target).fp8_format == "fnuz" else "e4m3fn"


def min_scale_value(fmt: str) -> float:
    """vLLM's floor on a dynamic scale, fl32(1 / (FP8_MAX * 512)), as a Python float (its float32 value
    exactly).  ``FP8_MAX * 512`` is a float32; the quotient of two float32 values rounded to float64 and
    then to float32 is the float32 quotient (float64 carries more than 2*24 + 2 bits)."""
    return struct.unpack("<f", struct.pack("<f", 1.0 / (FP8_MAX[fmt] * 512.0)))[0]
