"""``isagen.runtime.attention.attention_backward``, autograd through ``isagen.attention`` and
``torch.ops.isagen.attention_backward`` (issue 15), and the prep kernel ``attention_bwd_prep``.

Without the main backward kernels:
* every user mistake is one ``LaunchError`` line starting ``attention_backward:`` that names the argument;
* ``attention_backward_reference`` (float64, from the formulas) agrees with torch's autograd through
  ``scaled_dot_product_attention`` in float64 (GQA, causal with keyless rows, varlen, both layouts);
* the tolerance helper passes torch's own bf16/fp16 gradients and fails planted errors;
* empty problems launch nothing; the torch op's fake gives the gradients' shapes (FakeTensorMode, meta,
  ``torch.export``);
* the prep kernel in the emulator against ``attention_bwd_prep_reference`` (both targets, bf16/f16, D 64
  and 128, ragged N, -inf LSE rows, varlen with empty sequences, strided tensors);
* the front end's arguments to the main kernels, checked by a model of their interface
  (``BackwardModel``: written from the interface's description, computing in float64 from the raw 1-D
  buffers, argument values and grid it is handed, with DELTA and LSE2 from the real prep kernel): its
  gradients pass ``attention_backward_tolerance_check`` for strided, packed, expanded and varlen inputs,
  through autograd, the torch op and torch.compile.

With the main kernels (``attention_bwd`` part dkdv / dq, emulator): small shapes of every parameter
against the float64 reference with flash-attn's tolerance, ``o.backward(do)``, bit-identical reruns;
bigger combinations are marked slow.  These fail until ``kernels/attention_bwd.py`` lands.
"""

from __future__ import annotations

import itertools
import math
import struct

import pytest
import torch
from attention_support import BF16, F16, attention_env  # noqa: F401 -- attention_env: autouse fixture
from attention_support import case_id as _case_id
from attention_support import cu as _cu
from attention_support import kernel_inputs as _kernel_inputs
from attention_support import qkv as _qkv
from attention_support import randn as _randn
from torch._subclasses.fake_tensor import FakeTensorMode

import isagen
from isagen.api import Kernel
from isagen.builders.contract import LaunchInfo, ScalarParam, TensorParam
from isagen.builders.kernarg import KernArgs
from isagen.errors import IsagenError, LaunchError, TargetError
from isagen.runtime import attention as attn
from isagen.runtime import backends, torch_ops
from isagen.runtime.attention import (
    attention,
    attention_backward,
    attention_backward_error_bounds,
    attention_backward_reference,
    attention_backward_tolerance_check,
    attention_bwd_prep_reference,
    torch_attention_backward,
)

F = torch.nn.functional


def _forward(q, k, v, causal=False, scale=None, cu_q=None, cu_k=None, layout="bhnd"):
    """(o, lse) as the forward kernel returns them, from the float64 reference (o rounded to q's dtype,
    lse to float32): the backward's inputs without running the forward kernel."""
    o, lse = attn.attention_reference(q, k, v, causal, scale, cu_q, cu_k, layout)
    return o.to(q.dtype), lse.float()


# --------------------------------------------------------------------------- user mistakes
Q, K = _qkv(1, 4, 2, 8, 8, 64)[:2]
O, LSE = _forward(Q, K, K)
CU = _cu(3, 5)
VQ, VK = _randn(8, 4, 64), _randn(8, 2, 64)
VO, VLSE = _forward(VQ, VK, VK, False, None, CU, CU)


def _args(**over):
    args = dict(do=O, q=Q, k=K, v=K, o=O, lse=LSE)
    args.update(over)
    return args


MISTAKES = [
    (_args(lse=None), "lse is None; pass the lse that isagen.attention returned with o"),
    (_args(o=None), "o is None; pass attention's output"),
    (_args(do=None), "do is None; pass the gradient of attention's output"),
    (_args(do=O[:, :, :5]), "do has shape (1, 4, 5, 64) but o has (1, 4, 8, 64); do is the gradient of attention's "
                            "output, shaped like o"),
    (_args(o=O[:, :2], do=O[:, :2]), "o has shape (1, 2, 8, 64) but q has (1, 4, 8, 64); o is attention's output"),
    (_args(do=O.half()), "do has dtype torch.float16 but o has torch.bfloat16"),
    (_args(o=O.half(), do=O.half()), "o has dtype torch.float16 but q has torch.bfloat16"),
    (_args(do=O.to("meta")), "do is on meta but o is on cpu"),
    (_args(do=O.tolist()), "do must be a torch.Tensor, got list"),
    (_args(do=O[0]), "do has shape (4, 8, 64); layout 'bhnd' takes 4 dimensions (B, H, N, D)"),
    (_args(lse=LSE.double()), "lse has dtype torch.float64; it must be torch.float32 (attention's lse)"),
    (_args(lse=LSE[:, :, :4]), "lse has shape (1, 4, 4); attention's lse for these inputs is (1, 4, 8) (B, H_q, N_q)"),
    (_args(lse=LSE.to("meta")), "lse is on meta but q is on cpu"),
    (_args(lse=LSE.tolist()), "lse must be a torch.Tensor, got list"),
    # everything the forward checks, reported as the backward's
    (_args(q=Q.float(), k=K.float(), v=K.float()), "q has dtype torch.float32; the kernel takes"),
    (_args(k=K.half()), "k has dtype torch.float16 but q has torch.bfloat16"),
    (_args(q=_randn(1, 3, 8, 64)), "q has 3 heads, not a multiple of k's 2"),
    (_args(layout="bshd"), "layout 'bshd' is not one of"),
    (_args(causal=1), "causal must be True or False, got int 1"),
    (_args(softmax_scale=-1.0), "softmax_scale=-1.0: expected a finite number > 0"),
    (_args(target="gfx1100"), "unsupported target"),
    (_args(backend="cuda"), "unknown backend backend='cuda' (choose hip or emu)"),
    (dict(do=VO, q=VQ, k=VK, v=VK, o=VO, lse=VLSE, cu_seqlens_q=CU), "cu_seqlens_q is given but cu_seqlens_k is not"),
    (dict(do=VO, q=VQ, k=VK, v=VK, o=VO, lse=VLSE.T, cu_seqlens_q=CU, cu_seqlens_k=CU),
     "lse has shape (8, 4); attention's lse for these inputs is (4, 8) (H_q, total_q)"),
    (dict(do=VO, q=VQ, k=VK, v=VK, o=VO, lse=VLSE, cu_seqlens_q=CU, cu_seqlens_k=_cu(3, 4)),
     "cu_seqlens_k[-1] is 7 but k has 8 tokens"),
]


@pytest.mark.parametrize("args, words", MISTAKES, ids=[w[:40] for _, w in MISTAKES])
def test_mistakes_are_one_line_naming_the_argument(args, words, monkeypatch):
    monkeypatch.setattr(attn, "backward_kernel", _no_kernel)
    monkeypatch.setattr(attn, "prep_kernel", _no_kernel)
    with pytest.raises(IsagenError) as e:
        attention_backward(**args)
    assert isinstance(e.value, (LaunchError, TargetError))
    text = str(e.value)
    assert "\n" not in text and text.startswith("attention_backward: ") and words in text, text


def test_fake_tensors_are_checked_too():
    with FakeTensorMode():
        q = torch.empty(2, 4, 8, 64, dtype=BF16)
        lse = torch.empty(2, 4, 8)
        with pytest.raises(LaunchError, match="attention_backward: lse has shape"):
            torch.ops.isagen.attention_backward(q, q, q, q, q, lse[:, :, :3])
        with pytest.raises(LaunchError, match="attention_backward: do has dtype torch.float16 but o has"):
            torch.ops.isagen.attention_backward(q.half(), q, q, q, q, lse)


def _no_kernel(*args, **kw):
    raise AssertionError("this call must not build (or launch) a kernel")


# --------------------------------------------------------------------------- the float64 reference
def _torch_grads64(do, q, k, v, causal, scale, cu_q, cu_k, layout):
    """torch autograd through SDPA in float64 (bhnd per sequence, K/V heads repeated)."""
    return torch_attention_backward(do.double(), q.double(), k.double(), v.double(), causal, scale, cu_q, cu_k,
                                    layout)


@pytest.mark.parametrize("dims, causal, layout, scale", [
    ((2, 4, 4, 17, 17, 64), False, "bhnd", None),
    ((1, 8, 2, 40, 23, 128), True, "bhnd", 0.3),        # GQA, N_q > N_kv: keyless rows
    ((2, 3, 1, 9, 30, 64), True, "bnhd", None),         # MQA, N_q < N_kv
    ((1, 2, 2, 1, 1, 64), True, "bnhd", None),
])
def test_reference_is_torch_autograd_in_float64(dims, causal, layout, scale, score_chunking):
    b, hq, hkv, nq, nk, d = dims
    q, k, v = (x.double() for x in _qkv(*dims))
    do = _randn(b, hq, nq, d, seed=9).double()
    if layout == "bnhd":
        q, k, v, do = (x.transpose(1, 2) for x in (q, k, v, do))
    ref = attention_backward_reference(do, q, k, v, causal, scale, layout=layout)
    # independently: autograd through SDPA with the mask and the K/V heads repeated by hand
    x = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    qq, kk, vv, dd = (t if layout == "bhnd" else t.transpose(1, 2) for t in (*x, do))
    mask = torch.arange(nk)[None] <= torch.arange(nq)[:, None] + nk - nq if causal else None
    out = F.scaled_dot_product_attention(qq, kk.repeat_interleave(hq // hkv, 1), vv.repeat_interleave(hq // hkv, 1),
                                         attn_mask=mask, scale=scale)
    out.backward(dd)
    for mine, theirs in zip(ref, x):
        assert mine.shape == theirs.shape and mine.dtype == torch.float64
        torch.testing.assert_close(mine, theirs.grad, rtol=1e-10, atol=1e-10)
    if causal and nq > nk:                      # rows that see no key: no gradient
        assert (ref[0][:, :, :nq - nk] == 0).all()


def test_reference_varlen_is_per_sequence(score_chunking):
    """THD batches (an empty query sequence, an empty key sequence): each sequence's gradients are the
    dense reference's of that sequence alone; empty ones are zero."""
    lens_q, lens_k = [5, 0, 3, 9], [7, 3, 0, 4]
    q, k, v = _randn(17, 4, 64, seed=1), _randn(14, 2, 64, seed=2), _randn(14, 2, 64, seed=3)
    do = _randn(17, 4, 64, seed=4)
    cu_q, cu_k = _cu(*lens_q), _cu(*lens_k)
    dq, dk, dv = attention_backward_reference(do, q, k, v, True, None, cu_q, cu_k)
    assert (dq.shape, dk.shape, dv.shape) == ((17, 4, 64), (14, 2, 64), (14, 2, 64))
    for b in range(4):
        sq, sk = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lens_q[b] == 0 or lens_k[b] == 0:
            assert (dq[sq] == 0).all() and (dk[sk] == 0).all() and (dv[sk] == 0).all()
            continue
        one = [x[s][None] for x, s in ((do, sq), (q, sq), (k, sk), (v, sk))]
        want = _torch_grads64(*one, True, None, None, None, "bnhd")
        for got, w in zip((dq[sq], dk[sk], dv[sk]), want):
            torch.testing.assert_close(got, w[0], rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- the tolerance rule
@pytest.mark.parametrize("dtype", [BF16, F16])
def test_tolerance_passes_torch_and_fails_planted_errors(dtype):
    q, k, v = _qkv(1, 4, 2, 40, 33, 64, dtype=dtype, seed=3)
    do = _randn(1, 4, 40, 64, dtype=dtype, seed=7)
    grads = torch_attention_backward(do, q, k, v, True)
    found = attention_backward_tolerance_check(*grads, do, q, k, v, True)
    bounds = attention_backward_error_bounds(do, q, k, v, True)
    for name, bound in zip(("dq", "dk", "dv"), bounds):
        assert found[f"{name}_err"] <= found[f"{name}_bound"] == pytest.approx(float(bound))
        assert float(bound) < 0.1                     # a bound that says something
    ref = attention_backward_reference(do, q, k, v, True)
    # planted: one element off by 3 bounds; one query row's contribution to dk lost; dv of another head
    for i, bad in enumerate(_planted(grads, ref, bounds)):
        with pytest.raises(AssertionError, match=["dq", "dk", "dv", "dv", "dq"][i]):
            attention_backward_tolerance_check(*bad, do, q, k, v, True)


def _planted(grads, ref, bounds):
    dq, dk, dv = grads
    one = dq.clone()
    one[0, 1, 5, 7] = (ref[0][0, 1, 5, 7] + 3 * bounds[0]).to(dq.dtype)
    yield one, dk, dv
    yield dq, dk.roll(1, dims=2), dv                  # the keys shifted by one
    yield dq, dk, dv.flip(1)                          # the KV heads swapped
    nan = dv.clone()
    nan[0, 0, 0, 0] = math.nan
    yield dq, dk, nan
    yield dq.transpose(1, 2), dk, dv                  # wrong layout


# --------------------------------------------------------------------------- empty problems, fake shapes
def test_empty_problems_launch_nothing(monkeypatch):
    """No query: dk = dv = 0; no key: dq = 0; no batch or head: empty.  Nothing is built."""
    monkeypatch.setattr(attn, "backward_kernel", _no_kernel)
    monkeypatch.setattr(attn, "prep_kernel", _no_kernel)
    for (b, hq, hkv, nq, nk) in [(2, 4, 2, 0, 5), (2, 4, 2, 5, 0), (0, 4, 2, 5, 5), (2, 0, 0, 5, 5)]:
        q, k, v = _qkv(b, hq, hkv, nq, nk, 64, dtype=F16)
        o, lse = _forward(q, k, v, True)
        dq, dk, dv = attention_backward(o, q, k, v, o, lse, True)
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape) and dq.dtype == F16
        assert (dq == 0).all() and (dk == 0).all() and (dv == 0).all()
        ref = attention_backward_reference(o, q, k, v, True)
        assert all(torch.equal(a.double(), r) for a, r in zip((dq, dk, dv), ref))
    vq, vk = _randn(7, 4, 64), _randn(0, 2, 64)
    cu_q, cu_k = _cu(3, 0, 4), _cu(0, 0, 0)
    o, lse = _forward(vq, vk, vk, True, None, cu_q, cu_k)
    dq, dk, dv = attention_backward(o, vq, vk, vk, o, lse, True, None, cu_q, cu_k)
    assert dq.shape == (7, 4, 64) and (dq == 0).all() and dk.shape == (0, 2, 64)


@pytest.mark.parametrize("layout", ["bhnd", "bnhd", "thd"])
def test_fake_shapes(layout):
    def shapes(*args):
        return [(tuple(g.shape), g.dtype, g.device.type, g.is_contiguous())
                for g in torch.ops.isagen.attention_backward(*args)]

    with FakeTensorMode():
        if layout == "thd":
            q, k = torch.empty(30, 8, 128, dtype=BF16), torch.empty(50, 2, 128, dtype=BF16)
            cu = torch.empty(4, dtype=torch.int32)
            lse = torch.empty(8, 30)
            extra = (False, 0.5, cu, cu)
        else:
            q, k = torch.empty(2, 4, 8, 64, dtype=F16), torch.empty(2, 2, 3, 64, dtype=F16)
            lse = torch.empty(2, 4, 8)
            if layout == "bnhd":
                q, k = q.transpose(1, 2), k.transpose(1, 2)
            extra = (True, None, None, None)
        got = shapes(q, q, k, k, q, lse, *extra, "bhnd" if layout == "thd" else layout)
        assert got == [(tuple(q.shape), q.dtype, "cpu", True)] + [(tuple(k.shape), k.dtype, "cpu", True)] * 2
    m = torch.empty(3, 2, 17, 64, dtype=BF16, device="meta")
    got = shapes(m, m, m, m, m, torch.empty(3, 2, 17, device="meta"))
    assert got == [((3, 2, 17, 64), BF16, "meta", True)] * 3


def test_schema_and_export_trace_without_running():
    """The op's schema; torch.export traces forward and backward ops into one graph without running them."""
    assert str(torch.ops.isagen.attention_backward.default._schema) == (
        'isagen::attention_backward(Tensor do, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, bool causal=False, '
        'float? softmax_scale=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, str layout="bhnd") -> '
        '(Tensor, Tensor, Tensor)')
    assert torch_ops.registered_ops()["attention_backward"] == torch_ops.ATTENTION_BACKWARD_SCHEMA
    assert torch_ops.register_attention_backward_op() == "isagen::attention_backward"        # again: a no-op

    class Step(torch.nn.Module):
        def forward(self, q, k, v, do):
            o, lse = torch.ops.isagen.attention(q, k, v, True)
            dq, dk, dv = torch.ops.isagen.attention_backward(do, q, k, v, o, lse, True)
            return dq.sum() + dk.sum() + dv.sum()

    q, k, v = _qkv(1, 4, 2, 9, 9, 64)
    program = torch.export.export(Step(), (q, k, v, q))
    calls = [str(n.target) for n in program.graph.nodes if n.op == "call_function" and "isagen" in str(n.target)]
    assert calls == ["isagen.attention.default", "isagen.attention_backward.default"]


# --------------------------------------------------------------------------- the prep kernel, in the emulator
PREP_CASES = [
    # target, dtype, head dim, (B, H, N)
    ("gfx942", BF16, 128, (2, 3, 100)),
    ("gfx950", BF16, 64, (1, 2, 65)),
    ("gfx942", F16, 64, (1, 1, 1)),
    ("gfx950", F16, 128, (2, 1, 130)),
]


@pytest.mark.parametrize("target, dtype, d, dims", PREP_CASES, ids=lambda x: str(x).replace("torch.", ""))
def test_prep_kernel_contract(target, dtype, d, dims):
    """The spec's contract (contiguous (B, H, N, D)), rows of -inf LSE (+inf LSE2) and of +-large LSE, a
    ragged last block."""
    b, h, n = dims
    o, do = _randn(b, h, n, d, dtype=dtype, seed=1), _randn(b, h, n, d, dtype=dtype, seed=2) * 3
    lse = _randn(b, h, n, dtype=torch.float32, seed=3) * 50
    lse[..., ::7] = -math.inf
    kernel = isagen.build("attention_bwd_prep_bf16", target, dtype={BF16: "bf16", F16: "f16"}[dtype], head_dim=d)
    delta, lse2 = torch.full((b, h, n), math.nan), torch.full((b, h, n), math.nan)
    kernel.run(O=o, dO=do, LSE=lse, DELTA=delta, LSE2=lse2, backend="emu")
    want_delta, want_lse2 = attention_bwd_prep_reference(o, do, lse)
    bound_delta, bound_lse2 = attn.attention_bwd_prep_error_bounds(o, do, lse)
    assert ((delta.double() - want_delta).abs() <= bound_delta).all()
    assert torch.equal(torch.isposinf(lse2), torch.isneginf(lse)) and torch.isposinf(lse2[..., ::7]).all()
    fin = torch.isfinite(want_lse2)
    assert ((lse2.double() - want_lse2)[fin].abs() <= bound_lse2[fin]).all()
    # the rounding of fp32: LSE2 is exactly fl(LSE * fl(log2 e))
    assert torch.equal(lse2[fin], (lse * torch.tensor(1 / math.log(2), dtype=torch.float32))[fin])


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_prep_kernel_varlen_contract(target):
    """The varlen contract (O (total_q, H, D), LSE (H, total_q)): empty sequences, a one-token one and one
    of two row blocks; rows of -inf LSE."""
    lens = [3, 0, 1, 0, 130]
    total, h, d = sum(lens), 2, 64
    o, do = _randn(total, h, d, dtype=F16, seed=1), _randn(total, h, d, dtype=F16, seed=2)
    lse = _randn(h, total, dtype=torch.float32, seed=3)
    lse[:, 1::5] = -math.inf
    kernel = isagen.build("attention_bwd_prep_bf16", target, dtype="f16", head_dim=d, varlen=True)
    delta, lse2 = torch.full((h, total), math.nan), torch.full((h, total), math.nan)
    kernel.run(O=o, dO=do, LSE=lse, DELTA=delta, LSE2=lse2, cu_seqlens_q=_cu(*lens), backend="emu")
    want_delta, want_lse2 = attention_bwd_prep_reference(o, do, lse, "thd")
    bound_delta, _ = attn.attention_bwd_prep_error_bounds(o, do, lse, "thd")
    assert ((delta.double() - want_delta).abs() <= bound_delta).all()
    fin = torch.isfinite(want_lse2)
    assert torch.equal(torch.isposinf(lse2), ~fin)
    assert torch.equal(lse2[fin], (lse * torch.tensor(1 / math.log(2), dtype=torch.float32))[fin])


def test_prep_error_bounds_fail_planted_errors():
    o, do = _randn(1, 2, 9, 64, seed=1), _randn(1, 2, 9, 64, seed=2)
    lse = _randn(1, 2, 9, dtype=torch.float32, seed=3)
    delta, lse2 = attention_bwd_prep_reference(o, do, lse)
    bd, bl = attn.attention_bwd_prep_error_bounds(o, do, lse)
    largest = (do[0, 0, 0].double() * o[0, 0, 0].double()).abs().max()      # one product left out fails
    assert largest > 100 * bd[0, 0, 0] and (bl < 1e-5).all()
    assert (lse2 - lse.double() * math.log2(math.e)).abs().max() < 1e-12


# --------------------------------------------------------------------------- a model of the main kernels' interface
def backward_interface_args(dtype: str, varlen: bool, part: str) -> KernArgs:
    """The main backward kernels' arguments (issue 15), in their order."""
    a = KernArgs()
    for name in ("Q", "K", "V", "dO"):
        a.pointer(name, dtype, "read_only")
    a.pointer("DELTA", "f32", "read_only")
    a.pointer("LSE2", "f32", "read_only")
    for name in (("dK", "dV") if part == "dkdv" else ("dQ",)):
        a.pointer(name, dtype, "write_only")
    if varlen:
        a.pointer("cu_seqlens_q", "i32", "read_only")
        a.pointer("cu_seqlens_k", "i32", "read_only")
    names = ["n_q", "n_kv", "group"] + [f"{x}_{s}" for x in ("q", "k", "v", "do") for s in ("sb", "sh", "sn")]
    names += ["lse_sb", "lse_sh"]
    names += [f"{x}_{s}" for x in (("dk", "dv") if part == "dkdv" else ("dq",)) for s in ("sb", "sh", "sn")]
    for name in names:
        a.value(name, "u32")
    a.value("softmax_scale", "f32")
    return a


def prep_interface_args(dtype: str, varlen: bool) -> KernArgs:
    a = KernArgs()
    a.pointer("O", dtype, "read_only")
    a.pointer("dO", dtype, "read_only")
    a.pointer("LSE", "f32", "read_only")
    a.pointer("DELTA", "f32", "write_only")
    a.pointer("LSE2", "f32", "write_only")
    if varlen:
        a.pointer("cu_seqlens_q", "i32", "read_only")
    for name in ("n_q", "o_sb", "o_sh", "o_sn", "do_sb", "do_sh", "do_sn", "lse_sb", "lse_sh"):
        a.value(name, "u32")
    return a


def model_kernel(target, dtype, head_dim, causal, varlen, part) -> Kernel:
    """A ``Kernel`` with the interface's arguments (no code object: only ``BackwardModel`` runs it)."""
    d = head_dim
    rows_q, rows_k = ("b", "h", "n_q", d), ("b", "h_kv", "n_kv", d)
    tensors = [TensorParam("Q", dtype, rows_q), TensorParam("K", dtype, rows_k), TensorParam("V", dtype, rows_k),
               TensorParam("dO", dtype, rows_q), TensorParam("DELTA", "f32", ("b", "h", "n_q")),
               TensorParam("LSE2", "f32", ("b", "h", "n_q"))]
    outs = ("dK", "dV") if part == "dkdv" else ("dQ",)
    tensors += [TensorParam(n, dtype, rows_k if n != "dQ" else rows_q, "out") for n in outs]
    if varlen:
        tensors += [TensorParam("cu_seqlens_q", "i32", ("b1",)), TensorParam("cu_seqlens_k", "i32", ("b1",))]
    q = {"sb": f"h * n_q * {d}", "sh": f"n_q * {d}", "sn": d}
    kv = {"sb": f"h_kv * n_kv * {d}", "sh": f"n_kv * {d}", "sn": d}
    kernargs = {"group": "h // h_kv", "lse_sb": "h * n_q", "lse_sh": "n_q"}
    for x in ("q", "do", "dq", "k", "v", "dk", "dv"):
        kernargs.update({f"{x}_{key}": val for key, val in (q if "q" in x or x == "do" else kv).items()})
    names = {a.name for a in backward_interface_args(dtype, varlen, part)}
    info = LaunchInfo(tensors=tuple(tensors), scalars=(ScalarParam("softmax_scale", "f32", 1.0),),
                      grid=("1", "1", "1"), block=(256, 1, 1),
                      kernargs={k: v for k, v in kernargs.items() if k in names})
    return Kernel(name="attention_bwd_bf16", target=target, code_object=b"", assembly="",
                  args=backward_interface_args(dtype, varlen, part), launch=info,
                  params={"dtype": dtype, "head_dim": head_dim, "causal": causal, "varlen": varlen, "part": part})


class BackwardModel:
    """A backend that runs the real prep kernel in the emulator and does for the main kernels what their
    interface says, from what a backend is handed (1-D buffers, packed argument values, the grid):
    workgroup (x, y, z) of part dkdv computes dK, dV of keys 64x.. of KV head y of sequence z over the
    query heads y*group.., part dq computes dQ of queries 64x.. of query head y, P recomputed as
    exp2(S * scale * log2 e - LSE2) from the prep kernel's LSE2, dS = P (dP - DELTA).  Outputs start as
    NaN (an element nobody writes shows); every access is checked to fall inside its buffer."""

    name = "emu"

    def __init__(self, emu):
        self.emu = emu
        self.launches: list[dict] = []

    def check_device(self, name, tensor):
        self.emu.check_device(name, tensor)

    def run(self, kernel, tensors, values, grid, block, *, timing=False, outputs=()):
        for name, t in tensors.items():
            assert t.dim() == 1 and t.is_contiguous(), f"{name}: the emulator copies 1-D contiguous buffers"
        blob = kernel.args.pack(**{n: (0 if isinstance(v, torch.Tensor) else v) for n, v in values.items()})
        arg = {a.name: struct.unpack_from("<f" if a.dtype == "f32" else "<I", blob, a.offset)[0]
               for a in kernel.args if a.kind == "value"}
        self.launches.append({"name": kernel.name, "grid": grid, "args": arg, "tensors": dict(tensors),
                              "params": dict(kernel.params)})
        if kernel.name != "attention_bwd_bf16":
            result = self.emu.run(kernel, tensors, values, grid, block, timing=timing, outputs=outputs)
            self.launches[-1]["results"] = {n: tensors[n].clone() for n in outputs}
            return result
        assert tuple(block) == (256, 1, 1)
        for name in outputs:
            tensors[name].fill_(math.nan)
        self._model(kernel.params, tensors, arg, grid)
        return None

    def _model(self, params, tensors, arg, grid):
        d, causal, part = params["head_dim"], params["causal"], params["part"]
        cu_q, cu_k = tensors.get("cu_seqlens_q"), tensors.get("cu_seqlens_k")
        cols = torch.arange(d)
        c = arg["softmax_scale"] / math.log(2.0)

        def at(name, index):
            if index.numel():
                assert int(index.min()) >= 0 and int(index.max()) < tensors[name].numel(), \
                    f"{name} accessed outside its buffer"
            return index

        for x, y, z in itertools.product(*(range(g) for g in grid)):
            start_q = int(cu_q[z]) if cu_q is not None else 0
            start_k = int(cu_k[z]) if cu_k is not None else 0
            len_q = int(cu_q[z + 1]) - start_q if cu_q is not None else arg["n_q"]
            len_k = int(cu_k[z + 1]) - start_k if cu_k is not None else arg["n_kv"]
            own = len_k if part == "dkdv" else len_q
            blk = attn.BWD_BLOCK
            if blk * x >= own:
                continue
            mine = torch.arange(blk * x, min(blk * x + blk, own))

            def rows(name, p, head, tokens, z=z):
                index = (z * arg[f"{p}_sb"] + head * arg[f"{p}_sh"] + tokens[:, None] * arg[f"{p}_sn"] + cols[None])
                return at(name, index)

            def vec(name, head, tokens, z=z, start_q=start_q):
                return tensors[name][at(name, z * arg["lse_sb"] + head * arg["lse_sh"] + start_q + tokens)].double()

            queries = torch.arange(len_q) if part == "dkdv" else mine
            keys = mine if part == "dkdv" else torch.arange(len_k)
            heads = range(y * arg["group"], (y + 1) * arg["group"]) if part == "dkdv" else [y]
            acc = {n: torch.zeros(len(mine), d, dtype=torch.float64) for n in ("a", "b")}
            for h in heads:
                hk = h // arg["group"]
                q = tensors["Q"][rows("Q", "q", h, start_q + queries)].double()
                do = tensors["dO"][rows("dO", "do", h, start_q + queries)].double()
                k = tensors["K"][rows("K", "k", hk, start_k + keys)].double()
                v = tensors["V"][rows("V", "v", hk, start_k + keys)].double()
                s = q @ k.T
                if causal:
                    s = s.masked_fill(keys[None] > queries[:, None] + len_k - len_q, -math.inf)
                p = torch.exp2(s * c - vec("LSE2", h, queries)[:, None])
                ds = p * (do @ v.T - vec("DELTA", h, queries)[:, None])
                if part == "dkdv":
                    acc["a"] += ds.T @ q * arg["softmax_scale"]
                    acc["b"] += p.T @ do
                else:
                    acc["a"] += ds @ k * arg["softmax_scale"]
            targets = (("dK", "dk", "a"), ("dV", "dv", "b")) if part == "dkdv" else (("dQ", "dq", "a"),)
            start = start_k if part == "dkdv" else start_q
            for name, p, which in targets:
                tensors[name][rows(name, p, y, start + mine)] = acc[which].to(tensors[name].dtype)


@pytest.fixture
def model(monkeypatch):
    """``attention_backward`` with the interface model in place of the main kernels (the prep kernel is
    the real one, in the emulator)."""
    m = BackwardModel(backends.get_backend("emu"))
    built = []

    def kernel_for(target, dtype, head_dim, causal, varlen, part, dq_atomic=False):
        assert not dq_atomic, "the interface model is the deterministic backward's"
        built.append((target, dtype, head_dim, causal, varlen, part))
        return model_kernel(target, dtype, head_dim, causal, varlen, part)
    monkeypatch.setattr(attn, "backward_kernel", kernel_for)
    monkeypatch.setitem(backends._instances, "emu", m)
    m.built = built
    return m


def _check_prep(launch, o, do, lse, layout="bhnd"):
    """The prep kernel's DELTA and LSE2 (from a model run) against the float64 reference."""
    delta = launch["results"]["DELTA"].view(lse.shape)
    lse2 = launch["results"]["LSE2"].view(lse.shape)
    want_delta, want_lse2 = attention_bwd_prep_reference(o, do, lse, layout)
    bound_delta, _ = attn.attention_bwd_prep_error_bounds(o, do, lse, layout)
    assert ((delta.double() - want_delta).abs() <= bound_delta).all()
    assert torch.equal(torch.isposinf(lse2), torch.isneginf(lse))
    fin = torch.isfinite(want_lse2)
    assert ((lse2.double() - want_lse2)[fin].abs() <= 1e-6 * want_lse2[fin].abs().clamp_min(1)).all()


def _grads(q, k, v, causal=False, scale=None, cu_q=None, cu_k=None, layout="bhnd", seed=5, **kw):
    o, lse = _forward(q, k, v, causal, scale, cu_q, cu_k, layout)
    do = _randn(*o.shape, dtype=q.dtype, seed=seed)
    dq, dk, dv = attention_backward(do, q, k, v, o, lse, causal, scale, cu_q, cu_k, layout, **kw)
    attention_backward_tolerance_check(dq, dk, dv, do, q, k, v, causal, scale, cu_q, cu_k, layout)
    return (o, lse, do), (dq, dk, dv)


@pytest.mark.parametrize("b, hq, hkv, nq, nk, d, causal, dtype", [
    (2, 4, 4, 17, 17, 64, False, BF16),
    (1, 8, 2, 64, 100, 128, True, BF16),        # GQA, N_q < N_kv
    (2, 3, 1, 130, 17, 64, True, F16),          # MQA, two query blocks, keyless rows (lse -inf)
    (1, 2, 2, 1, 1, 128, True, F16),
    (1, 2, 1, 20, 140, 64, False, BF16),        # two KV blocks
])
def test_model_contiguous(model, b, hq, hkv, nq, nk, d, causal, dtype):
    q, k, v = _qkv(b, hq, hkv, nq, nk, d, dtype)
    (o, lse, do), grads = _grads(q, k, v, causal)
    prep, dkdv, dq = model.launches[-3:]
    assert [x["name"] for x in (prep, dkdv, dq)] == ["attention_bwd_prep_bf16", "attention_bwd_bf16",
                                                     "attention_bwd_bf16"]
    _check_prep(prep, o, do, lse)
    assert prep["grid"] == (-(-nq // 128), hq, b) and attn.PREP_ROWS == 128
    assert dkdv["grid"] == (-(-nk // 64), hkv, b) and dq["grid"] == (-(-nq // 64), hq, b) and attn.BWD_BLOCK == 64
    assert dkdv["args"]["group"] == hq // hkv and dq["args"]["softmax_scale"] == pytest.approx(d ** -0.5)
    assert dkdv["tensors"]["Q"].data_ptr() == q.data_ptr()             # the caller's memory, not a copy
    dt = "bf16" if dtype == BF16 else "f16"
    assert model.built[-2:] == [("gfx942", dt, d, causal, False, "dkdv"), ("gfx942", dt, d, causal, False, "dq")]
    assert all(g.is_contiguous() for g in grads)


def test_model_strides_of_a_packed_projection(model):
    """q, k, v sliced out of one packed qkv projection (B, N, 3, H, D) in the bnhd layout, o and do as
    transposed views: strides handed to the kernels, nothing copied."""
    qkv = _randn(2, 20, 3, 4, 64, seed=4)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    o, lse = _forward(q, k, v, True, 0.2, layout="bnhd")
    o = o.transpose(1, 2).contiguous().transpose(1, 2)                   # (B, N, H, D) view of a bhnd tensor
    do = _randn(2, 4, 20, 64, seed=6).transpose(1, 2)
    dq, dk, dv = attention_backward(do, q, k, v, o, lse, True, 0.2, layout="bnhd")
    attention_backward_tolerance_check(dq, dk, dv, do, q, k, v, True, 0.2, layout="bnhd")
    assert dq.shape == (2, 20, 4, 64) and dk.shape == (2, 20, 4, 64)
    prep, dkdv, dql = model.launches[-3:]
    _check_prep(prep, o, do, lse, "bnhd")
    assert [dkdv["tensors"][n].data_ptr() for n in ("Q", "K", "V", "dO")] == [q.data_ptr(), k.data_ptr(),
                                                                          v.data_ptr(), do.data_ptr()]
    assert prep["tensors"]["O"].data_ptr() == o.data_ptr()
    args = dkdv["args"]
    assert (args["q_sb"], args["q_sh"], args["q_sn"]) == (20 * 3 * 4 * 64, 64, 3 * 4 * 64)
    assert (args["do_sb"], args["do_sh"], args["do_sn"]) == (4 * 20 * 64, 20 * 64, 64)
    assert (args["dk_sb"], args["dk_sh"], args["dk_sn"]) == (20 * 4 * 64, 64, 4 * 64)
    assert (prep["args"]["o_sh"], prep["args"]["o_sn"]) == (20 * 64, 64)


def test_model_expanded_gradient_and_strided_lse(model):
    """do = ones expanded (every stride 0: ``o.sum().backward()``'s gradient) is copied, and so is an lse
    that is not contiguous; a KV head expanded with stride 0 is read in place."""
    q = _randn(1, 4, 33, 64, dtype=F16, seed=5)
    k = _randn(1, 1, 40, 64, dtype=F16, seed=6).expand(1, 2, 40, 64)
    v = _randn(1, 2, 40, 64, dtype=F16, seed=7)
    o, lse = _forward(q, k, v, True)
    do = torch.ones((), dtype=F16).expand(o.shape)
    lse_t = lse.transpose(1, 2).contiguous().transpose(1, 2)
    dq, dk, dv = attention_backward(do, q, k, v, o, lse_t, True)
    attention_backward_tolerance_check(dq, dk, dv, do, q, k, v, True)
    prep, dkdv, _ = model.launches[-3:]
    assert dkdv["tensors"]["dO"].data_ptr() != do.data_ptr() and dkdv["args"]["do_sn"] == 64
    assert dkdv["tensors"]["K"].data_ptr() == k.data_ptr() and dkdv["args"]["k_sh"] == 0
    assert prep["tensors"]["LSE"].data_ptr() != lse_t.data_ptr()


def test_model_varlen(model):
    """THD batches with empty query and key sequences, a one-token one, more than 128 queries in one,
    GQA, causal and not; q packed with k and v."""
    lens_q, lens_k = [5, 0, 1, 140, 3], [7, 3, 1, 100, 0]
    cu_q, cu_k = _cu(*lens_q), _cu(*lens_k)
    q = _randn(sum(lens_q), 4, 64, seed=8)
    kv = _randn(sum(lens_k), 2, 2, 64, seed=9)
    k, v = kv[:, 0], kv[:, 1]
    for causal in (False, True):
        (o, lse, do), (dq, dk, dv) = _grads(q, k, v, causal, None, cu_q, cu_k, "bnhd")
        assert dq.shape == (149, 4, 64) and dk.shape == (111, 2, 64)
        _check_prep(model.launches[-3], o, do, lse, "thd")
        assert (dq[146:] == 0).all()                                     # the sequence without keys
        assert (dk[7:10] == 0).all() and (dv[7:10] == 0).all()           # the one without queries
    prep, dkdv, dql = model.launches[-3:]
    assert prep["grid"] == (2, 4, 5) and dkdv["grid"] == (2, 2, 5) and dql["grid"] == (3, 4, 5)
    args = dkdv["args"]
    assert (args["n_q"], args["n_kv"], args["q_sb"], args["k_sn"], args["lse_sb"], args["lse_sh"]) == (
        140, 100, 0, 2 * 2 * 64, 0, 149)


def test_model_through_autograd(model):
    """``o, lse = isagen.attention(q, k, v); o.backward(do)`` fills q.grad, k.grad, v.grad with
    attention_backward's gradients (the forward is the real kernel in the emulator)."""
    q, k, v = (x.requires_grad_() for x in _qkv(1, 4, 2, 30, 30, 64, dtype=F16, seed=10))
    o, lse = attention(q, k, v, True, target="gfx950")
    assert o.requires_grad and not lse.requires_grad
    do = _randn(*o.shape, dtype=F16, seed=11)
    o.backward(do)
    attention_backward_tolerance_check(q.grad, k.grad, v.grad, do, q.detach(), k.detach(), v.detach(), True)
    assert model.built[-1][0] == "gfx950"
    with torch.no_grad():                                  # no graph without grad mode
        o2, _ = attention(q, k, v, True)
    assert not o2.requires_grad and torch.equal(o2, o.detach())


def test_model_through_the_op_compile_and_opcheck(model):
    """The op's autograd (torch.ops.isagen.attention(...).backward), torch.compile(fullgraph=True) of a
    forward + backward step, and opcheck's fake and autograd-registration tests."""
    q, k, v = (x.requires_grad_() for x in _qkv(1, 2, 1, 40, 33, 64, seed=12))
    do = _randn(1, 2, 40, 64, seed=13)
    o, lse = torch.ops.isagen.attention(q, k, v, True)
    o.backward(do)
    attention_backward_tolerance_check(q.grad, k.grad, v.grad, do, q.detach(), k.detach(), v.detach(), True)

    # aot_eager traces the backward graph ahead of time, through the autograd formula and the backward
    # op's fake implementation, then runs both graphs
    compiled = torch.compile(lambda q, k, v: torch.ops.isagen.attention(q, k, v, True)[0], backend="aot_eager",
                             fullgraph=True)
    x = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    compiled(*x).backward(do)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(x, (q, k, v)))
    qd, kd, vd = (x.detach() for x in (q, k, v))
    o, lse = _forward(qd, kd, vd, True)
    utils = ("test_schema", "test_faketensor")
    torch.library.opcheck(torch.ops.isagen.attention_backward.default, (do, qd, kd, vd, o, lse, True),
                          test_utils=utils)
    thd = [x[0].transpose(0, 1) for x in (qd, kd, vd)]
    cu_q, cu_k = _cu(10, 30), _cu(3, 30)
    o, lse = _forward(*thd, False, 0.5, cu_q, cu_k)
    torch.library.opcheck(torch.ops.isagen.attention_backward.default, (o, *thd, o, lse, False, 0.5, cu_q, cu_k),
                          test_utils=utils)
    torch.library.opcheck(torch.ops.isagen.attention.default, (q, k, v, True),
                          test_utils=("test_autograd_registration",))


# --------------------------------------------------------------------------- the kernels, in the emulator
def test_prep_kernel_arguments_are_the_interface():
    for varlen in (False, True):
        kernel = isagen.build("attention_bwd_prep_bf16", "gfx942", dtype="f16", head_dim=64, varlen=varlen)
        assert _described(kernel.args) == _described(prep_interface_args("f16", varlen))
        assert tuple(kernel.launch.block) == (256, 1, 1)


def _described(args):
    return [(a.name, a.kind, a.dtype, a.access) for a in args]


@pytest.mark.parametrize("part", ["dkdv", "dq"])
def test_kernel_arguments_are_the_interface(part):
    """The lead's kernels take the arguments this front end packs (names, order, types, access), 256
    work-items per workgroup.  Fails until kernels/attention_bwd.py lands."""
    for varlen in (False, True):
        kernel = attn.backward_kernel("gfx942", "bf16", 64, True, varlen, part)
        assert _described(kernel.args) == _described(backward_interface_args("bf16", varlen, part))
        assert tuple(kernel.launch.block) == (256, 1, 1)


KERNEL_CASES = [
    # target, dtype, (B, H_q, H_kv, N_q, N_kv, D), causal, varlen lengths (q, k) or None, layout
    ("gfx942", BF16, (1, 2, 2, 17, 17, 64), False, None, "bhnd"),                        # MHA
    ("gfx950", BF16, (1, 4, 2, 64, 100, 128), True, None, "bnhd"),                       # GQA, N_q != N_kv
    ("gfx942", F16, (1, 2, 1, 100, 17, 64), True, None, "bhnd"),                         # MQA, keyless rows
    ("gfx950", F16, (1, 2, 1, 1, 1, 64), False, None, "bhnd"),                           # N = 1
    ("gfx942", BF16, (None, 2, 1, None, None, 64), True, ([5, 0, 1, 20], [7, 3, 1, 17]), "bhnd"),
]
# every (target, dtype, head dim, causal) once, the shapes and layouts alternating; varlen per target and D
_SHAPES = [(2, 4, 1, 100, 64, "bnhd"), (1, 4, 4, 64, 130, "bhnd"), (1, 4, 2, 17, 17, "bhnd")]
SLOW_CASES = [
    (target, dtype, (b, hq, hkv, n, n2, d), causal, None, layout)
    for i, (target, dtype, d, causal) in enumerate(itertools.product(("gfx942", "gfx950"), (BF16, F16), (64, 128),
                                                                      (False, True)))
    for (b, hq, hkv, n, n2, layout) in [_SHAPES[i % 3]]
] + [
    (target, (BF16, F16)[i % 2], (None, 4, 2, None, None, d), bool(i // 2 % 2), ([100, 1, 0, 64], [64, 17, 5, 100]),
     "bhnd")
    for i, (target, d) in enumerate(itertools.product(("gfx942", "gfx950"), (64, 128)))
]


def _kernel_case(target, dtype, dims, causal, varlen, layout, seed=0):
    args = _kernel_inputs(dtype, dims, causal, varlen, layout, seed)
    _grads(*args, seed=seed + 7, target=target, backend="emu")


@pytest.mark.parametrize("target, dtype, dims, causal, varlen, layout", KERNEL_CASES, ids=_case_id)
def test_kernel(target, dtype, dims, causal, varlen, layout):
    _kernel_case(target, dtype, dims, causal, varlen, layout)


@pytest.mark.slow
@pytest.mark.parametrize("target, dtype, dims, causal, varlen, layout", SLOW_CASES, ids=_case_id)
def test_kernel_more_shapes(target, dtype, dims, causal, varlen, layout):
    _kernel_case(target, dtype, dims, causal, varlen, layout, seed=1)


def test_kernel_through_autograd_and_deterministic():
    """The forward kernel and the backward kernels end to end through autograd (GQA, causal), and a
    second backward gives the same bits (no atomics)."""
    q, k, v = (x.requires_grad_() for x in _qkv(1, 4, 2, 40, 70, 64, seed=14))
    o, lse = attention(q, k, v, True, backend="emu")
    do = _randn(*o.shape, seed=15)
    o.backward(do)
    qd, kd, vd = (x.detach() for x in (q, k, v))
    attention_backward_tolerance_check(q.grad, k.grad, v.grad, do, qd, kd, vd, True)
    again = attention_backward(do, qd, kd, vd, o.detach(), lse, True, backend="emu")
    assert all(torch.equal(a, b) for a, b in zip(again, (q.grad, k.grad, v.grad)))


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_prep_kernel_builds_checks_and_assembles(target):
    """Every mode of the prep kernel passes the project's checks (hazards, waits, registers: run by the
    build), has no scratch and no s_nop (the DPP steps of 4 or 8 rows interleave), the occupancy the docs
    state, and LLVM assembles it."""
    from isagen.builders.spec import bundled_specs_dir, load_specs
    from isagen.objects.emit import render_assembly
    from isagen.objects.toolchain import assemble
    path = bundled_specs_dir() / "attention_bwd_prep_bf16.yaml"
    for dtype, d, varlen in itertools.product(("bf16", "f16"), (64, 128), (False, True)):
        spec = load_specs([path], overrides=[f"dtype={dtype}", f"head_dim={d}", f"varlen={str(varlen).lower()}"])[0]
        program = spec.build(target)
        assert program.rejected is None and program.lds_bytes == 0
        assert program.occupancy()["waves_per_simd"] == (8 if d == 64 else 4)     # docs/attention.md
        text = render_assembly(program)
        assert ".amdhsa_private_segment_fixed_size 0" in text and "s_nop" not in text
        if d == 128 and not varlen:
            assert assemble(text, target, name=program.name)


def test_kernel_on_strided_inputs():
    """The real kernels on q, k, v out of one packed qkv projection (bnhd views, read in place) and the
    expanded gradient of ``o.sum()`` (copied), through autograd; ``isagen.attention_backward`` is the
    same function."""
    assert isagen.attention_backward is attention_backward and "attention_backward" in dir(isagen)
    qkv = _randn(1, 33, 3, 4, 64, seed=16).requires_grad_()
    q, k, v = qkv[:, :, 0], qkv[:, :, 1, :2], qkv[:, :, 2, :2]
    o, lse = attention(q, k, v, True, 0.3, layout="bnhd", backend="emu")
    o.float().sum().backward()
    do = torch.ones_like(o)
    got = qkv.grad
    qd, kd, vd = (x.detach() for x in (q, k, v))
    attention_backward_tolerance_check(got[:, :, 0], got[:, :, 1, :2], got[:, :, 2, :2], do, qd, kd, vd, True, 0.3,
                                       layout="bnhd")
    assert (got[:, :, 1:, 2:] == 0).all()                    # the KV heads attention never read


@pytest.mark.parametrize("target, dtype, dims, causal, varlen, layout", [
    ("gfx950", BF16, (1, 4, 2, 40, 70, 128), True, None, "bnhd"),
    ("gfx942", F16, (2, 2, 1, 100, 17, 64), False, None, "bhnd"),
    ("gfx950", BF16, (None, 2, 1, None, None, 64), True, ([5, 0, 40], [9, 3, 60]), "bhnd"),
], ids=_case_id)
def test_kernel_atomic_dq(target, dtype, dims, causal, varlen, layout):
    """deterministic=False: dQ by buffer_atomic_add_f32 from the dkdv kernel (no dq kernel), within the same
    tolerance against the float64 reference."""
    args = _kernel_inputs(dtype, dims, causal, varlen, layout, seed=4)
    _grads(*args, seed=9, target=target, backend="emu", deterministic=False)


def test_atomic_dq_where_lds_is_short_is_one_line():
    q, k, v = _qkv(1, 2, 1, 20, 20, 128, BF16, seed=3)
    o, lse = attention(q, k, v, backend="emu", target="gfx942")
    with pytest.raises(LaunchError, match=r"^attention_backward: deterministic=False: .*gfx942 has 65536") as e:
        attention_backward(torch.ones_like(o), q, k, v, o, lse, target="gfx942", backend="emu",
                           deterministic=False)
    assert "\n" not in str(e.value)


def test_deterministic_across_grid_orders(monkeypatch):
    """The default backward writes every gradient element from one workgroup in a fixed order: the same
    bits when the emulator runs the workgroups forward, reversed or shuffled (ISAGEN_EMU_WG_ORDER)."""
    q, k, v = _qkv(1, 4, 2, 100, 130, 64, BF16, seed=21)
    o, lse = attention(q, k, v, True, backend="emu")
    do = _randn(*o.shape, dtype=BF16, seed=22)
    runs = []
    for order in ("forward", "reverse", "shuffle:7"):
        monkeypatch.setenv("ISAGEN_EMU_WG_ORDER", order)
        runs.append(attention_backward(do, q, k, v, o, lse, True, backend="emu"))
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other))


@pytest.mark.slow
@pytest.mark.parametrize("target, dtype, dims, causal, varlen, layout", [
    ("gfx942", BF16, (1, 2, 1, 256, 256, 128), True, None, "bhnd"),
    ("gfx950", F16, (1, 2, 2, 256, 100, 64), False, None, "bnhd"),
], ids=_case_id)
def test_kernel_n256(target, dtype, dims, causal, varlen, layout):
    """N = 256 (the issue's list): four KV blocks and four query blocks."""
    _kernel_case(target, dtype, dims, causal, varlen, layout, seed=5)
