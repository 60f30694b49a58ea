"""fp32 math on the VALU for memory-bound kernels: exp, sigmoid, SiLU, GeLU (erf and tanh forms), tanh,
ReLU, with the instruction sequences chosen so that no constant needs an SGPR.

The hardware's transcendental unit gives ``v_exp_f32`` = 2^x, ``v_rcp_f32`` = 1/x and ``v_rsq_f32`` =
1/sqrt(x), each within 1 ulp (AMD's CDNA3 ISA guide); e^x is ``v_exp_f32(x * log2(e))``.  Constants
that are not inline constants ride as the 32-bit literal of a VOP2 instruction (``v_mul_f32``,
``v_add_f32``, ``v_fmaak_f32`` = a*b + K, ``v_fmamk_f32`` = a*K + b), since gfx9's VOP3 form takes no
literal.  The accuracy of every function, measured against float64 over its input range, is in
docs/kernels.md ("Accuracy", from ``bench/mem_accuracy.py``); ``tests/prims/test_mem_prims.py`` holds the bounds.

Formulas:

* sigmoid(x) = 1 / (1 + 2^(-x log2 e));  silu(x) = x * sigmoid(x).  Large negative x gives
  2^big = inf, 1/inf = 0: silu -> -0 (torch: a denormal or -0); silu(-inf) = -inf * 0 = NaN as in torch.
* gelu(x) = x * Phi(x), Phi(x) = erfc(-x/sqrt 2)/2 — computed through erfc of z = |x|/sqrt 2 >= 0 so
  that neither tail loses digits to cancellation: Phi = erfc(z)/2 for x < 0, 1 - erfc(z)/2 otherwise.
  erfc(z) = t * exp(-z^2 + P(t)), t = 1/(1 + z/2), P a degree-9 polynomial (the Chebyshev fit published
  in Numerical Recipes, "erfcc", fractional error below 1.2e-7 in exact arithmetic).
* gelu_tanh(x) = x/2 * (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), rewritten as the identity
  x * sigmoid(2u), which has no cancellation: 2u = x (c1 + c2 x^2).
* tanh(x): for |x| < 0.5 the odd polynomial x + x^3 Q(x^2) (Cephes ``tanhf``'s minimax
  coefficients); otherwise sign(x) (1 - 2 / (e^{2|x|} + 1)).  Both are computed and one is selected.
* relu(x) = 0 where x < 0, else x: NaN and -0.0 pass through, as torch's ``relu`` does.

The element-wise functions work on several values at once (``xs``, ``dsts``, one temporaries list per
value, one mask per value: ``vcc`` or an SGPR pair), emitting each step for every value before the next
step: the independent instructions fill the wait states a transcendental result (1) or a compare's
mask (2) needs before it is read, so a group of 4 or more values needs no ``s_nop``.
"""

from __future__ import annotations

import math as _m
import struct as _struct
from collections.abc import Callable
from dataclasses import dataclass

from isagen.isa.operands import VCC, Reg, neg

LOG2E = 1.4426950408889634
INV_SQRT2 = 0.7071067811865476
SQRT_2_OVER_PI = _m.sqrt(2.0 / _m.pi)
GELU_TANH_C = 0.044715
# erfc(z) ~ t*exp(-z^2 + P(t)), t = 1/(1 + z/2): P's coefficients, constant term first (Numerical Recipes)
ERFC_P = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
          1.48851587, -0.82215223, 0.17087277)
# tanh(x) ~ x + x^3 * Q(x^2) for |x| < 0.625: Q's coefficients, constant term first (Cephes tanhf)
TANH_Q = (-3.33332819422e-1, 1.33314422036e-1, -5.37397155531e-2, 2.06390887954e-2, -5.70498872745e-3)
TANH_SMALL = 0.5         # below it the polynomial (minimax on |x| < 0.625); 0.5 is an inline constant


SHIFT_SPLIT = 65536.0        # softmax rows with |max| above it subtract the max before scaling (exp_shifted)


def shift_constants(k, consts: Reg, mx: Reg, tmp: Reg) -> None:
    """The per-row constants of ``exp_shifted`` for a row whose max is ``mx`` (a VGPR), in the VGPR
    pair ``consts``: -m_hi, then -c = -fl((m - m_hi) fl(log2 e)), where m_hi = 0 when |m| <= SHIFT_SPLIT
    and m_hi = m above it (an inf or NaN max makes c NaN and the row NaN, as torch).  ``tmp`` is a
    scratch VGPR.  Seven VALU instructions per row and no compare mask: the choice is an integer
    compare of the bits of |m| (positive floats order as their bit patterns)."""
    neg_mhi, neg_c = consts[0], consts[1]
    split_bits = _struct.unpack("<I", _struct.pack("<f", SHIFT_SPLIT))[0]
    k.v_and_b32(tmp, 0x7FFFFFFF, mx, comment="|max|")
    k.v_sub_u32(tmp, split_bits, tmp, comment=f"negative iff |max| > {SHIFT_SPLIT:g} (or NaN): as integers")
    k.v_xor_b32(neg_c, 0x80000000, mx, comment="-max")
    k.v_ashrrev_i32(tmp, 31, tmp, comment="all ones iff |max| is large: then the max is subtracted first")
    k.v_and_b32(neg_mhi, neg_c, tmp, comment="-m_hi: -max or 0")
    k.v_add_f32(tmp, mx, neg_mhi, comment="max - m_hi: max or 0")
    k.v_mul_f32(neg_c, -LOG2E, tmp, comment="-c = -fl((max - m_hi) log2(e))")


def exp_shifted(k, dst: Reg, x: Reg, consts: Reg, log2e: Reg, what: str = "") -> None:
    """The pair ``dst`` = e^(x - m) for the pair ``x`` (two aligned VGPRs; ``dst`` may be ``x``), with
    the row's constants ``consts`` (-m_hi, -c) from ``shift_constants`` and ``log2e`` an SGPR pair whose
    first SGPR holds fl(log2 e) (the second is not read: set it to the same value).

    Two packed instructions and two exps per pair, as many as a ``v_fmamk_f32`` and an exp per value:
    ``y = x - m_hi`` (``v_pk_add_f32``), ``a = fma(y, fl(log2 e), -c)`` (``v_pk_fma_f32``, one
    rounding), ``2^a``.  Softmax is invariant under a common shift of the exponents, so the rounding of
    ``c`` itself costs nothing; what must hold is that the max's exponent stays near 0.  With m_hi = 0
    it is ``m fl(log2 e) - fl(m fl(log2 e))``, the rounding error of ``c``: at most half an ulp of
    |m log2 e|, 2^-8 for |m| <= SHIFT_SPLIT, but past 128 once |m| is beyond about 1.5e9, where the
    max's e overflowed to inf (or the whole row underflowed to 0) and the row became NaN.  Above
    SHIFT_SPLIT the max is subtracted first (m_hi = m, c = 0): the max's exponent is exactly 0, and x - m
    is exact for every x whose e is not 0 (x >= m - 104 lies within a factor of 2 of m: Sterbenz), so
    both paths round once, and rows with |m| <= SHIFT_SPLIT compute exactly what the fused form did.
    x = -inf, or x - m below -fp32 max, gives 0."""
    # op_sel / op_sel_hi pick the dword of a 64-bit source each half reads: both halves read -m_hi (the
    # low dword of consts) in the add and -c (its high dword) in the fma, so one VGPR pair holds both.
    # The SGPR pair is read through its first SGPR in both halves (packed fp32 reads one SGPR for both;
    # LLVM's MC tests require op_sel = op_sel_hi = 0 for a scalar operand).
    k.v_pk_add_f32(dst, x, consts, op_sel=[0, 0], op_sel_hi=[1, 0],
                   comment=f"{what}x - m_hi (a pair; m_hi is 0 unless |max| is large)")
    k.v_pk_fma_f32(dst, dst, log2e, consts, op_sel=[0, 0, 1], op_sel_hi=[1, 0, 1],
                   comment=f"{what}(x - max) log2(e), one rounding")
    for i in range(2):
        k.v_exp_f32(dst[i], dst[i], comment=f"{what}e^(x - max)" if i == 0 else None)


def _first(i: int, text: str):
    return text if i == 0 else None


def _horner(k, accs: list[Reg], ts: list[Reg], coeffs, what: str) -> None:
    """acc = sum(coeffs[i] * t^i) (constant term first) for every value, with VOP2 literals only."""
    *rest, top = coeffs
    for i, acc in enumerate(accs):
        k.v_mov_b32(acc, float(top), comment=_first(i, f"{what}: highest coefficient"))
    for c in reversed(rest):
        for acc, t in zip(accs, ts):
            k.v_fmaak_f32(acc, acc, t, float(c))


LOG2E_LO = LOG2E - _struct.unpack("<f", _struct.pack("<f", LOG2E))[0]   # log2(e) minus its fp32 rounding
LN2 = 0.6931471805599453
EXP_CLAMP = 200.0            # |a| beyond it: e^a is 0 or inf in fp32 either way


def exp_of(k, dsts: list[Reg], args: list[Reg], temps: list[list[Reg]] | None, precise: bool,
           what: str = "") -> None:
    """dst = e^a for every value (``dst`` may be its ``a``).

    Fast: ``v_exp_f32(a * log2 e)``: the rounding of the product, 0.5 ulp of |a log2 e|, becomes a
    relative error of ``|a| * 2^-24`` (about 1 ulp per unit of |a|).  Precise: the product is split
    exactly, ``a log2 e = h + l`` (``l`` from a fused multiply-add, plus ``a`` times the low part of
    log2 e), and ``e^a = 2^h (1 + l ln 2)``: about 1 ulp whatever |a|.  ``a`` is first clamped to
    +-200 (e^a is 0 or inf there anyway), so infinities cannot turn the correction into NaN.
    Precise uses two temporaries per value."""
    n = len(args)
    if not precise:
        for i in range(n):
            k.v_mul_f32(dsts[i], LOG2E, args[i], comment=_first(i, f"{what}a log2(e)"))
        for i in range(n):
            k.v_exp_f32(dsts[i], dsts[i], comment=_first(i, f"{what}e^a"))
        return
    if temps is None:
        raise ValueError(f"{what}precise e^a needs two temporary VGPRs per value (temps)")
    nh = [t[0] for t in temps]
    c = [t[1] for t in temps]
    for i in range(n):
        k.v_max_f32(c[i], -EXP_CLAMP, args[i], comment=_first(i, f"{what}a clamped to +-{EXP_CLAMP:g}"))
    for i in range(n):
        k.v_min_f32(c[i], EXP_CLAMP, c[i])
    for i in range(n):
        k.v_mul_f32(nh[i], -LOG2E, c[i], comment=_first(i, "-h = -fl(a fl(log2 e))"))
    for i in range(n):
        k.v_fmamk_f32(dsts[i], c[i], LOG2E, nh[i], comment=_first(i, "a fl(log2 e) - h, exact"))
    for i in range(n):
        k.v_fmamk_f32(dsts[i], c[i], LOG2E_LO, dsts[i],
                      comment=_first(i, "l = a log2 e - h (+ a (log2 e - fl(log2 e)))"))
    for i in range(n):
        k.v_exp_f32(c[i], neg(nh[i]), comment=_first(i, f"{what}2^h"))
    for i in range(n):
        k.v_mul_f32(dsts[i], LN2, dsts[i], comment=_first(i, "l ln 2"))
    for i in range(n):
        k.v_fma_f32(dsts[i], c[i], dsts[i], c[i], comment=_first(i, f"{what}e^a = 2^h (1 + l ln 2)"))


def sigmoid(k, dsts: list[Reg], xs: list[Reg], temps: list[list[Reg]] | None = None, precise: bool = False) -> None:
    """dst = 1/(1 + e^-x) (a ``dst`` may be its ``x``); ``precise`` needs two temporaries per value."""
    n = len(xs)
    for i in range(n):
        k.v_xor_b32(dsts[i], 0x80000000, xs[i], comment=_first(i, "-x"))
    exp_of(k, dsts, dsts, temps, precise, "sigmoid: ")
    for i in range(n):
        k.v_add_f32(dsts[i], 1.0, dsts[i], comment=_first(i, "1 + e^-x"))
    for i in range(n):
        k.v_rcp_f32(dsts[i], dsts[i], comment=_first(i, "sigmoid"))


def silu(k, dsts, xs, temps, masks, precise=False) -> None:
    sig = [t[0] for t in temps]
    sigmoid(k, sig, xs, [t[1:] for t in temps], precise)
    for i in range(len(xs)):
        k.v_mul_f32(dsts[i], xs[i], sig[i], comment=_first(i, "silu = x * sigmoid(x)"))


def gelu_tanh(k, dsts, xs, temps, masks, precise=False) -> None:
    """x * sigmoid(2u), 2u = x (c1 + c2 x^2)."""
    n = len(xs)
    a = [t[0] for t in temps]
    c1 = 2.0 * SQRT_2_OVER_PI
    c2 = c1 * GELU_TANH_C
    for i in range(n):
        k.v_mul_f32(a[i], xs[i], xs[i], comment=_first(i, "x^2"))
    for i in range(n):
        k.v_mul_f32(a[i], -c2, a[i], comment=_first(i, "-c2 x^2"))
    for i in range(n):
        k.v_add_f32(a[i], -c1, a[i], comment=_first(i, "-(c1 + c2 x^2)"))
    for i in range(n):
        k.v_mul_f32(a[i], a[i], xs[i], comment=_first(i, "-2u"))
    exp_of(k, a, a, [t[1:] for t in temps], precise, "gelu_tanh: ")
    for i in range(n):
        k.v_add_f32(a[i], 1.0, a[i], comment=_first(i, "1 + e^-2u"))
    for i in range(n):
        k.v_rcp_f32(a[i], a[i], comment=_first(i, "sigmoid(2u) = (1 + tanh u)/2"))
    for i in range(n):
        k.v_mul_f32(dsts[i], xs[i], a[i], comment=_first(i, "gelu (tanh form)"))


def gelu_erf(k, dsts, xs, temps, masks, precise=False) -> None:
    """x * Phi(x) through erfc(|x|/sqrt 2) (module docstring); 3 temporaries per value (5 precise).

    Precise: -z^2 = -x^2/2 is formed from x^2 split exactly (hi + lo, a fused multiply-add), since the
    rounding of z = |x|/sqrt 2 alone would cost 2 |x|^2 2^-24 relative in exp(-z^2)."""
    n = len(xs)
    z = [t[0] for t in temps]
    tt = [t[1] for t in temps]
    p = [t[2] for t in temps]
    for i in range(n):
        k.v_mul_f32(z[i], INV_SQRT2, xs[i], comment=_first(i, "x/sqrt(2)"))
    for i in range(n):
        k.v_and_b32(z[i], 0x7FFFFFFF, z[i], comment=_first(i, "z = |x|/sqrt(2)"))
    for i in range(n):
        k.v_fma_f32(tt[i], z[i], 0.5, 1.0, comment=_first(i, "1 + z/2"))
    for i in range(n):
        k.v_rcp_f32(tt[i], tt[i], comment=_first(i, "t = 1/(1 + z/2)"))
    _horner(k, p, tt, ERFC_P, "erfc polynomial P(t)")
    if precise:
        hi = [t[3] for t in temps]
        lo = [t[4] for t in temps]
        for i in range(n):
            k.v_mul_f32(hi[i], xs[i], xs[i], comment=_first(i, "x^2 = hi + lo exactly"))
        for i in range(n):
            k.v_fma_f32(lo[i], xs[i], xs[i], neg(hi[i]))
        for i in range(n):
            k.v_fma_f32(p[i], hi[i], -0.5, p[i], comment=_first(i, "P(t) - x^2/2 = P(t) - z^2"))
        for i in range(n):
            k.v_fma_f32(p[i], lo[i], -0.5, p[i])
    else:
        for i in range(n):
            k.v_fma_f32(p[i], neg(z[i]), z[i], p[i], comment=_first(i, "-z^2 + P(t)"))
    exp_of(k, p, p, [t[3:] for t in temps], precise, "erfc: ")
    for i in range(n):
        k.v_mul_f32(p[i], tt[i], p[i], comment=_first(i, "erfc(z)"))
    for i in range(n):
        k.v_mul_f32(p[i], 0.5, p[i], comment=_first(i, "erfc(z)/2 = Phi(x) for x < 0"))
    for i in range(n):
        k.v_cmp_gt_f32(masks[i], 0, xs[i], comment=_first(i, "x < 0?"))
    for i in range(n):
        k.v_sub_f32(z[i], 1.0, p[i], comment=_first(i, "1 - erfc(z)/2 = Phi(x) for x >= 0"))
    for i in range(n):
        k.v_cndmask_b32(z[i], z[i], p[i], masks[i], comment=_first(i, "Phi(x)"))
    for i in range(n):
        k.v_mul_f32(dsts[i], xs[i], z[i], comment=_first(i, "gelu = x * Phi(x)"))


def tanh(k, dsts, xs, temps, masks, precise=False) -> None:
    """tanh with full relative accuracy near 0 (module docstring); 3 temporaries per value."""
    n = len(xs)
    ax = [t[0] for t in temps]
    small = [t[1] for t in temps]
    big = [t[2] for t in temps]
    for i in range(n):
        k.v_mul_f32(small[i], xs[i], xs[i], comment=_first(i, "x^2"))
    _horner(k, big, small, TANH_Q, "tanh polynomial Q(x^2)")
    for i in range(n):
        k.v_mul_f32(big[i], big[i], small[i], comment=_first(i, "x^2 Q(x^2)"))
    for i in range(n):
        k.v_fma_f32(small[i], big[i], xs[i], xs[i], comment=_first(i, "small |x|: x + x^3 Q(x^2)"))
    for i in range(n):
        k.v_and_b32(ax[i], 0x7FFFFFFF, xs[i], comment=_first(i, "|x|"))
    for i in range(n):
        k.v_mul_f32(big[i], 2.0 * LOG2E, ax[i], comment=_first(i, "2|x| log2(e)"))
    for i in range(n):
        k.v_exp_f32(big[i], big[i], comment=_first(i, "e^(2|x|)"))
    for i in range(n):
        k.v_cmp_gt_f32(masks[i], TANH_SMALL, ax[i], comment=_first(i, f"|x| < {TANH_SMALL}?"))
    for i in range(n):
        k.v_add_f32(big[i], 1.0, big[i], comment=_first(i, "e^(2|x|) + 1"))
    for i in range(n):
        k.v_rcp_f32(big[i], big[i])
    for i in range(n):
        k.v_xor_b32(ax[i], ax[i], xs[i], comment=_first(i, "the sign bit of x"))
    for i in range(n):
        k.v_fma_f32(big[i], -2.0, big[i], 1.0, comment=_first(i, "1 - 2/(e^(2|x|) + 1) = tanh|x|"))
    for i in range(n):
        k.v_or_b32(big[i], ax[i], big[i], comment=_first(i, "sign(x) tanh|x|"))
    for i in range(n):
        k.v_cndmask_b32(dsts[i], big[i], small[i], masks[i], comment=_first(i, "tanh(x)"))


def relu(k, dsts, xs, temps, masks, precise=False) -> None:
    n = len(xs)
    for i in range(n):
        k.v_cmp_gt_f32(masks[i], 0, xs[i], comment=_first(i, "x < 0? (false for NaN)"))
    for i in range(n):
        k.v_cndmask_b32(dsts[i], xs[i], 0, masks[i], comment=_first(i, "relu: 0 where x < 0; NaN and -0.0 kept"))


@dataclass(frozen=True)
class Activation:
    name: str
    emit: Callable          # (k, dsts, xs, temps: list[list[Reg]], masks: list, precise: bool)
    temps: int              # VGPR temporaries per value (fast form)
    precise_temps: int      # ... precise form
    masks: bool             # needs a mask (vcc or SGPR pair) per value
    torch: str              # the reference, a torch expression over 'x'
    doc: str


ACTIVATIONS = {
    "silu": Activation("silu", silu, 1, 3, False, "F.silu(x)", "x * sigmoid(x)"),
    "gelu": Activation("gelu", gelu_erf, 3, 5, True, "F.gelu(x)", "x * Phi(x) (exact, erf form)"),
    "gelu_tanh": Activation("gelu_tanh", gelu_tanh, 1, 3, False, "F.gelu(x, approximate='tanh')",
                            "x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))"),
    "relu": Activation("relu", relu, 0, 0, True, "F.relu(x)", "max(x, 0), NaN kept"),
    "tanh": Activation("tanh", tanh, 3, 3, True, "torch.tanh(x)", "tanh(x)"),
}


def div_f32(k, dst: Reg, num, den: Reg, t: list[Reg], smask: Reg, what: str = "") -> None:
    """``dst`` = ``num`` / ``den`` rounded once (IEEE division, correctly rounded whatever the 1-ulp error of
    ``v_rcp_f32``): the expansion LLVM emits for an fp32 ``fdiv`` with denormals kept (``v_div_scale_f32``
    scales numerator and denominator away from the range ends, one Newton step refines the reciprocal,
    two more the quotient, ``v_div_fmas_f32`` undoes the scaling, ``v_div_fixup_f32`` handles zeros,
    infinities and NaN).  ``num`` is a VGPR or an inline constant (1.0); ``den`` a VGPR; ``t`` four
    scratch VGPRs and ``smask`` a scratch SGPR pair (none of them ``dst``, ``num`` or ``den``).  Writes
    vcc.  Worth it once per row (a scale), not per element."""
    sd, sn, r, q = t
    name = f"{what}: " if what else ""
    k.v_div_scale_f32(sd, smask, den, den, num, comment=f"{name}denominator, scaled")
    k.v_rcp_f32(r, sd, comment=f"{name}r ~ 1/denominator")
    k.v_div_scale_f32(sn, VCC, num, den, num, comment=f"{name}numerator, scaled (vcc: rescale the quotient); "
                                                       "fills the reciprocal's wait state")
    k.v_fma_f32(dst, neg(sd), r, 1.0, comment="e = 1 - d r")
    k.v_fma_f32(r, dst, r, r, comment="r += e r")
    k.v_mul_f32(q, sn, r, comment="q = n r")
    k.v_fma_f32(dst, neg(sd), q, sn, comment="remainder n - d q")
    k.v_fma_f32(q, dst, r, q, comment="q += remainder r")
    k.v_fma_f32(dst, neg(sd), q, sn, comment="remainder n - d q")
    k.v_div_fmas_f32(dst, dst, r, q, comment="q + remainder r, rounded once, scaling undone")
    k.v_div_fixup_f32(dst, dst, den, num, comment=f"{name}zeros, infinities, NaN")
