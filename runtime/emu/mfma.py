"""The MFMA (matrix fused multiply-add) unit of the CPU emulator, vectorised over waves.

API
===
``mfma(name, target, a, b, c, cbsz=0, abid=0, blgp=0, *, scale_a=None, scale_b=None, opsel_a=0,
opsel_b=0, out=None) -> d``
    ``name``    the instruction (``Instruction.name``, e.g. ``"v_mfma_f32_32x32x8_bf16"``).
    ``target``  ``"gfx942"`` / ``"gfx950"`` (or a ``Target``): picks the fp8 encodings (FNUZ on gfx942,
                OCP on gfx950) and rejects instructions the architecture does not have.
    ``a``, ``b`` ``uint32[a_regs, W, 64]`` / ``uint32[b_regs, W, 64]``: the raw bits of the A and B
                register tuples of W waves (register-major, as the executor's register file
                ``V[num_regs, W, 64]`` slices them; any strides).  For the f8f6f4 forms the counts
                follow the formats: ``operand_regs(name, cbsz, blgp)``.
    ``c``       ``uint32[c_regs, W, 64]`` raw bits of SrcC (f32 / i32 words, f64 as register pairs,
                low word first), or anything that broadcasts to it (an inline-constant SrcC).
    returns     ``uint32[c_regs, W, 64]``: the raw bits of D (a new array; inputs are not modified).
    ``out``     optional ``uint32[c_regs, W, 64]`` to write D into instead (e.g. the destination
                registers ``V[d0:d1]`` when every wave of the batch takes part); it may be the same
                memory as ``c`` (accumulating in place) but must not overlap A or B.
    ``cbsz``/``abid`` (A-block broadcast) and ``blgp`` (B lane pattern) follow the ISA where the
    instruction has them (see "Modifiers"); a non-zero value for an instruction without them raises
    :class:`MfmaError` naming the instruction and the field - never ignored.
    ``scale_a``/``scale_b`` (keyword; only ``v_mfma_scale_*``): ``uint32[W, 64]`` (or broadcastable)
    contents of the two scale VGPRs; ``opsel_a``/``opsel_b`` (0..3) pick the byte holding the E8M0
    exponent.  The scale of A's K-block ``kb`` (32 elements) for row i is in lane ``kb*M + i``, of
    B's for column j in lane ``kb*N + j``; factor ``2**(e-127)``, e = 255 is NaN [verify on hardware].
    Triton 3.9's ``tl.dot_scaled`` code for gfx950 (its scale and operand layouts are LLVM's and
    Triton's, run in production) computes the right products on this rule for fp8 and fp4 operands,
    both MFMA shapes, op_sel bytes 0 and 1 (tests/runtime/emu/test_emu_mx_triton.py).

``spec(name, target=None) -> MfmaSpec`` the instruction's shape, types and register counts;
``operand_regs(name, cbsz=0, blgp=0) -> (a_regs, b_regs)`` the A/B register counts as the modifiers
select them (f8f6f4: 8 for fp8/bf8, 6 for fp6/bf6, 4 for fp4; else the spec's);
``validate(name, target, cbsz, abid, blgp) -> MfmaSpec`` the same checks ``mfma()`` makes, without running;
``SPECS`` all supported instructions.  ``layout(name)`` the cached index arrays (see below).
``a_slot(spec, block, i, k)``, ``b_slot(spec, block, k, j)`` -> ``(reg, sub, lane)`` and
``cd_slot(spec, block, i, j)`` -> ``(reg, lane)``: where one element lives (reg = register offset in
the operand tuple, the low register of a pair for 64-bit elements; sub = element index inside the
32-bit register, i.e. bits [sub*w + w-1 : sub*w] for w-bit elements).

Supported instructions
======================
Every MFMA of ``isagen.targets`` (``ALL_MFMAS``; per-target membership is ``Target.mfmas``): the
f32, f16, bf16, i8, f64, xf32 and fp8/bf8 forms, the legacy multi-block ones, and the CDNA4
double-rate and f8f6f4 forms, including the block-scaled ``v_mfma_scale_*`` forms.  The f8f6f4
formats of A and B are chosen independently by cbsz (A) and blgp (B): 0 fp8 (e4m3), 1 bf8 (e5m2),
2 fp6 (e2m3), 3 bf6 (e3m2), 4 fp4 (e2m1) (CDNA4 ISA; LLVM's ``llvm.amdgcn.mfma.scale.*`` format
codes); 5..7 raise MfmaError.  An MFMA the table lacks, or one the target does not have, raises
MfmaError naming both.  Not supported: sparse SMFMAC.

f8f6f4 operand registers (LLVM 22's assembler checks the same widths: "wrong register tuple size
for cbsz value 4"; the decoder of isagen/isa/decoder.py reads them the same way): every lane holds
32 elements of its row (A) / column (B), in 8 VGPRs (fp8/bf8, one byte each), 6 (fp6/bf6: a 192-bit
little-endian bit string, element e in bits [6e+5 : 6e], so elements cross register boundaries, as
CK's ``f6x32_pk_t`` packs them) or 4 (fp4: element e in nibble e of the 128-bit string, i.e. the
low nibble of a byte is the even element).  fp4 and fp6 have no inf/NaN (OCP MX v1.0): every code
is a finite value, subnormals included.

Lane layouts
============
gfx9 rule (AMD Matrix Instruction Calculator, CDNA3; tested element by element against its output in
tests/data/mfma_layouts_cdna3.json).  With B blocks and ``kl = K*M*B/64`` consecutive k per lane:
    A[i][k] of block b: lane ``b*M + (k // kl)*M*B + i``, element ``k % kl`` of the lane's registers
        (register ``(k % kl) // per_reg``, sub ``(k % kl) % per_reg``; per_reg = 32 / element bits).
    B[k][j]: the same with j for i.
    C/D[i][j] of block b (32-bit): rows per register group h = 4, ``g = 64 // N`` row groups per
        register set, ``bpr = ceil(64 / (M*N/4))`` blocks per register:
        register ``b*M*N/64 + (i // (4*g))*4 + i % 4``, lane ``(b % bpr)*N + ((i // 4) % g)*bpr*N + j``.
        16x16: reg ``i % 4``, lane ``16*(i//4) + j``;  32x32: reg ``4*(i//8) + i%4``, lane
        ``32*((i//4)%2) + j`` (i.e. lane L / reg r hold row ``8*(r//4) + 4*(L//32) + r%4`` - not
        tinygrad's ``16*(L//32) + r``).  64-bit outputs use h = 1 and count register pairs.
The gfx950 double-rate f16/bf16/i8 instructions follow the same rule (kl = 8 for 16x16x32 and
32x32x16: lane group g = lane // M holds k in [8g, 8g+8), two per VGPR): CK's xdlops table gives
``k_per_blk = 8`` for them and Triton's gfx950 lowering feeds them ``kWidth = 8`` dot operands
(docs/emu_notes.md); Triton-compiled gfx950 matmuls with ``v_mfma_f32_16x16x32_bf16`` and
``v_mfma_f32_32x32x16_bf16`` run correctly on this layout (tests/runtime/emu/test_emu_mfma_triton.py).  The f8f6f4
instructions with fp8 inputs use the layout of AMD's CDNA4
matrix-core blog (ROCm blogs, "Matrix Core Programming on AMD CDNA3 and CDNA4"): byte ``r`` (0..31)
of lane L (group ``g = L // M``, ``G = 64 // M`` groups) holds ``k = 16*g + 16*G*(r // 16) + r % 16``
[verify on hardware].  fp4/fp6 operands hold 32 consecutive k per lane: element e of lane L is
``k = 32*(L // M) + e`` (the lane's K-block is ``L // M``, which is why its scale byte sits in the
same lane; Modular's CDNA4 MXFP4 kernel docs: "each lane loads 16 contiguous bytes", and Triton
3.9's ``tl.dot_scaled`` code for gfx950 runs correctly on it, mixed e2m1 x e4m3 included:
tests/runtime/emu/test_emu_mx_triton.py).  Note that one permutation of k applied to both A and B
does not change D, so for equal-width A/B formats only the row/column and k-pairing of A and B is
observable (scales and mixed widths make the rest observable).

Modifiers (CDNA3 ISA, calculator semantics)
    CBSZ/ABID, multi-block instructions only: block b of the result uses the A block
        ``(b // 2**cbsz) * 2**cbsz + abid`` (cbsz <= log2(blocks), abid < 2**cbsz).
    BLGP, multi-block instructions and v_mfma_f32_{32x32x2,16x16x4}_f32: B is read from lane
        ``f(lane)``: 1 ``lane % 32``; 2 ``32 + lane % 32``; 3 ``(lane + 16) % 64``; 4..7 ``16*(blgp-4) +
        lane % 16``.
    f64 instructions: BLGP bits 0/1/2 negate A/B/C (gfx940+); the executor must not pre-negate.

Numerics
========
Inputs are decoded exactly (bf16/f16/fp8 via numerics.py; xf32 inputs are f32 registers truncated
to 10 mantissa bits [verify]; f16 and fp8 subnormals are kept).  Every product is exact; the K-sum
and the addition of C are done in float64, then rounded once to float32 (round to nearest even).
Hardware order is not documented (tinygrad sums in fp32 in k order, pantheonsim in double), so
compare with a tolerance.  i8 -> i32 is exact integer arithmetic wrapping modulo 2**32.  f64 is
float64 matmul + C.  NaN/inf propagate as IEEE arithmetic does.

Speed: the gather indices are built once per instruction, modifier setting and wave count (cached
plans); a call does one gather + decode per operand, one batched float64 ``matmul`` over the waves,
and one pass that adds C, rounds to f32 and moves the result into register order.  Single-block
instructions gather A's rows in D-register order, so their products need no further gather; batches
over 256 waves run in 256-wave chunks.  About 3 us per 32x32x8 wave-MFMA (1.7 us for 16x16x16) at
64+ waves on one core of the development machine.  Not thread-safe (scratch buffers are reused).
The f32-result MFMAs with bf16/f16/fp8/bf8 inputs of the gfx9 layout run instead in the C kernel of
native.py when it can be built (``_run_native``, and the fused runs of ``native_call``/``run_plan``/
``call_run``; same bits, ~0.5 us of one core per 32x32x8 wave-MFMA here, on several threads);
tests/runtime/emu/test_emu_engine.py compares the two paths bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

import numpy as host  # layouts are built on the host (xp.py)

from isagen.errors import ISAError
from isagen.runtime.emu import native
from isagen.runtime.emu import numerics as nx
from isagen.runtime.emu import xp as X
from isagen.targets import ALL_MFMAS, MfmaInfo, mfma_targets

__all__ = ["MfmaError", "MfmaSpec", "SPECS", "spec", "validate", "layout", "mfma", "a_slot", "b_slot",
           "cd_slot", "supported", "operand_regs", "F8F6F4_FORMATS"]


class MfmaError(ISAError):
    """An MFMA the emulator cannot run as asked (unknown, not on this target, or a bad modifier)."""


_BITS = {"f32": 32, "xf32": 32, "f16": 16, "bf16": 16, "i8": 8, "fp8": 8, "bf8": 8, "f8f6f4": 8,
         "f64": 64}


@dataclass(frozen=True)
class MfmaSpec:
    """One MFMA as the emulator runs it: the facts of ``isagen.targets.MfmaInfo`` (the one MFMA table)
    in the form the layout code uses; the register counts are recomputed from the lane layout, and
    tests/runtime/emu/test_emu_mfma.py checks they agree with the table's."""

    name: str
    m: int
    n: int
    k: int
    blocks: int
    a_type: str           # f32 xf32 f16 bf16 i8 fp8 bf8 f8f6f4 f64
    b_type: str
    out_type: str         # f32 i32 f64
    archs: frozenset
    cbsz_abid: bool       # A-block broadcast supported
    blgp: bool            # B lane patterns supported (for f64: the negate bits)
    layout: str = "gfx9"  # "gfx9" | "f8f6f4"
    scaled: bool = False  # v_mfma_scale_*: E8M0 block scales of A and B

    @property
    def in_bits(self) -> int:
        return _BITS[self.a_type]

    @property
    def out_bits(self) -> int:
        return 64 if self.out_type == "f64" else 32

    @property
    def k_per_lane(self) -> int:
        return self.k * self.m * self.blocks // 64

    @property
    def a_regs(self) -> int:
        return self.k_per_lane * self.in_bits // 32

    @property
    def b_regs(self) -> int:
        return self.k * self.n * self.blocks // 64 * self.in_bits // 32

    @property
    def c_regs(self) -> int:
        return self.m * self.n * self.blocks // 64 * self.out_bits // 32


# a_type/b_type of the table's mixed fp8 input types (A_B); every other in_type is both operands' type
_MIXED_INPUTS = {"fp8_bf8": ("fp8", "bf8"), "bf8_fp8": ("bf8", "fp8")}


def _spec_of(info: MfmaInfo) -> MfmaSpec:
    """The emulator's view of one entry of the ISA layer's MFMA table: its facts plus the lane layout."""
    a_type, b_type = _MIXED_INPUTS.get(info.in_type, (info.in_type, info.in_type))
    return MfmaSpec(info.mnemonic, info.m, info.n, info.k, info.blocks, a_type, b_type, info.out_type,
                    frozenset(mfma_targets(info.mnemonic)), info.cbsz_abid, info.blgp,
                    "f8f6f4" if info.in_type == "f8f6f4" else "gfx9", info.mnemonic.startswith("v_mfma_scale_"))


SPECS: dict[str, MfmaSpec] = {name: _spec_of(info) for name, info in ALL_MFMAS.items()}


def _target_name(target) -> str:
    if target is None:
        return ""
    if isinstance(target, str):
        return target.split(":")[0].strip().lower()
    return target.name


def spec(name: str, target=None) -> MfmaSpec:
    """The instruction's description; with ``target``, check that the architecture has it."""
    s = SPECS.get(name)
    t = _target_name(target)
    if s is None:
        raise MfmaError(f"{t or 'no target'} has no MFMA '{name}' (isagen.targets' MFMA table has no such "
                        "instruction)")
    if t and t not in s.archs:
        raise MfmaError(f"{name} does not exist on {t} (it is a {'/'.join(sorted(s.archs))} instruction)")
    return s


def supported(target) -> list[str]:
    """Names of the MFMAs the emulator runs on ``target``."""
    t = _target_name(target)
    return [n for n, s in SPECS.items() if t in s.archs]


# ----------------------------------------------------------------------------- element positions

def _elem_per_word(s: MfmaSpec) -> int:
    """Elements per storage word: a word is a 32-bit register, or a register pair for f64."""
    return 1 if s.in_bits == 64 else 32 // s.in_bits


def _input_slot(s: MfmaSpec, rows: int, block: int, row: int, k: int, fmt: int = 0) -> tuple[int, int, int]:
    """(word, sub, lane) of element (row, k) of an input whose other dimension is ``rows``.

    f8f6f4 inputs are addressed as 8 words of 4 one-element slots per lane whatever the format
    (``fmt``, the cbsz/blgp code): element e of the lane is (word e // 4, sub e % 4); for fp8/bf8 that
    is the register and byte, fp6/fp4 elements are first unpacked into that form (_f8f6f4_codes)."""
    if s.layout == "f8f6f4" and fmt >= 2:               # fp6/bf6/fp4: 32 consecutive k per lane
        e = k % 32
        return e // 4, e % 4, (k // 32) * rows + row
    if s.layout == "f8f6f4":
        groups = 64 // rows
        g = (k % (16 * groups)) // 16
        r = 16 * (k // (16 * groups)) + k % 16          # byte index within the lane's 32 bytes
        return r // 4, r % 4, g * rows + row
    kl = s.k * rows * s.blocks // 64
    per = _elem_per_word(s)
    e = k % kl
    lane = block * rows + (k // kl) * rows * s.blocks + row
    return e // per, e % per, lane


def _out_slot(s: MfmaSpec, block: int, i: int, j: int) -> tuple[int, int]:
    """(word, lane) of C/D[i][j] of ``block``; a word is a register (32-bit) or a pair (f64)."""
    h = 1 if s.out_bits == 64 else 4
    g = 64 // s.n
    bpr = -(-64 // (s.m * s.n // h))
    word = block * (s.m * s.n // 64) + (i // (h * g)) * h + i % h
    lane = (block % bpr) * s.n + ((i // h) % g) * bpr * s.n + j
    return word, lane


def a_slot(s: MfmaSpec, block: int, i: int, k: int) -> tuple[int, int, int]:
    """(reg, sub, lane) of A[i][k] of ``block`` (reg is the low register of a pair for f64)."""
    w, sub, lane = _input_slot(s, s.m, block, i, k)
    return (2 * w if s.in_bits == 64 else w), sub, lane


def b_slot(s: MfmaSpec, block: int, k: int, j: int) -> tuple[int, int, int]:
    """(reg, sub, lane) of B[k][j] of ``block``."""
    w, sub, lane = _input_slot(s, s.n, block, j, k)
    return (2 * w if s.in_bits == 64 else w), sub, lane


def f8f6f4_slot(s: MfmaSpec, fmt: int, rows: int, row: int, k: int) -> tuple[int, int, int]:
    """(lane, bit offset in the lane's register tuple, element bits) of element (row, k) of an f8f6f4
    input in format ``fmt`` (cbsz/blgp code) whose other dimension is ``rows`` (M for A, N for B)."""
    w, sub, lane = _input_slot(s, rows, 0, row, k, fmt)
    bits = F8F6F4_FORMATS[fmt][1]
    return lane, (w * 4 + sub) * bits, bits


def cd_slot(s: MfmaSpec, block: int, i: int, j: int) -> tuple[int, int]:
    """(reg, lane) of C/D[i][j] of ``block`` (reg is the low register of a pair for f64)."""
    w, lane = _out_slot(s, block, i, j)
    return (2 * w if s.out_bits == 64 else w), lane


# ----------------------------------------------------------------------------- index arrays

_BLGP_LANE = {
    0: lambda L: L,
    1: lambda L: L % 32,
    2: lambda L: 32 + L % 32,
    3: lambda L: (L + 16) % 64,
    4: lambda L: L % 16,
    5: lambda L: 16 + L % 16,
    6: lambda L: 32 + L % 16,
    7: lambda L: 48 + L % 16,
}


@dataclass(frozen=True)
class Layout:
    """Gather indices of one instruction + modifier setting (positions in the per-wave flat arrays).

    Inputs are flattened per wave as ``[word][lane][sub]`` (word = register, or register pair for
    f64): ``a_idx[b, i, k]`` and ``b_idx[b, k, j]`` index that.  ``d_src[w*64 + lane]`` is the
    flat ``(b, i, j)`` index of the result element that D word ``w`` holds in ``lane``.
    """

    a_idx: np.ndarray
    b_idx: np.ndarray
    d_src: np.ndarray


@cache
def layout(name: str, cbsz: int = 0, abid: int = 0, blgp: int = 0) -> Layout:
    """Index arrays for ``name`` with the given (already validated) modifiers; cached."""
    s = SPECS[name]
    per = _elem_per_word(s)
    a_idx = host.empty((s.blocks, s.m, s.k), host.int64)
    b_idx = host.empty((s.blocks, s.k, s.n), host.int64)
    # f8f6f4: cbsz/blgp are the A/B formats (they change where k sits, not blocks or lanes)
    fa, fb = (cbsz, blgp) if s.layout == "f8f6f4" else (0, 0)
    if s.layout == "f8f6f4":
        cbsz = blgp = 0
    bc = 1 << cbsz
    lane_of = _BLGP_LANE[blgp] if not s.out_type == "f64" else _BLGP_LANE[0]
    for blk in range(s.blocks):
        src_blk = (blk // bc) * bc + abid
        for i in range(s.m):
            for k in range(s.k):
                w, sub, lane = _input_slot(s, s.m, src_blk, i, k, fa)
                a_idx[blk, i, k] = (w * 64 + lane) * per + sub
        for k in range(s.k):
            for j in range(s.n):
                w, sub, lane = _input_slot(s, s.n, blk, j, k, fb)
                b_idx[blk, k, j] = (w * 64 + lane_of(lane)) * per + sub
    words = s.c_regs // (2 if s.out_bits == 64 else 1)
    d_src = host.full(words * 64, -1, host.int64)
    for blk in range(s.blocks):
        for i in range(s.m):
            for j in range(s.n):
                w, lane = _out_slot(s, blk, i, j)
                d_src[w * 64 + lane] = (blk * s.m + i) * s.n + j
    if cbsz == 0 and blgp == 0:            # the unmodified layout must be a bijection
        assert host.array_equal(host.sort(a_idx.ravel()), host.arange(a_idx.size)), name
        assert host.array_equal(host.sort(b_idx.ravel()), host.arange(b_idx.size)), name
    assert (d_src >= 0).all(), name
    for arr in (a_idx, b_idx, d_src):
        arr.flags.writeable = False
    if X.active() != "cpu":       # built on the host, used on the engine's device
        return Layout(X.from_host(a_idx), X.from_host(b_idx), X.from_host(d_src))
    return Layout(a_idx, b_idx, d_src)


# ----------------------------------------------------------------------------- execution

# cbsz (A) / blgp (B) of the f8f6f4 MFMAs -> (kind, element bits); the VGPRs of the operand are
# 32 elements * bits / 32 = bits (CDNA4 ISA; LLVM's register classes VReg_256/192/128 agree)
F8F6F4_FORMATS = {0: ("fp8", 8), 1: ("bf8", 8), 2: ("fp6", 6), 3: ("bf6", 6), 4: ("fp4", 4)}
_F8F6F4_NAMES = {0: "fp8 (e4m3)", 1: "bf8 (e5m2)", 2: "fp6 (e2m3)", 3: "bf6 (e3m2)", 4: "fp4 (e2m1)"}


def operand_regs(name, cbsz: int = 0, blgp: int = 0) -> tuple[int, int]:
    """(A, B) VGPR counts of ``name`` (a name or MfmaSpec) with these modifiers: the f8f6f4 forms take
    8 (fp8/bf8), 6 (fp6/bf6) or 4 (fp4) registers per operand as cbsz/blgp select; others the spec's."""
    s = name if isinstance(name, MfmaSpec) else SPECS[name]
    if s.layout != "f8f6f4":
        return s.a_regs, s.b_regs
    return F8F6F4_FORMATS[int(cbsz)][1], F8F6F4_FORMATS[int(blgp)][1]


def _check_modifiers(s: MfmaSpec, cbsz: int, abid: int, blgp: int) -> tuple[str, str, int, int, int]:
    """Validate the modifiers; returns (a_kind, b_kind, cbsz, abid, blgp) for the layout (for f8f6f4,
    cbsz/blgp are the A/B format codes, which the layout needs)."""
    cbsz, abid, blgp = int(cbsz), int(abid), int(blgp)
    if s.layout == "f8f6f4":
        for field, v in (("cbsz", cbsz), ("blgp", blgp)):
            if v not in F8F6F4_FORMATS:
                raise MfmaError(f"{s.name}: {field}={v} is not a matrix format (0 fp8 e4m3, 1 bf8 e5m2, "
                                "2 fp6 e2m3, 3 bf6 e3m2, 4 fp4 e2m1)")
        if abid:
            raise MfmaError(f"{s.name}: abid={abid} is not defined for this instruction (must be 0)")
        return F8F6F4_FORMATS[cbsz][0], F8F6F4_FORMATS[blgp][0], cbsz, 0, blgp
    if cbsz or abid:
        if not s.cbsz_abid:
            raise MfmaError(f"{s.name}: cbsz={cbsz} abid={abid} given, but this instruction has no "
                            "A-block broadcast (CBSZ/ABID must be 0)")
        max_cbsz = min(4, s.blocks.bit_length() - 1)
        if not 0 <= cbsz <= max_cbsz:
            raise MfmaError(f"{s.name}: cbsz={cbsz} out of range 0..{max_cbsz}")
        if not 0 <= abid < (1 << cbsz):
            raise MfmaError(f"{s.name}: abid={abid} out of range 0..{(1 << cbsz) - 1} for cbsz={cbsz}")
    if blgp:
        if not s.blgp:
            raise MfmaError(f"{s.name}: blgp={blgp} given, but this instruction has no B lane "
                            "patterns (BLGP must be 0)")
        if not 0 <= blgp <= 7:
            raise MfmaError(f"{s.name}: blgp={blgp} out of range 0..7")
    return s.a_type, s.b_type, cbsz, abid, (0 if s.out_type == "f64" else blgp)


# OCP MX v1.0 element formats without inf/NaN: (exponent bits, mantissa bits); bias 2**(e-1) - 1
_MX_MINIFLOATS = {"fp6": (2, 3), "bf6": (3, 2), "fp4": (2, 1)}


def _minifloat_table(ebits: int, mbits: int) -> np.ndarray:
    """Every code of a sign/exponent/mantissa format with no inf/NaN -> its value (subnormals kept)."""
    bias = (1 << (ebits - 1)) - 1
    out = np.empty(1 << (1 + ebits + mbits), np.float64)
    for code in range(out.size):
        e = (code >> mbits) & ((1 << ebits) - 1)
        m = code & ((1 << mbits) - 1)
        mag = (m / (1 << mbits)) * 2.0 ** (1 - bias) if e == 0 else (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
        out[code] = -mag if code >> (ebits + mbits) else mag
    return out


@cache
def _decode_table(kind: str, target: str):
    """Lookup table raw code -> value (float64, int64 for i8) for the 8-bit and narrower kinds;
    None otherwise."""
    if kind in ("fp8", "bf8"):
        return nx.fp8_table(nx.fp8_format(target, kind)).astype(np.float64)
    if kind in _MX_MINIFLOATS:
        return _minifloat_table(*_MX_MINIFLOATS[kind])
    if kind == "i8":
        return np.arange(256, dtype=np.uint8).view(np.int8).astype(np.int64)
    return None


def _decode(raw: np.ndarray, kind: str, target: str) -> np.ndarray:
    """Raw element bits (fresh contiguous array) -> float64 values (int64 for i8), exactly."""
    table = _decode_table(kind, target)
    if table is not None:
        return np.take(table, raw)
    if X.active() != "cpu" and kind in ("bf16", "f32", "xf32"):     # no flushed float32 step (xp.py)
        if kind == "bf16":
            return X.f32_bits_to_f64(raw.astype(np.uint32) << np.uint32(16))
        return X.f32_bits_to_f64(raw if kind == "f32" else raw & np.uint32(0xFFFFE000))
    with np.errstate(invalid="ignore"):              # signalling NaNs widen with a warning
        if kind == "bf16":                           # bf16 bits are the top half of an f32
            return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
        if kind == "f16":
            return raw.view(np.float16).astype(np.float64)
        if kind == "f32":
            return raw.view(np.float32).astype(np.float64)
        if kind == "xf32":
            return (raw & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if kind == "f64":
        return raw.view(np.float64)
    raise AssertionError(kind)


@dataclass(frozen=True)
class _Plan:
    """Gather indices for W waves and reused scratch.

    ``a_idx[w, b, i, k]`` / ``b_idx[w, b, k, j]`` index the operand's flat elements (``[reg][w][lane]
    [sub]``, i.e. the operand array as given).  Single-block instructions (``rows is not None``)
    gather A's rows in D-register order instead: row ``rho = reg*(64/N) + lane//N`` of the product
    is D's register ``reg``, lanes ``lane//N*N .. +N``, so the product *is* D up to swapping the wave
    and register axes and needs no gather.  Multi-block instructions gather D with ``d_idx[r, w, lane]``
    (flat ``[w][b][i][j]`` products).  ``prod``/``acc``: scratch reused by every call (fresh large
    temporaries cost page faults each call; the emulator is single-threaded)."""

    a_idx: np.ndarray
    b_idx: np.ndarray
    d_idx: np.ndarray | None
    prod: np.ndarray      # [W, B, M, N] products
    acc: np.ndarray       # [words, W, 64] gathered products (multi-block and f64 paths)
    rows: np.ndarray | None   # i of each product row (single-block), None: rows are i


def _d_row_order(s: MfmaSpec) -> np.ndarray | None:
    """For single-block instructions: i of each product row rho in D-register order (see _Plan)."""
    if s.blocks != 1 or 64 % s.n:
        return None
    per_reg = 64 // s.n
    order = np.full(s.m, -1, np.int64)
    for i in range(s.m):
        word, lane = _out_slot(s, 0, i, 0)
        if lane % s.n or any(_out_slot(s, 0, i, j) != (word, lane + j) for j in range(s.n)):
            return None
        order[word * per_reg + lane // s.n] = i
    return order if (order >= 0).all() else None


@lru_cache(maxsize=512)
def _plan(name: str, cbsz: int, abid: int, blgp: int, W: int) -> _Plan:
    s = SPECS[name]
    lay = layout(name, cbsz, abid, blgp)
    per = _elem_per_word(s)
    wave_stride = 64 * per

    def spread(idx: np.ndarray) -> np.ndarray:
        # per-wave flat [word][lane][sub] -> operand flat [word][w][lane][sub]
        word, rest = np.divmod(idx, wave_stride)
        w = np.arange(W).reshape((W,) + (1,) * idx.ndim)
        return (word * (W * wave_stride) + w * wave_stride + rest).astype(np.intp)

    words = s.c_regs // (2 if s.out_bits == 64 else 1)
    acc_t = np.int64 if s.out_type == "i32" else np.float64
    order = _d_row_order(s) if s.out_bits == 32 else None
    a_idx = lay.a_idx if order is None else lay.a_idx[:, order, :]
    d_idx = None
    if order is None:
        bmn = s.blocks * s.m * s.n
        d_idx = (lay.d_src.reshape(words, 1, 64) + (np.arange(W) * bmn).reshape(1, W, 1)).astype(np.intp)
    return _Plan(spread(a_idx), spread(lay.b_idx), d_idx,
                 np.empty((W, s.blocks, s.m, s.n), acc_t), np.empty((words, W, 64), acc_t), order)


def _flat_elements(x: np.ndarray, bits: int) -> np.ndarray:
    """The operand's elements flat in [reg][w][lane][sub] order (register pairs -> uint64 for f64)."""
    x = np.ascontiguousarray(x, dtype=np.uint32)
    if bits == 64:
        R, W, L = x.shape
        pair = x.reshape(R // 2, 2, W, L)
        return (pair[:, 0].astype(np.uint64) | (pair[:, 1].astype(np.uint64) << np.uint64(32))).ravel()
    if bits == 16:
        return x.view(np.uint16).ravel()
    if bits == 8:
        return x.view(np.uint8).ravel()
    return x.ravel()


# fp6: element e of the lane's 192-bit string starts at bit 6e: register r = 6e // 32, offset o
_FP6_REG = np.array([6 * e // 32 for e in range(32)], np.intp)
_FP6_OFF = np.array([6 * e % 32 for e in range(32)], np.uint64)


def _f8f6f4_codes(x: np.ndarray, fmt: int) -> np.ndarray:
    """The element codes of an f8f6f4 operand ``uint32[regs, W, 64]`` flat in the [word][w][lane][sub]
    order of the fp8 layout (8 words of 4 one-byte slots per lane; element e = word*4 + sub)."""
    bits = F8F6F4_FORMATS[fmt][1]
    x = np.ascontiguousarray(x, dtype=np.uint32)
    if bits == 8:
        return x.view(np.uint8).ravel()
    _, W, L = x.shape
    if bits == 4:               # nibble n of register r is element 8r + n
        nib = (x[:, :, :, None] >> (np.arange(8, dtype=np.uint32) * np.uint32(4))) & np.uint32(0xF)
        codes = nib.reshape(4, W, L, 2, 4).transpose(0, 3, 1, 2, 4)          # [r, n//4, W, L, n%4]
        return codes.astype(np.uint8).ravel()
    wide = np.concatenate([x, np.zeros((1, W, L), np.uint32)]).astype(np.uint64)
    pair = wide[_FP6_REG] | (wide[_FP6_REG + 1] << np.uint64(32))              # [32, W, L]
    codes = (pair >> _FP6_OFF[:, None, None]) & np.uint64(0x3F)
    return codes.astype(np.uint8).reshape(8, 4, W, L).transpose(0, 2, 3, 1).ravel()


_CHUNK = 256          # waves per inner call (measured: ~25% faster per wave than 1024 at once)

_E8M0 = np.array([2.0 ** (e - 127) for e in range(255)] + [np.nan], np.float64)


def _block_scales(s: MfmaSpec, scale, opsel: int, rows: int, W: int, which: str) -> np.ndarray:
    """E8M0 scale factors [W, rows, K/32] of A (rows = M) or B (rows = N) from the scale VGPR."""
    if scale is None:
        raise MfmaError(f"{s.name}: the {which} scale operand is missing")
    if not 0 <= int(opsel) <= 3:
        raise MfmaError(f"{s.name}: op_sel byte {opsel} of the {which} scale out of range 0..3")
    reg = np.broadcast_to(np.asarray(scale, dtype=np.uint32), (W, 64))
    e = (reg >> np.uint32(8 * int(opsel))) & np.uint32(0xFF)
    kb = s.k // 32
    lane = (np.arange(kb)[None, :] * rows + np.arange(rows)[:, None])       # [rows, kb]
    return X.from_host(_E8M0)[e[:, lane]]       # (the table on the engine's device)


def validate(name: str, target, cbsz: int = 0, abid: int = 0, blgp: int = 0) -> MfmaSpec:
    """Check an MFMA and its modifiers for ``target`` without running it (for compile time)."""
    s = spec(name, target)
    _check_modifiers(s, cbsz, abid, blgp)
    return s


def mfma(name: str, target, a, b, c, cbsz: int = 0, abid: int = 0, blgp: int = 0, *,
         scale_a=None, scale_b=None, opsel_a: int = 0, opsel_b: int = 0, out=None) -> np.ndarray:
    """Execute one MFMA for W waves: see the module docstring for shapes and semantics."""
    t = _target_name(target)
    s = spec(name, t)
    a_kind, b_kind, cbsz, abid, lay_blgp = _check_modifiers(s, cbsz, abid, blgp)
    if not s.scaled and (scale_a is not None or scale_b is not None or opsel_a or opsel_b):
        raise MfmaError(f"{name} takes no scale operands (only the v_mfma_scale_* forms do)")
    a = np.asarray(a)
    b = np.asarray(b)
    na, nb = operand_regs(s, cbsz, blgp)
    if a.ndim != 3 or a.shape[0] != na or a.shape[2] != 64:
        raise MfmaError(f"{name}: A must be uint32[{na}, W, 64], got {a.shape}")
    if b.shape != (nb,) + a.shape[1:]:
        raise MfmaError(f"{name}: B must be uint32[{nb}, {a.shape[1]}, 64], got {b.shape}")
    W = a.shape[1]
    if _native_ok(s, a_kind, b_kind) and X.active() == "cpu" and native.available():
        return _run_native(s, t, a, b, c, a_kind, b_kind, cbsz, abid, lay_blgp, out)
    if _native_ok(s, a_kind, b_kind) and X.active() == "cuda":      # one CUDA kernel (cuda_kernels.py)
        from isagen.runtime.emu import cuda_kernels
        return cuda_kernels.mfma_f32(s, t, a, b, c, a_kind, b_kind, cbsz, abid, lay_blgp, out, layout)
    if s.layout == "f8f6f4" and s.out_type == "f32" and X.active() == "cuda":     # one CUDA kernel
        return _run_mx_cuda(s, t, a, b, c, (a_kind, b_kind, cbsz, abid, lay_blgp), scale_a, scale_b, opsel_a,
                            opsel_b, out)
    if W <= _CHUNK:
        return _run(s, t, a, b, c, a_kind, b_kind, cbsz, abid, blgp, lay_blgp, scale_a, scale_b,
                    opsel_a, opsel_b, out)
    # keep the working set in cache: run large batches 256 waves at a time
    c = np.broadcast_to(np.asarray(c, dtype=np.uint32), (s.c_regs, W, 64))
    if out is None:
        out = np.empty((s.c_regs, W, 64), np.uint32)
    sa = None if scale_a is None else np.broadcast_to(np.asarray(scale_a, dtype=np.uint32), (W, 64))
    sb = None if scale_b is None else np.broadcast_to(np.asarray(scale_b, dtype=np.uint32), (W, 64))
    for w0 in range(0, W, _CHUNK):
        w = slice(w0, w0 + _CHUNK)
        _run(s, t, a[:, w], b[:, w], c[:, w], a_kind, b_kind, cbsz, abid, blgp, lay_blgp,
             None if sa is None else sa[w], None if sb is None else sb[w], opsel_a, opsel_b, out[:, w])
    return out


def _scale_operands(s: MfmaSpec, scale_a, scale_b, opsel_a: int, opsel_b: int):
    """(scale_a, scale_b, opsel_a, opsel_b) of a v_mfma_scale_* (checked as _block_scales checks them), or
    None for an MFMA without scales."""
    if not s.scaled:
        return None
    for which, sc, sel in (("A", scale_a, opsel_a), ("B", scale_b, opsel_b)):
        if sc is None:
            raise MfmaError(f"{s.name}: the {which} scale operand is missing")
        if not 0 <= int(sel) <= 3:
            raise MfmaError(f"{s.name}: op_sel byte {sel} of the {which} scale out of range 0..3")
    return scale_a, scale_b, int(opsel_a), int(opsel_b)


def _run_mx_cuda(s: MfmaSpec, t: str, a, b, c, kinds: tuple, scale_a, scale_b, opsel_a, opsel_b, out):
    """An f8f6f4 MFMA (f32 result) on the cuda engine: cuda_kernels.mfma_mx, the same operations as _run."""
    from isagen.runtime.emu import cuda_kernels
    scales = _scale_operands(s, scale_a, scale_b, opsel_a, opsel_b)
    bits = (F8F6F4_FORMATS[kinds[2]][1], F8F6F4_FORMATS[kinds[4]][1])
    W = a.shape[1]
    if out is not None and out.strides[2] != 4:
        out[...] = cuda_kernels.mfma_mx(s, t, kinds, bits, a, b, c, None, scales, None, W, layout, _decode_table)
        return out
    return cuda_kernels.mfma_mx(s, t, kinds, bits, a, b, c, out, scales, None, W, layout, _decode_table)


def _run(s: MfmaSpec, t: str, a, b, c, a_kind, b_kind, cbsz, abid, blgp, lay_blgp,
         scale_a, scale_b, opsel_a, opsel_b, out):
    """One MFMA for at most _CHUNK waves (arguments validated by mfma())."""
    name = s.name
    W = a.shape[1]
    plan = _plan(name, cbsz, abid, lay_blgp, W)
    bits = s.in_bits

    if s.layout == "f8f6f4":      # cbsz/blgp are the formats; every format gathers as fp8 bytes
        a_flat, b_flat = _f8f6f4_codes(a, cbsz), _f8f6f4_codes(b, lay_blgp)
    else:
        a_flat, b_flat = _flat_elements(a, bits), _flat_elements(b, bits)
    a_el = _decode(np.take(a_flat, plan.a_idx), a_kind, t)        # [W, B, M, K]
    b_el = _decode(np.take(b_flat, plan.b_idx), b_kind, t)        # [W, B, K, N]
    if s.scaled:      # exact: powers of two applied to A and B before the (exact) products
        sa = _block_scales(s, scale_a, opsel_a, s.m, W, "A")                         # [W, M, K/32]
        if plan.rows is not None:                                    # A's rows are in D order
            sa = sa[:, plan.rows, :]
        sb = _block_scales(s, scale_b, opsel_b, s.n, W, "B")                         # [W, N, K/32]
        a_el = a_el * np.repeat(sa, 32, axis=2)[:, None, :, :]
        b_el = b_el * np.repeat(sb, 32, axis=2).transpose(0, 2, 1)[:, None, :, :]

    if s.out_type == "f64":
        if X.active() != "cpu":     # its products are not exact in float64: the sum's order and fusing show
            raise X.EngineError(f"{name}: f64 MFMAs are not supported by the cuda emulator engine "
                                f"(use {X.ENV}=cpu)")
        if blgp & 1:
            a_el = -a_el
        if blgp & 2:
            b_el = -b_el
        c64 = np.broadcast_to(np.asarray(c, dtype=np.uint32), (s.c_regs, W, 64))
        cv = _flat_elements(c64, 64).view(np.float64).reshape(s.c_regs // 2, W, 64)
        if blgp & 4:
            cv = -cv
        np.matmul(a_el, b_el, out=plan.prod)
        assert plan.d_idx is not None       # _plan gathers D with d_idx for every 64-bit output
        prod = np.take(plan.prod.ravel(), plan.d_idx, out=plan.acc)                 # [pairs, W, 64]
        d = (prod + cv).view(np.uint64)
        res = np.empty((s.c_regs // 2, 2, W, 64), np.uint32)
        res[:, 0] = d & np.uint64(0xFFFFFFFF)
        res[:, 1] = d >> np.uint64(32)
        res = res.reshape(s.c_regs, W, 64)
        if out is None:
            return res
        out[...] = res
        return out

    c32 = np.broadcast_to(np.asarray(c, dtype=np.uint32), (s.c_regs, W, 64))
    if out is None:
        out = np.empty((s.c_regs, W, 64), np.uint32)
    if X.active() == "cpu" or s.out_type == "i32":     # integer sums are exact in any order
        np.matmul(a_el, b_el, out=plan.prod)
    else:
        X.matmul_k_order(a_el, b_el, plan.prod)
    if plan.rows is not None:
        acc = plan.prod.reshape(W, s.c_regs, 64).transpose(1, 0, 2)             # a view: D order
    else:
        assert plan.d_idx is not None       # _plan sets d_idx exactly when it sets no row order
        acc = np.take(plan.prod.ravel(), plan.d_idx, out=plan.acc)                 # [c_regs, W, 64]
    if s.out_type == "i32":     # int64 sum, stored modulo 2**32
        np.add(acc, c32.view(np.int32), out=out.view(np.int32), dtype=np.int64, casting="unsafe")
        return out
    if X.active() != "cpu":     # the same sum and rounding without a flushed float32 step (xp.py)
        X.add_round_f32(acc, c32, out)
        return out
    with np.errstate(invalid="ignore", over="ignore"):   # float64 sum, one rounding to f32 (RNE)
        np.add(acc, c32.view(np.float32), out=out.view(np.float32), dtype=np.float64, casting="unsafe")
    return out


# ----------------------------------------------------------------------------- native engine

_NATIVE_KINDS = {"bf16": 2, "f16": 2, "fp8": 1, "bf8": 1}


def _native_ok(s: MfmaSpec, a_kind: str, b_kind: str) -> bool:
    """Whether the native kernel (native.py) runs this MFMA: float inputs of 8/16 bits, f32 result."""
    return (s.out_type == "f32" and s.layout == "gfx9" and not s.scaled and a_kind in _NATIVE_KINDS
            and b_kind in _NATIVE_KINDS and _NATIVE_KINDS[a_kind] == _NATIVE_KINDS[b_kind])


@cache
def _lut32(kind: str, target: str) -> np.ndarray:
    """float32 value of every raw code of a 16- or 8-bit float kind (exact: f32 holds them all)."""
    if kind == "bf16":
        return (np.arange(65536, dtype=np.uint32) << np.uint32(16)).view(np.float32)
    if kind == "f16":
        return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    t = _decode_table(kind, target)
    assert t is not None
    return t.astype(np.float32)


@lru_cache(maxsize=512)
def _native_offsets(name: str, cbsz: int, abid: int, blgp: int, eb: int, a_st: tuple, b_st: tuple,
                    c_st: tuple, d_st: tuple):
    """The tables of the native kernel's record (native.py) for given operand strides (bytes; lanes 4
    bytes apart in A, B and D, 0 or 4 in C): per (block, k) the element offsets of A's rows i and B's
    columns j inside a wave and whether they are consecutive lanes (the kernel then reads them as
    words), and per (block, i) the word offsets of C's and D's row (j steps one lane)."""
    s = SPECS[name]
    lay = layout(name, cbsz, abid, blgp)
    per = 4 // eb

    def offs(idx: np.ndarray, st: tuple) -> tuple[np.ndarray, int]:
        word, rest = np.divmod(idx, 64 * per)        # idx [blocks, K, rows]: per-wave flat [word][lane][sub]
        lane, sub = np.divmod(rest, per)
        off = np.ascontiguousarray(word * (st[0] // eb) + lane * (st[2] // eb) + sub, dtype=np.int64)
        step = np.arange(idx.shape[2], dtype=np.int64) * per
        contig = st[2] == 4 and bool((off - off[:, :, :1] == step).all())
        return off, int(contig)

    a_off, a_contig = offs(lay.a_idx.transpose(0, 2, 1), a_st)
    b_off, b_contig = offs(lay.b_idx, b_st)
    # where D[b][i][0] is: D's words hold j = 0..N-1 of a row in consecutive lanes
    flat = np.empty(s.blocks * s.m * s.n, np.int64)
    flat[lay.d_src] = np.arange(lay.d_src.size)
    where = flat.reshape(s.blocks * s.m, s.n)
    assert (where - where[:, :1] == np.arange(s.n)).all(), name
    word, lane = np.divmod(where[:, 0], 64)
    c_row = np.ascontiguousarray(word * (c_st[0] // 4) + lane * (c_st[2] // 4), dtype=np.int64)
    d_row = np.ascontiguousarray(word * (d_st[0] // 4) + lane, dtype=np.int64)
    return a_off, a_contig, b_off, b_contig, c_row, d_row


def _operand(x: np.ndarray, eb: int) -> np.ndarray:
    """uint32 [regs, W, 64] operand whose strides are whole elements of ``eb`` bytes (copied if not)."""
    x = np.asarray(x, dtype=np.uint32)
    if any(st % 4 for st in x.strides) or x.strides[2] != 4:
        x = np.ascontiguousarray(x)
    return x


def _record(s: MfmaSpec, t: str, a, b, c32, out, a_kind: str, b_kind: str, cbsz: int, abid: int, lay_blgp: int):
    """The native kernel's record for one MFMA over the waves of ``a``/``b``/``c32``/``out`` (uint32 views
    with the wave as axis 1; lanes 4 bytes apart, 0 or 4 in ``c32``), and what its addresses point into."""
    eb = _NATIVE_KINDS[a_kind]
    a_off, a_contig, b_off, b_contig, c_row, d_row = _native_offsets(
        s.name, cbsz, abid, lay_blgp, eb, a.strides, b.strides, c32.strides, out.strides)
    lut_a, lut_b = _lut32(a_kind, t), _lut32(b_kind, t)
    adr = native.address
    rec = np.zeros(native.REC, np.int64)
    rec[:29] = (3 if a_kind == b_kind == "bf16" else eb, s.blocks, s.m, s.n, s.k,
                adr(a), a.strides[1], adr(a_off), a_contig, adr(b), b.strides[1], adr(b_off), b_contig,
                adr(lut_a), adr(lut_b), adr(c32), c32.strides[1], adr(c_row), int(c32.strides[2] != 0),
                adr(out), out.strides[1], adr(d_row),
                a.shape[0], a.strides[0], b.shape[0], b.strides[0], s.c_regs, c32.strides[0], out.strides[0])
    return rec, (a, b, c32, out, a_off, b_off, c_row, d_row, lut_a, lut_b)


def _run_native(s: MfmaSpec, t: str, a, b, c, a_kind, b_kind, cbsz, abid, lay_blgp, out):
    """One MFMA for every wave through the C kernel of native.py: the same bits as _run (see there)."""
    eb = _NATIVE_KINDS[a_kind]
    W = a.shape[1]
    a, b = _operand(a, eb), _operand(b, eb)
    c32 = np.broadcast_to(np.asarray(c, dtype=np.uint32), (s.c_regs, W, 64))
    if c32.strides[2] not in (0, 4) or any(st % 4 for st in c32.strides):
        c32 = np.ascontiguousarray(c32)
    if out is None:
        out = np.empty((s.c_regs, W, 64), np.uint32)
    elif np.may_share_memory(c32, out) and (native.address(c32) != native.address(out) or c32.strides != out.strides):
        c32 = c32.copy()        # C partly overlapping D: read it before D is written
    if out.strides[2] != 4 or any(st % 4 for st in out.strides):
        res = _run_native(s, t, a, b, c32, a_kind, b_kind, cbsz, abid, lay_blgp, None)
        out[...] = res
        return out
    rec, _keep = _record(s, t, a, b, c32, out, a_kind, b_kind, cbsz, abid, lay_blgp)
    native.run(rec[None], W, 32)
    return out


def native_call(name: str, target, a, b, c, out, cbsz: int = 0, abid: int = 0, blgp: int = 0):
    """The native kernel's record for one MFMA over the waves of ``a``/``b``/``c``/``out`` (views with
    the wave as axis 1, ``out`` not overlapping A or B) and the arrays it points into, for
    :func:`run_plan`; None where the MFMA or the arrays need the general path (``mfma()``).  Same bits
    as ``mfma(..., out=out)``."""
    t = _target_name(target)
    s = spec(name, t)
    a_kind, b_kind, cbsz, abid, lay_blgp = _check_modifiers(s, cbsz, abid, blgp)
    if not (_native_ok(s, a_kind, b_kind) and X.active() == "cpu" and native.available()):
        return None
    W = a.shape[1]
    c32 = np.broadcast_to(np.asarray(c, dtype=np.uint32), (s.c_regs, W, 64))
    arrays = (a, b, c32, out)
    if any(x.dtype != np.uint32 or x.strides[2] not in (0, 4) or any(st % 4 for st in x.strides) for x in arrays) \
            or a.strides[2] != 4 or b.strides[2] != 4 or out.strides[2] != 4:
        return None
    if np.may_share_memory(c32, out) and (native.address(c32) != native.address(out) or c32.strides != out.strides):
        return None
    return _record(s, t, a, b, c32, out, a_kind, b_kind, cbsz, abid, lay_blgp)


def run_plan(calls: list) -> np.ndarray:
    """The records of a run of :func:`native_call` results, for :func:`call_run` (the caller keeps the
    calls alive with it: the records hold addresses into their arrays)."""
    return np.stack([rec for rec, _ in calls])


def call_run(rec: np.ndarray, W: int, chunk: int) -> None:
    """Run the MFMAs of ``rec`` (:func:`run_plan`) in program order for each of the waves 0..W-1,
    ``chunk`` waves at a time, in one native call (on several threads where the work is large)."""
    native.run(rec, W, chunk)


for _f in (layout, _plan, _decode_table, _lut32, _native_offsets):
    X.register_cache(_f.cache_clear)
