"""The attention references themselves (``isagen.runtime.attention``), checked against torch:
``attention_reference`` (float64, explicit masks) against ``torch.nn.functional.scaled_dot_product_attention``
in float64 (O) and torch's CPU flash attention (its logsumexp), on MHA/GQA/MQA, causal with N_q < N_kv,
N_q = N_kv and N_q > N_kv (rows that see no key), both layouts and varlen batches; ``torch_attention``
against SDPA in bf16/fp16; and the tolerance (``attention_error_bounds`` / ``attention_tolerance_check``):
torch's own low-precision outputs pass, outputs with one error of the kind a wrong kernel makes fail.
Also ``isagen run``'s ``tolerance: {bound: ...}`` field, which the attention spec uses.  No kernel runs
here."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from isagen.builders.spec import parse_spec
from isagen.errors import SpecError
from isagen.runtime import run
from isagen.runtime.attention import (
    attention_error_bounds,
    attention_reference,
    attention_tolerance_check,
    causal_mask,
    torch_attention,
)

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
def test_reference_matches_torch_sdpa(b, hq, hkv, nq, nk, d, causal):
    q, k, v = _randn(b, hq, nq, d, seed=1), _randn(b, hkv, nk, d, seed=2), _randn(b, hkv, nk, d, seed=3)
    o, lse = attention_reference(q, k, v, causal)
    assert o.dtype == lse.dtype == torch.float64 and o.shape == q.shape and lse.shape == (b, hq, nq)
    torch.testing.assert_close(o, _sdpa(q, k, v, causal), rtol=1e-12, atol=1e-12)
    seen = causal_mask(nq, nk).any(-1) if causal else torch.ones(nq, dtype=torch.bool)
    assert torch.isneginf(lse[..., ~seen]).all() and (o[..., ~seen, :] == 0).all()
    torch.testing.assert_close(lse[..., seen], _torch_lse(q, k, v, causal)[..., seen], rtol=1e-12, atol=1e-12)


def test_reference_scale_and_bnhd_layout():
    q, k, v = _randn(2, 9, 4, 8, seed=4), _randn(2, 12, 2, 8, seed=5), _randn(2, 12, 2, 8, seed=6)   # (B, N, H, D)
    o, lse = attention_reference(q, k, v, True, 0.3, layout="bnhd")
    t = (lambda x: x.transpose(1, 2))
    assert o.shape == (2, 9, 4, 8) and lse.shape == (2, 4, 9)
    torch.testing.assert_close(o, t(_sdpa(t(q), t(k), t(v), True, 0.3)), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, _torch_lse(t(q), t(k), t(v), True, 0.3), rtol=1e-12, atol=1e-12)


def test_reference_varlen_is_per_sequence():
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
def test_torch_attention_is_sdpa_in_the_inputs_dtype(dtype):
    q, k, v = _randn(2, 4, 20, 64, dtype=dtype, seed=1), _randn(2, 2, 30, 64, dtype=dtype, seed=2), \
        _randn(2, 2, 30, 64, dtype=dtype, seed=3)
    o = torch_attention(q, k, v, True)
    assert o.dtype == dtype
    assert torch.equal(o, _sdpa(q, k, v, True))


# --------------------------------------------------------------------------- the tolerance
def _problem(dtype, causal=True, seed=0):
    q = _randn(2, 4, 33, 64, dtype=dtype, seed=seed)
    k, v = _randn(2, 2, 20, 64, dtype=dtype, seed=seed + 1), _randn(2, 2, 20, 64, dtype=dtype, seed=seed + 2)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_torch_own_outputs_pass_the_check(dtype):
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
