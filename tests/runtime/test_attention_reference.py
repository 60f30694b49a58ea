"""The attention references themselves (``isagen.runtime.attention``), checked against torch:
``attention_reference`` (float64, explicit masks) against ``torch.nn.functional.scaled_dot_product_attention``
in float64 (O) and torch's CPU flash attention (its logsumexp), on MHA/GQA/MQA, causal with N_q < N_kv,
N_q = N_kv and N_q > N_kv (rows that see no key), both layouts and varlen batches; ``torch_attention``
against SDPA in bf16/fp16; and the tolerance (``attention_error_bounds`` / ``attention_tolerance_check``):
torch's own low-precision outputs pass, outputs with one error of the kind a wrong kernel makes fail.
Also ``isagen run``'s ``tolerance: {bound: ...}`` field, which the attention spec uses.  No kernel runs
here.

The references evaluate a chunk of heads at a time (``by_score_chunks``: a full-size problem's float64
scores do not fit in memory): the ``score_chunking`` fixture (conftest.py) runs their tests both whole
and cut into one piece per (batch element, KV head); below, the cutting itself, and the backward
parts' reference (``attention_parts``) against the kernel's formula written out per (batch, head).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from isagen.builders.spec import parse_spec
from isagen.errors import SpecError
from isagen.runtime import attention, run
from isagen.runtime.attention import (
    attention_error_bounds,
    attention_reference,
    attention_tolerance_check,
    causal_mask,
    score_chunks,
    torch_attention,
)
from isagen.runtime.attention_parts import backward_part_reference

INF = math.inf


def _randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _sdpa(q, k, v, causal, scale=None):
    """torch's SDPA on (B, H, N, D) with GQA and the bottom-right causal mask spelled by hand."""
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2]) if causal \
        else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


def _torch_lse(q, k, v, causal, scale=None):
    """logsumexp from torch's CPU flash attention (a float mask: 0 where seen, -inf elsewhere)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = None
    if causal:
        seen = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
        mask = torch.zeros(seen.shape, dtype=q.dtype).masked_fill(~seen, -INF)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=scale)[1]


def test_causal_mask_is_bottom_right_aligned():
    # flash-attn's rule: query i sees key j iff j <= i + n_kv - n_q
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert causal_mask(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(3, 1).tolist() == [[False], [False], [True]]


@pytest.mark.parametrize("b, hq, hkv, nq, nk, d, causal", [
    (2, 4, 4, 17, 17, 16, False),          # MHA
    (2, 4, 4, 17, 17, 16, True),
    (1, 8, 2, 5, 33, 8, True),             # GQA, N_q < N_kv: the diagonal starts at key 28
    (2, 6, 1, 40, 9, 8, True),             # MQA, N_q > N_kv: the first 31 rows see no key
    (1, 2, 2, 1, 64, 32, True),            # one query: sees every key
    (1, 3, 1, 64, 1, 8, False),
])
def test_reference_matches_torch_sdpa(b, hq, hkv, nq, nk, d, causal, score_chunking):
    q, k, v = _randn(b, hq, nq, d, seed=1), _randn(b, hkv, nk, d, seed=2), _randn(b, hkv, nk, d, seed=3)
    o, lse = attention_reference(q, k, v, causal)
    assert o.dtype == lse.dtype == torch.float64 and o.shape == q.shape and lse.shape == (b, hq, nq)
    torch.testing.assert_close(o, _sdpa(q, k, v, causal), rtol=1e-12, atol=1e-12)
    seen = causal_mask(nq, nk).any(-1) if causal else torch.ones(nq, dtype=torch.bool)
    assert torch.isneginf(lse[..., ~seen]).all() and (o[..., ~seen, :] == 0).all()
    torch.testing.assert_close(lse[..., seen], _torch_lse(q, k, v, causal)[..., seen], rtol=1e-12, atol=1e-12)


def test_reference_scale_and_bnhd_layout(score_chunking):
    q, k, v = _randn(2, 9, 4, 8, seed=4), _randn(2, 12, 2, 8, seed=5), _randn(2, 12, 2, 8, seed=6)   # (B, N, H, D)
    o, lse = attention_reference(q, k, v, True, 0.3, layout="bnhd")
    t = (lambda x: x.transpose(1, 2))
    assert o.shape == (2, 9, 4, 8) and lse.shape == (2, 4, 9)
    torch.testing.assert_close(o, t(_sdpa(t(q), t(k), t(v), True, 0.3)), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, _torch_lse(t(q), t(k), t(v), True, 0.3), rtol=1e-12, atol=1e-12)


def test_reference_varlen_is_per_sequence(score_chunking):
    """THD packing: each sequence on its own (its own causal diagonal), an empty sequence and one of
    length 1 included; o (total_q, H, D), lse (H, total_q)."""
    lens_q, lens_k = [3, 0, 1, 6], [5, 2, 0, 4]
    cu_q = torch.tensor([0, 3, 3, 4, 10], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 7, 7, 11], dtype=torch.int32)
    q, k, v = _randn(10, 4, 8, seed=7), _randn(11, 2, 8, seed=8), _randn(11, 2, 8, seed=9)
    o, lse = attention_reference(q, k, v, True, None, cu_q, cu_k)
    assert o.shape == (10, 4, 8) and lse.shape == (4, 10)
    for b in range(4):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lens_q[b] == 0:
            continue
        qb, kb, vb = (x.transpose(0, 1)[None] for x in (q[qs], k[ks], v[ks]))
        want = _sdpa(qb, kb, vb, True)[0].transpose(0, 1)
        torch.testing.assert_close(o[qs], want, rtol=1e-12, atol=1e-12)
        if lens_k[b] == 0:                            # no key at all: o = 0, lse = -inf
            assert (o[qs] == 0).all() and torch.isneginf(lse[:, qs]).all()
    # sequence 3: 6 queries on 4 keys, causal: the first two rows see nothing
    assert torch.isneginf(lse[:, 4:6]).all() and torch.isfinite(lse[:, 6:]).all()


def test_reference_empty_problems():
    o, lse = attention_reference(_randn(0, 2, 5, 8), _randn(0, 2, 5, 8), _randn(0, 2, 5, 8))
    assert o.shape == (0, 2, 5, 8) and lse.shape == (0, 2, 5)
    o, lse = attention_reference(_randn(1, 2, 5, 8), _randn(1, 2, 0, 8), _randn(1, 2, 0, 8))
    assert (o == 0).all() and torch.isneginf(lse).all()
    cu = torch.zeros(1, dtype=torch.int32)
    o, lse = attention_reference(_randn(0, 2, 8), _randn(0, 2, 8), _randn(0, 2, 8), False, None, cu, cu)
    assert o.shape == (0, 2, 8) and lse.shape == (2, 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_torch_attention_is_sdpa_in_the_inputs_dtype(dtype, score_chunking):
    q, k, v = _randn(2, 4, 20, 64, dtype=dtype, seed=1), _randn(2, 2, 30, 64, dtype=dtype, seed=2), \
        _randn(2, 2, 30, 64, dtype=dtype, seed=3)
    o = torch_attention(q, k, v, True)
    assert o.dtype == dtype
    assert torch.equal(o, _sdpa(q, k, v, True))


# --------------------------------------------------------------------------- chunked evaluation
@pytest.mark.parametrize("b, h_kv, group, n_q, n_kv, budget", [
    (3, 2, 4, 5, 7, 10 ** 6),           # all at once
    (5, 2, 4, 5, 7, 2 * 280 + 100),     # two batch elements a piece (280 scores each)
    (3, 4, 2, 5, 7, 150),               # a batch element does not fit: two KV heads (140 scores) a piece
    (2, 3, 2, 5, 7, 140),               # 3 KV heads in pieces of 2 and 1
    (2, 3, 8, 16, 16, 1),               # not even one KV head fits: one a piece all the same
    (0, 2, 1, 5, 7, 1), (2, 2, 1, 0, 7, 1), (2, 2, 1, 5, 0, 1),       # empty: one (empty) piece
])
def test_score_chunks_cover_every_head_once_within_the_budget(b, h_kv, group, n_q, n_kv, budget, monkeypatch):
    monkeypatch.setattr(attention, "SCORE_CHUNK", budget)
    rows = score_chunks(b, h_kv, group, n_q, n_kv)
    seen = torch.zeros(b, h_kv, dtype=torch.int64)
    for row in rows:
        assert len({(bs.start, bs.stop) for bs, _ in row}) == 1            # a row: one batch slice
        for bs, ks in row:
            seen[bs, ks] += 1
            scores = (bs.stop - bs.start) * (ks.stop - ks.start) * group * n_q * n_kv
            assert scores <= budget or (bs.stop - bs.start, ks.stop - ks.start) == (1, 1)
            if b * h_kv * group * n_q * n_kv > budget >= h_kv * group * n_q * n_kv:
                assert (ks.start, ks.stop) == (0, h_kv)                   # whole batch elements
    assert (seen == 1).all()
    if b * h_kv * group * n_q * n_kv <= budget:
        assert rows == [[(slice(0, b), slice(0, h_kv))]]
    elif budget >= h_kv * group * n_q * n_kv:   # as few pieces as the budget allows
        assert len(rows) == -(-b // (budget // (h_kv * group * n_q * n_kv)))
    else:
        assert sum(map(len, rows)) == b * -(-h_kv // max(1, budget // (group * n_q * n_kv)))


def test_reference_by_batch_elements_matches_torch_sdpa(monkeypatch):
    """Pieces of two batch elements (5 of them: 2, 2, 1), GQA and causal, against SDPA on the whole."""
    q, k, v = _randn(5, 6, 9, 8, seed=1), _randn(5, 2, 12, 8, seed=2), _randn(5, 2, 12, 8, seed=3)
    monkeypatch.setattr(attention, "SCORE_CHUNK", 2 * 6 * 9 * 12)
    assert [r[0][0] for r in score_chunks(5, 2, 3, 9, 12)] == [slice(0, 2), slice(2, 4), slice(4, 5)]
    o, lse = attention_reference(q, k, v, True)
    torch.testing.assert_close(o, _sdpa(q, k, v, True), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, _torch_lse(q, k, v, True), rtol=1e-12, atol=1e-12)


def _part_by_hand(q, k, v, do, delta, lse2, causal, scale):
    """The backward kernels' formula (attention_parts' docstring) one (batch, query head) at a time on 2-D
    matrices: query head j reads KV head j // (H / H_kv); P and dS rounded to bf16 where they are
    multiplied; dK and dV summed over the query heads of each KV head."""
    q, k, v, do, delta, lse2 = (x.double() for x in (q, k, v, do, delta, lse2))
    b, h, n_q, _ = q.shape
    h_kv, n_kv = k.shape[1], k.shape[2]
    seen = causal_mask(n_q, n_kv) if causal else torch.ones(n_q, n_kv, dtype=torch.bool)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i in range(b):
        for j in range(h):
            kv = j // (h // h_kv)
            s = q[i, j] @ k[i, kv].T
            p = torch.where(seen, torch.exp2(s * (scale * math.log2(math.e)) - lse2[i, j][:, None]), 0.0)
            ds = p * (do[i, j] @ v[i, kv].T - delta[i, j][:, None])
            p16, ds16 = p.bfloat16().double(), ds.bfloat16().double()
            dq[i, j] = scale * ds16 @ k[i, kv]
            dk[i, kv] += scale * ds16.T @ q[i, j]
            dv[i, kv] += p16.T @ do[i, j]
    return dq, dk, dv


def _part_inputs(b, h, h_kv, n_q, n_kv, d, causal, seed=0):
    """bf16 Q, K, V, dO and the f32 DELTA, LSE2 of their forward (LSE2 = +inf for rows that see no key)."""
    q, do = (_randn(b, h, n_q, d, dtype=torch.bfloat16, seed=seed + i) for i in (0, 1))
    k, v = (_randn(b, h_kv, n_kv, d, dtype=torch.bfloat16, seed=seed + i) for i in (2, 3))
    q64, k64, v64 = q.double(), k.double(), v.double()
    o, lse = _sdpa(q64, k64, v64, causal), _torch_lse(q64, k64, v64, causal)
    if causal:                                 # rows that see no key: lse -inf (o is SDPA's 0 there)
        lse = lse.masked_fill(~causal_mask(n_q, n_kv).any(-1), -INF)
    delta = (do.double() * o).sum(-1).float()
    lse2 = torch.where(torch.isinf(lse), INF, lse * math.log2(math.e)).float()
    return q, k, v, do, delta, lse2


@pytest.mark.parametrize("b, h, h_kv, n_q, n_kv, d, causal", [
    (2, 4, 2, 33, 20, 16, True),           # GQA, N_q > N_kv: the first 13 rows see no key
    (1, 3, 1, 9, 30, 8, False),            # MQA
    (2, 2, 2, 17, 17, 8, True),            # MHA
])
def test_backward_parts_reference_is_the_formula(b, h, h_kv, n_q, n_kv, d, causal, score_chunking):
    q, k, v, do, delta, lse2 = _part_inputs(b, h, h_kv, n_q, n_kv, d, causal)
    scale = 1 / math.sqrt(d)
    want_dq, want_dk, want_dv = _part_by_hand(q, k, v, do, delta, lse2, causal, scale)
    dq = backward_part_reference(q, k, v, do, delta, lse2, causal, scale, "dq", "bf16")
    dk, dv = backward_part_reference(q, k, v, do, delta, lse2, causal, scale, "dkdv", "bf16")
    for got, want in ((dq, want_dq), (dk, want_dk), (dv, want_dv)):
        assert got.dtype == torch.float64 and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert dq.abs().max() > 0.1 and dk.abs().max() > 0.1 and dv.abs().max() > 0.1


def test_backward_parts_reference_varlen_is_per_sequence(score_chunking):
    """THD packing (Q (total_q, H, D), DELTA/LSE2 (H, total_q)), an empty key sequence included: each
    sequence's gradients are the formula's on that sequence alone, zero where it has no key."""
    lens_q, lens_k = [6, 3, 4], [4, 0, 9]
    cu_q, cu_k = (torch.tensor([0, *itertools.accumulate(n)], dtype=torch.int32) for n in (lens_q, lens_k))
    q, k, v, do, delta, lse2 = _part_inputs(1, 4, 2, 13, 13, 8, False)
    q, do, k, v = (x[0].transpose(0, 1) for x in (q, do, k, v))           # (total, H, D)
    delta, lse2 = delta[0], lse2[0]                                        # (H, total)
    dq = backward_part_reference(q, k, v, do, delta, lse2, True, 0.3, "dq", "bf16", cu_q, cu_k)
    dk, dv = backward_part_reference(q, k, v, do, delta, lse2, True, 0.3, "dkdv", "bf16", cu_q, cu_k)
    for s in range(3):
        sq, sk = slice(int(cu_q[s]), int(cu_q[s + 1])), slice(int(cu_k[s]), int(cu_k[s + 1]))
        if lens_k[s] == 0:
            assert (dq[sq] == 0).all()
            continue
        one = [x[sl].transpose(0, 1)[None] for x, sl in ((q, sq), (k, sk), (v, sk), (do, sq))]
        want = _part_by_hand(*one, delta[None, :, sq], lse2[None, :, sq], True, 0.3)
        for got, w in zip((dq[sq], dk[sk], dv[sk]), want):
            torch.testing.assert_close(got, w[0].transpose(0, 1), rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- the tolerance
def _problem(dtype, causal=True, seed=0):
    q = _randn(2, 4, 33, 64, dtype=dtype, seed=seed)
    k, v = _randn(2, 2, 20, 64, dtype=dtype, seed=seed + 1), _randn(2, 2, 20, 64, dtype=dtype, seed=seed + 2)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_torch_own_outputs_pass_the_check(dtype, score_chunking):
    """torch's own low-precision O (within 1x its error, so within 2x) and the float64 lse rounded to
    float32 pass; the bound is 2 x that error + 1e-5, and fully masked rows are -inf in both."""
    q, k, v = _problem(dtype)
    ref_o, ref_lse = attention_reference(q, k, v, True)
    o = torch_attention(q, k, v, True)
    torch_err = float((o.double() - ref_o).abs().max())
    assert 0 < torch_err < 0.05
    o_bound, lse_bound = attention_error_bounds(q, k, v, True)
    assert float(o_bound) == pytest.approx(2 * torch_err + 1e-5)
    seen = torch.isfinite(ref_lse)
    assert torch.equal(lse_bound[seen], 1e-3 * ref_lse[seen].abs().clamp_min(1))
    errors = attention_tolerance_check(o, ref_lse.float(), q, k, v, True)
    assert errors["o_err"] == torch_err and errors["lse_err"] < 1e-6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_check_fails_what_a_wrong_kernel_gives(dtype):
    q, k, v = _problem(dtype)
    ref_o, ref_lse = attention_reference(q, k, v, True)
    o, lse = torch_attention(q, k, v, True), ref_lse.float()
    o_bound, _ = attention_error_bounds(q, k, v, True)

    def fails(o_, lse_, words):
        with pytest.raises(AssertionError, match=words):
            attention_tolerance_check(o_, lse_, q, k, v, True)

    # one element of O off by 1.5 bounds (its rounding to the dtype moves it by well under half a bound)
    bad = o.clone()
    bad[1, 2, 30, 7] = (ref_o[1, 2, 30, 7] + 1.5 * o_bound).to(dtype)
    fails(bad, lse, r"o\[1, 2, 30, 7\] = .* > bound")
    # the causal diagonal aligned top-left (flash-attn < 2.1), the KV head of a query head taken modulo
    mask_tl = torch.ones(33, 20, dtype=torch.bool).tril()
    top_left = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_tl, enable_gqa=True)
    fails(top_left, lse, r"o\[.*\] = .* > bound")
    modulo = F.scaled_dot_product_attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1),
                                            attn_mask=causal_mask(33, 20))
    fails(modulo, lse, r"o\[.*\] = .* > bound")
    # a NaN, a fully masked row's o not 0, lse off by 0.2%, lse finite where it must be -inf, a wrong shape
    nan = o.clone()
    nan[0, 0, 32, 0] = math.nan
    fails(nan, lse, r"o\[0, 0, 32, 0\] = nan")
    row = o.clone()
    row[0, 0, 0] = v[0, 0].mean(0).to(dtype)          # row 0 sees no key (33 queries, 20 keys)
    fails(row, lse, r"o\[0, 0, 0, \d+\]")
    fails(o, lse * 1.002, r"lse\[.*\] = .* > bound")
    finite = lse.clone()
    finite[1, 3, 5] = 0.0
    fails(o, finite, r"lse\[1, 3, 5\] = 0, reference -inf")
    fails(o[:, :, :-1], lse, "shapes")
    fails(o.float(), lse, "dtypes")


# --------------------------------------------------------------------------- isagen run's tolerance.bound
ATTN_LIKE = "kernel: gemm_bf16\nname: g\ntargets: [gfx942]\nreference: A @ B.T\n"


def test_spec_bound_field_parses_and_names_its_errors():
    spec = parse_spec(ATTN_LIKE + "tolerance: {bound: ' 2 * abs(A).max() '}\n", "g.yaml")
    assert spec.tolerance == {"bound": "2 * abs(A).max()"}
    for text, message in [
        ("tolerance: {bound: 3}", r"g.yaml:5: tolerance.bound: expected a torch expression .* got the number 3"),
        ("tolerance: {bound: 'A @'}", r"tolerance.bound: not a valid expression"),
        ("tolerance: {bound: '1e-3', rtol: 0.1}", r"tolerance.bound: replaces rtol, atol, reduction, "
                                                   r"accumulate and magnitude; give it alone \(not with rtol\)"),
    ]:
        with pytest.raises(SpecError, match=message):
            parse_spec(ATTN_LIKE + text + "\n", "g.yaml")


class _Kernel:
    """What ``run``'s reference evaluation reads of a kernel: two outputs, O and LSE, and a parameter."""

    def __init__(self, reference):
        from isagen.builders.contract import LaunchInfo, TensorParam
        self.name = self.spec_path = "attention_like"
        self.target = "gfx942"
        self.reference = reference
        self.params = {"causal": True, "dtype": "bf16"}
        self.launch = LaunchInfo(tensors=(TensorParam("Q", "bf16", ("b", "h", "n_q", 64)),
                                          TensorParam("K", "bf16", ("b", "h_kv", "n_kv", 64)),
                                          TensorParam("V", "bf16", ("b", "h_kv", "n_kv", 64)),
                                          TensorParam("O", "bf16", ("b", "h", "n_q", 64), "out"),
                                          TensorParam("LSE", "f32", ("b", "h", "n_q"), "out")))


def test_run_reaches_the_attention_reference_and_its_bound():
    """The spec's expressions as the attention spec writes them: ``isagen.runtime.attention`` resolves in
    the scope, the kernel's parameters (``causal``) are names there, the reference sees float64 inputs and
    the bound the inputs' own dtype; an output within the bound passes, one beyond it fails."""
    q, k, v = _problem(torch.bfloat16, seed=3)
    inputs = {"Q": q, "K": k, "V": v, "O": torch.empty(2, 4, 33, 64, dtype=torch.bfloat16),
              "LSE": torch.empty(2, 4, 33)}
    kernel = _Kernel("isagen.runtime.attention.attention_reference(Q, K, V, causal, softmax_scale)")
    sizes = {"b": 2, "h": 4, "h_kv": 2, "n_q": 33, "n_kv": 20}
    scalars = {"softmax_scale": 0.125}
    want = run.reference(kernel, inputs, scalars, sizes)
    ref_o, ref_lse = attention_reference(q, k, v, True, 0.125)
    assert torch.equal(want["O"], ref_o) and torch.equal(want["LSE"], ref_lse)
    bound_expr = "isagen.runtime.attention.attention_error_bounds(Q, K, V, causal, softmax_scale)"
    bounds = run.error_bounds(kernel, bound_expr, inputs, scalars, sizes)
    o_bound, lse_bound = attention_error_bounds(q, k, v, True, 0.125)
    assert torch.equal(bounds["O"], o_bound.expand(2, 4, 33, 64)) and torch.equal(bounds["LSE"], lse_bound)
    tolerance = {"bound": bound_expr}
    assert run.output_tolerance(kernel, tolerance) == tolerance          # no reduction model added
    o = torch_attention(q, k, v, True, 0.125)
    ok = run.compare("O", o, want["O"], "bf16", tolerance, bound=bounds["O"])
    assert ok.ok and ok.bound == bound_expr and f"(bound: {bound_expr})" in run.format_report(
        run.RunReport(kernel, "emu", sizes, (1, 1, 1), (256, 1, 1), [ok]))[1]
    lse_ok = run.compare("LSE", ref_lse.float(), want["LSE"], "f32", tolerance, bound=bounds["LSE"])
    assert lse_ok.ok                                          # -inf rows match -inf exactly
    wrong = o.clone()
    wrong[0, 0, 20:] = 0                                      # rows that see keys, left unwritten
    assert run.compare("O", wrong, want["O"], "bf16", tolerance, bound=bounds["O"]).mismatches > 0
    with pytest.raises(SpecError, match=r"tolerance.bound 'isagen.runtime.attention.nope\(Q\)' failed: "
                                        r"AttributeError"):
        run.error_bounds(kernel, "isagen.runtime.attention.nope(Q)", inputs, scalars, sizes)
