"""The attention backward kernels one at a time in the emulator (sanitizer on), through the spec's launch
contract: dK and dV (part dkdv) and dQ (part dq) against their float64 formula
(``runtime/attention_parts.py``) on DELTA and LSE2 of a real forward (float64 torch), for both targets,
GQA and MQA, causal (N_q < N_kv and N_q > N_kv: rows that see no key, LSE2 = +inf) and ragged lengths.
The whole backward against torch autograd is tests/runtime/test_attention_backward_api.py's."""

import math

import pytest
import torch

import isagen
from isagen.runtime.attention_parts import backward_part_reference

CASES = [  # (target, b, h, h_kv, n_q, n_kv, d, causal)
    ("gfx950", 1, 2, 1, 70, 100, 128, False),
    ("gfx942", 1, 2, 1, 70, 100, 128, False),
    ("gfx950", 2, 4, 2, 100, 64, 64, True),
    ("gfx942", 1, 3, 1, 40, 90, 64, True),
]


def _inputs(b, h, h_kv, n_q, n_kv, d, causal, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, do = (torch.randn(b, h, n_q, d, generator=g).bfloat16() for _ in range(2))
    k, v = (torch.randn(b, h_kv, n_kv, d, generator=g).bfloat16() for _ in range(2))
    scale = 1 / math.sqrt(d)
    s = (q.double() @ k.double().repeat_interleave(h // h_kv, 1).transpose(-1, -2)) * scale
    if causal:
        i, j = torch.arange(n_q)[:, None], torch.arange(n_kv)[None, :]
        s = s.masked_fill(j > i + n_kv - n_q, -math.inf)
    lse = torch.logsumexp(s, -1)
    o = torch.nan_to_num(torch.exp(s - lse[..., None])) @ v.double().repeat_interleave(h // h_kv, 1)
    delta = (do.double() * o.bfloat16().double()).sum(-1).float()
    lse2 = torch.where(torch.isinf(lse), math.inf, lse * math.log2(math.e)).float()
    return q, k, v, do, delta, lse2, scale


@pytest.mark.parametrize("target,b,h,h_kv,n_q,n_kv,d,causal", CASES,
                         ids=[f"{c[0]}-{c[2]}x{c[3]}-{c[4]}x{c[5]}-d{c[6]}{'-causal' if c[7] else ''}" for c in CASES])
def test_backward_parts_match_their_formula(target, b, h, h_kv, n_q, n_kv, d, causal):
    q, k, v, do, delta, lse2, scale = _inputs(b, h, h_kv, n_q, n_kv, d, causal)
    for part in ("dkdv", "dq"):
        kern = isagen.build("attention_bwd_bf16", target, head_dim=d, causal=causal, part=part)
        outs = [torch.full_like(q, math.nan)] if part == "dq" else [torch.full_like(k, math.nan),
                                                                    torch.full_like(v, math.nan)]
        kern.run(q, k, v, do, delta, lse2, *outs, softmax_scale=scale, backend="emu")
        want = backward_part_reference(q, k, v, do, delta, lse2, causal, scale, part, "bf16")
        want = (want,) if part == "dq" else want
        for got, ref in zip(outs, want):
            assert torch.isfinite(got).all(), f"{part}: a row was left unwritten or NaN"
            err = (got.double() - ref).abs()
            # fp32 sums of products of bf16 operands, one bf16 rounding of the result
            bound = 2 ** -8 * ref.abs() + 2 ** -7 * ref.abs().amax() / 8 + 1e-6
            assert (err <= bound).all(), (part, float(err.max()), float(ref.abs().max()))


ATOMIC_CASES = [c for c in CASES if not (c[0] == "gfx942" and c[6] == 128)]     # LDS: gfx942 fits D=64 only


@pytest.mark.parametrize("target,b,h,h_kv,n_q,n_kv,d,causal", ATOMIC_CASES,
                         ids=[f"{c[0]}-{c[2]}x{c[3]}-{c[4]}x{c[5]}-d{c[6]}{'-causal' if c[7] else ''}"
                              for c in ATOMIC_CASES])
def test_atomic_dq_matches_the_dq_formula(target, b, h, h_kv, n_q, n_kv, d, causal):
    """dq_atomic: the dkdv kernel adds scale dS·K into a zeroed fp32 buffer with buffer_atomic_add_f32,
    every (key block, query tile, head) once; dK and dV are unchanged."""
    q, k, v, do, delta, lse2, scale = _inputs(b, h, h_kv, n_q, n_kv, d, causal, seed=3)
    kern = isagen.build("attention_bwd_bf16", target, head_dim=d, causal=causal, part="dkdv", dq_atomic=True)
    dk, dv, dq_acc = torch.full_like(k, math.nan), torch.full_like(v, math.nan), torch.zeros(q.shape)
    kern.run(q, k, v, do, delta, lse2, dk, dv, dq_acc, softmax_scale=scale, backend="emu")
    want_dq = backward_part_reference(q, k, v, do, delta, lse2, causal, scale, "dq", "bf16")
    # fp32 sums of bf16 products, no output rounding: far inside one bf16 ulp
    assert ((dq_acc.double() - want_dq).abs() <= 1e-5 * want_dq.abs().amax() + 1e-6).all()
    want_dk, want_dv = backward_part_reference(q, k, v, do, delta, lse2, causal, scale, "dkdv", "bf16")
    for got, ref in ((dk, want_dk), (dv, want_dv)):
        assert ((got.double() - ref).abs() <= 2 ** -8 * ref.abs() + 2 ** -7 * ref.abs().amax() / 8 + 1e-6).all()


def test_atomic_dq_is_refused_where_lds_is_short():
    from isagen.errors import SpecError
    with pytest.raises(SpecError, match="dq_atomic.*65536"):
        isagen.build("attention_bwd_bf16", "gfx942", part="dkdv", dq_atomic=True, head_dim=128)
    with pytest.raises(SpecError, match="dq_atomic: only part dkdv"):
        isagen.build("attention_bwd_bf16", "gfx950", part="dq", dq_atomic=True)
