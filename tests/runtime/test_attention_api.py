"""``isagen.attention`` / ``torch.ops.isagen.attention`` (runtime/attention.py, issue 14).

Without the kernel:
* every user mistake is one ``LaunchError`` line naming the argument, raised before anything is built;
* empty problems return consistent outputs without a launch (N_kv = 0: o = 0, lse = -inf);
* the torch op's fake implementation gives the output shapes of every layout and of varlen
  (FakeTensorMode, meta tensors, ``torch.export``, which traces as ``torch.compile(fullgraph=True)`` does);
* the front end's kernel arguments, checked by a model of the kernel's interface (``InterfaceModel``: the
  addressing, grid, GQA mapping, causal alignment and varlen offsets of the interface, written from its
  description and computed in float64 from the raw 1-D buffers and argument values the backend is
  handed): its outputs pass ``attention_tolerance_check`` for strided, packed, expanded and varlen inputs,
  and nothing is copied but a strided head dim.

With the kernel (``specs/attention_bf16.yaml``, built for the emulator): small shapes of every parameter
(dtype, head dim, causal, varlen, target) against ``attention_reference`` with flash-attn's tolerance;
the larger combinations are marked slow.
"""

from __future__ import annotations

import math
import struct

import pytest
import torch
from attention_support import BF16, F16, attention_env, kernel_inputs  # noqa: F401 -- attention_env: autouse fixture
from attention_support import case_id as _case_id
from attention_support import cu as _cu
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
from isagen.runtime.attention import attention, attention_reference, attention_tolerance_check

# --------------------------------------------------------------------------- user mistakes
Q, K = _qkv(1, 4, 2, 8, 8, 64)[:2]
CU = _cu(3, 5)


def _varlen(nq=8, nk=8, h=4, hkv=2, d=64):
    return _randn(nq, h, d), _randn(nk, hkv, d), _randn(nk, hkv, d)


VQ, VK, VV = _varlen()

MISTAKES = [
    # (arguments, words of the one-line message)
    (dict(q=Q.float(), k=K.float(), v=K.float()), "q has dtype torch.float32; the kernel takes torch.bfloat16 or "
                                                  "torch.float16"),
    (dict(q=Q, k=K.half(), v=K), "k has dtype torch.float16 but q has torch.bfloat16"),
    (dict(q=Q, k=K, v=K.half()), "v has dtype torch.float16 but q has torch.bfloat16"),
    (dict(q=Q, k=K.to("meta"), v=K), "k is on meta but q is on cpu"),
    (dict(q=Q[..., :32], k=K[..., :32], v=K[..., :32]), "q has head dim 32; the kernel supports 64 and 128"),
    (dict(q=Q, k=_randn(1, 2, 8, 128), v=K), "k has head dim 128 but q has 64"),
    (dict(q=Q, k=K, v=_randn(1, 2, 8, 128)), "v has head dim 128 but q has 64"),
    (dict(q=Q, k=K, v=K[:, :, :5]), "v has shape (1, 2, 5, 64) but k has (1, 2, 8, 64); they must have the same"),
    (dict(q=_randn(1, 3, 8, 64), k=K, v=K), "q has 3 heads, not a multiple of k's 2"),
    (dict(q=Q, k=K[:, :0], v=K[:, :0]), "k has 0 heads but q has 4"),
    (dict(q=Q.expand(2, -1, -1, -1), k=K, v=K), "k has batch size 1 but q has 2"),
    (dict(q=Q[0], k=K, v=K), "q has shape (4, 8, 64); layout 'bhnd' takes 4 dimensions (B, H, N, D)"),
    (dict(q=Q[0], k=K, v=K, layout="bnhd"), "layout 'bnhd' takes 4 dimensions (B, N, H, D)"),
    (dict(q=Q, k=K, v=K, layout="bshd"), "layout 'bshd' is not one of 'bhnd' (torch SDPA's (B, H, N, D)), 'bnhd'"),
    (dict(q=Q, k=K, v=K, layout=None), "layout None is not one of"),
    (dict(q=Q, k=K, v=K, causal=1), "causal must be True or False, got int 1"),
    (dict(q=Q, k=K, v=K, softmax_scale=0.0), "softmax_scale=0.0: expected a finite number > 0 that float32 holds"),
    (dict(q=Q, k=K, v=K, softmax_scale=-0.125), "softmax_scale=-0.125: expected a finite number > 0"),
    (dict(q=Q, k=K, v=K, softmax_scale=math.inf), "softmax_scale=inf: expected a finite number > 0"),
    (dict(q=Q, k=K, v=K, softmax_scale=math.nan), "softmax_scale=nan: expected a finite number > 0"),
    (dict(q=Q, k=K, v=K, softmax_scale=1e39), "softmax_scale=1e+39: expected a finite number > 0 that float32"),
    (dict(q=Q, k=K, v=K, softmax_scale=1e-40), "softmax_scale=1e-40: expected"),
    (dict(q=Q, k=K, v=K, softmax_scale=True), "softmax_scale must be a number, got bool True"),
    (dict(q=Q, k=K, v=K, softmax_scale="0.1"), "softmax_scale must be a number, got str '0.1'"),
    (dict(q=Q, k=K, v=K, softmax_scale=torch.tensor(0.1)), "softmax_scale must be a Python number, got a "
                                                           "torch.Tensor (pass .item())"),
    (dict(q=Q.tolist(), k=K, v=K), "q must be a torch.Tensor, got list"),
    (dict(q=Q, k=K.to_sparse(), v=K), "k has layout torch.sparse_coo; pass a dense tensor"),
    (dict(q=Q, k=K, v=K, target="gfx1100"), "unsupported target"),
    (dict(q=Q, k=K, v=K, target=942), "target must be a target name such as gfx942, got int"),
    (dict(q=Q, k=K, v=K, backend="cuda"), "unknown backend backend='cuda' (choose hip or emu)"),
    # varlen
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=CU), "cu_seqlens_q is given but cu_seqlens_k is not; varlen needs both"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_k=CU), "cu_seqlens_k is given but cu_seqlens_q is not"),
    (dict(q=Q, k=K, v=K, cu_seqlens_q=CU, cu_seqlens_k=CU), "q has shape (1, 4, 8, 64); with cu_seqlens it must be "
                                                          "(total_tokens, H, D), 3 dimensions"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=CU.long(), cu_seqlens_k=CU), "cu_seqlens_q has dtype torch.int64; it must "
                                                                      "be torch.int32"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=CU, cu_seqlens_k=[0, 3, 8]), "cu_seqlens_k must be a 1-D int32 "
                                                                      "torch.Tensor of sequence offsets, got list"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=CU[None], cu_seqlens_k=CU), "cu_seqlens_q has shape (1, 3); it must be 1-D"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=CU[:0], cu_seqlens_k=CU), "cu_seqlens_q has shape (0,); it must be 1-D"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=CU.to("meta"), cu_seqlens_k=CU), "cu_seqlens_q is on meta but q is on cpu"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=CU + 1, cu_seqlens_k=CU), "cu_seqlens_q[0] is 1; the offsets must start "
                                                                   "at 0"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=torch.tensor([0, 5, 3, 8], dtype=torch.int32),
          cu_seqlens_k=_cu(3, 3, 2)), "cu_seqlens_q decreases at index 2 (5 then 3)"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=CU, cu_seqlens_k=_cu(3, 4)), "cu_seqlens_k[-1] is 7 but k has 8 tokens; "
                                                                      "the last offset must be the total"),
    (dict(q=VQ, k=VK, v=VV, cu_seqlens_q=CU, cu_seqlens_k=_cu(3, 4, 1)), "cu_seqlens_q has 2 sequences but "
                                                                         "cu_seqlens_k has 3"),
    (dict(q=VQ, k=VK, v=VK[:5], cu_seqlens_q=CU, cu_seqlens_k=CU), "v has shape (5, 2, 64) but k has (8, 2, 64)"),
]


@pytest.mark.parametrize("args, words", MISTAKES, ids=[w[:40] for _, w in MISTAKES])
def test_mistakes_are_one_line_naming_the_argument(args, words):
    with pytest.raises(IsagenError) as e:
        attention(**args)
    assert isinstance(e.value, (LaunchError, TargetError))
    text = str(e.value)
    assert "\n" not in text and text.startswith("attention: ") and words in text, text


def test_sizes_the_kernel_cannot_address():
    """A sequence of 2**24 tokens and a tensor of 4 GiB, refused before anything is allocated (expanded and
    meta tensors: nothing is as large as it says)."""
    q = _randn(1, 1, 1, 64).expand(1, 1, 2 ** 24, 64)
    with pytest.raises(LaunchError, match=r"^attention: q has a sequence of 16777216 tokens; the kernel takes fewer "
                                          r"than 2\*\*24 \(16777216\) per sequence$"):
        attention(q, q[:, :, :8], q[:, :, :8])
    k = torch.empty(1, 1024, 2 ** 14, 128, dtype=BF16, device="meta")
    with pytest.raises(LaunchError, match=r"^attention: k spans 4.00 GiB from its first to its last element; the "
                                          r"kernel's 32-bit offsets reach less than 2 GiB"):
        attention(torch.empty(1, 1024, 1, 128, dtype=BF16, device="meta"), k, k)
    with pytest.raises(LaunchError, match=r"^attention: o spans 2.00 GiB"):   # the output too (q expanded)
        attention(k[:, :1].expand(1, 512, -1, -1), k[:, :1, :1], k[:, :1, :1])


def test_tensors_the_backend_cannot_reach():
    """Meta tensors (as good as a GPU's on the emulator) are refused by name before anything is built."""
    q = torch.empty(1, 2, 8, 64, dtype=BF16, device="meta")
    with pytest.raises(LaunchError, match=r"^attention: tensor 'q' is on meta; the emulator backend takes CPU "
                                          r"tensors"):
        attention(q, q, q, backend="emu")


def test_fake_tensors_are_checked_too():
    with FakeTensorMode():
        q = torch.empty(2, 4, 8, 64, dtype=BF16)
        with pytest.raises(LaunchError, match="attention: q has 4 heads, not a multiple of k's 3"):
            torch.ops.isagen.attention(q, q[:, :3], q[:, :3])
        with pytest.raises(LaunchError, match="attention: q has dtype torch.float32"):
            torch.ops.isagen.attention(q.float(), q.float(), q.float())


# --------------------------------------------------------------------------- empty problems: no launch
@pytest.mark.parametrize("shape_q, shape_kv", [((0, 4, 8, 64), (0, 2, 8, 64)), ((2, 0, 8, 64), (2, 0, 8, 64)),
                                               ((2, 4, 0, 64), (2, 2, 8, 64)), ((2, 4, 0, 128), (2, 2, 0, 128))])
def test_empty_problems_launch_nothing(shape_q, shape_kv, monkeypatch):
    monkeypatch.setattr(attn, "attention_kernel", _no_kernel)
    for layout in ("bhnd", "bnhd"):
        q, k = torch.empty(shape_q, dtype=BF16), torch.empty(shape_kv, dtype=BF16)
        if layout == "bnhd":
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        o, lse = attention(q, k, k, True, layout=layout)
        b, h, n, d = shape_q
        assert o.shape == ((b, h, n, d) if layout == "bhnd" else (b, n, h, d)) and o.dtype == BF16
        assert lse.shape == (b, h, n) and lse.dtype == torch.float32 and o.numel() == 0


def test_no_keys_gives_zero_and_minus_infinity(monkeypatch):
    """N_kv = 0 (every row sees no key): o = 0 and lse = -inf, as the reference (torch's safe softmax and
    torch.logsumexp of nothing) says; with varlen, all sequences keyless likewise.  No kernel is built."""
    monkeypatch.setattr(attn, "attention_kernel", _no_kernel)
    q, k, v = _qkv(2, 4, 2, 5, 0, 64, dtype=F16)
    o, lse = attention(q, k, v, False)
    ref_o, ref_lse = attention_reference(q, k, v, False)
    assert torch.equal(o.double(), ref_o) and torch.equal(lse.double(), ref_lse)
    assert (o == 0).all() and torch.isneginf(lse).all()
    vq, vk, vv = _varlen(nq=7, nk=0)
    cu_q, cu_k = _cu(3, 0, 4), _cu(0, 0, 0)
    o, lse = attention(vq, vk, vv, True, None, cu_q, cu_k)
    assert o.shape == (7, 4, 64) and lse.shape == (4, 7) and (o == 0).all() and torch.isneginf(lse).all()
    o, lse = attention(vq[:0], vk, vv, True, None, _cu(), _cu())          # no sequence at all
    assert o.shape == (0, 4, 64) and lse.shape == (4, 0)
    o, lse = attention(vq[:0], vk, vv, True, None, _cu(0, 0), _cu(0, 0))  # sequences without tokens
    assert o.shape == (0, 4, 64) and lse.shape == (4, 0)


def _no_kernel(*args, **kw):
    raise AssertionError("an empty problem must not build (or launch) a kernel")


# --------------------------------------------------------------------------- the torch op's fake implementation
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_fake_shapes(layout):
    def shapes(*args):
        o, lse = torch.ops.isagen.attention(*args)
        return tuple(o.shape), o.dtype, tuple(lse.shape), lse.dtype, o.device.type

    with FakeTensorMode():
        q, k = torch.empty(2, 4, 8, 64, dtype=F16), torch.empty(2, 2, 3, 64, dtype=F16)     # (B, H, N, D)
        if layout == "bnhd":
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        assert shapes(q, k, k, True, None, None, None, layout) == (
            (2, 4, 8, 64) if layout == "bhnd" else (2, 8, 4, 64), F16, (2, 4, 8), torch.float32, "cpu")
        # varlen: THD whatever the layout says; lse (H, total_q)
        q, k = torch.empty(30, 8, 128, dtype=BF16), torch.empty(50, 2, 128, dtype=BF16)
        cu = torch.empty(4, dtype=torch.int32)
        assert shapes(q, k, k, False, 0.5, cu, cu, layout) == ((30, 8, 128), BF16, (8, 30), torch.float32, "cpu")
    m = torch.empty(3, 2, 17, 64, dtype=BF16, device="meta")          # (B, H, N, D)
    m = m if layout == "bhnd" else m.transpose(1, 2)
    assert shapes(m, m, m, True, None, None, None, layout) == (tuple(m.shape), BF16, (3, 2, 17), torch.float32,
                                                              "meta")


def test_schema_and_export_trace_without_running():
    """The op's schema; ``torch.export`` (dynamo, full graph, fake tensors) traces a function calling it
    into one graph without running the kernel."""
    assert str(torch.ops.isagen.attention.default._schema) == (
        'isagen::attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? softmax_scale=None, '
        'Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, str layout="bhnd") -> (Tensor, Tensor)')
    assert torch_ops.registered_ops()["attention"] == torch_ops.ATTENTION_SCHEMA
    assert torch_ops.register_attention_op() == "isagen::attention"          # again: a no-op

    class Block(torch.nn.Module):
        def forward(self, q, k, v, cu):
            o, lse = torch.ops.isagen.attention(q, k, v, True, 0.125, cu, cu)
            return o.sum(-1) + lse.T

    q, k, cu = _randn(9, 4, 64), _randn(9, 2, 64), _cu(4, 5)
    program = torch.export.export(Block(), (q, k, k, cu))
    calls = [n for n in program.graph.nodes if n.op == "call_function" and "isagen" in str(n.target)]
    assert len(calls) == 1 and str(calls[0].target) == "isagen.attention.default"
    out = [n for n in program.graph.nodes if n.op == "output"][0].args[0][0]
    assert tuple(out.meta["val"].shape) == (9, 4)


def test_lazy_export():
    assert isagen.attention is attention and "attention" in dir(isagen)


# --------------------------------------------------------------------------- a model of the kernel's interface
def interface_args(dtype: str, varlen: bool) -> KernArgs:
    """The kernel arguments of the interface (issue 14), in its order."""
    a = KernArgs()
    for name in ("Q", "K", "V"):
        a.pointer(name, dtype, "read_only")
    a.pointer("O", dtype, "write_only")
    a.pointer("LSE", "f32", "write_only")
    if varlen:
        a.pointer("cu_seqlens_q", "i32", "read_only")
        a.pointer("cu_seqlens_k", "i32", "read_only")
    for name in ("n_q", "n_kv", "group", "q_sb", "q_sh", "q_sn", "k_sb", "k_sh", "k_sn", "v_sb", "v_sh", "v_sn",
                 "o_sb", "o_sh", "o_sn", "lse_sb", "lse_sh"):
        a.value(name, "u32")
    a.value("softmax_scale", "f32")
    return a


def model_kernel(target, dtype, head_dim, causal, varlen) -> Kernel:
    """A ``Kernel`` with the interface's arguments and a contract like the spec's (no code object: only
    ``InterfaceModel`` runs it)."""
    d = head_dim
    tensors = [TensorParam("Q", dtype, ("b", "h", "n_q", d)), TensorParam("K", dtype, ("b", "h_kv", "n_kv", d)),
               TensorParam("V", dtype, ("b", "h_kv", "n_kv", d)), TensorParam("O", dtype, ("b", "h", "n_q", d), "out"),
               TensorParam("LSE", "f32", ("b", "h", "n_q"), "out")]
    if varlen:
        tensors += [TensorParam("cu_seqlens_q", "i32", ("b1",)), TensorParam("cu_seqlens_k", "i32", ("b1",))]
    kernargs = {"group": "h // h_kv", "q_sb": f"h * n_q * {d}", "q_sh": f"n_q * {d}", "q_sn": d,
                "k_sb": f"h_kv * n_kv * {d}", "k_sh": f"n_kv * {d}", "k_sn": d, "v_sb": f"h_kv * n_kv * {d}",
                "v_sh": f"n_kv * {d}", "v_sn": d, "o_sb": f"h * n_q * {d}", "o_sh": f"n_q * {d}", "o_sn": d,
                "lse_sb": "h * n_q", "lse_sh": "n_q"}
    info = LaunchInfo(tensors=tuple(tensors), scalars=(ScalarParam("softmax_scale", "f32", 1 / math.sqrt(d)),),
                      grid=("cdiv(n_q, 128)", "h", "b"), block=(256, 1, 1), kernargs=kernargs)
    return Kernel(name="attention_bf16", target=target, code_object=b"", assembly="",
                  args=interface_args(dtype, varlen), launch=info,
                  params={"dtype": dtype, "head_dim": head_dim, "causal": causal, "varlen": varlen})


class InterfaceModel:
    """A backend that does what the interface says the kernel does, from what a backend is handed: the
    1-D buffers (which must be contiguous, as the emulator needs) and the packed argument values.  Each
    workgroup (x, y, z) of the grid computes query rows 128x..128x+127 of head y of sequence z in float64;
    every read and write is checked to fall inside its buffer, and the outputs start as NaN so that a row
    no workgroup writes shows."""

    name = "emu"

    def __init__(self):
        self.launches: list[dict] = []

    def check_device(self, name, tensor):
        if tensor.device.type != "cpu":
            raise LaunchError(f"tensor '{name}' is on {tensor.device}")

    def run(self, kernel, tensors, values, grid, block, *, timing=False, outputs=()):
        for name, t in tensors.items():
            assert t.dim() == 1 and t.is_contiguous(), f"{name}: the emulator copies 1-D contiguous buffers"
        blob = kernel.args.pack(**{n: (0 if isinstance(v, torch.Tensor) else v) for n, v in values.items()})
        arg = {a.name: struct.unpack_from("<f" if a.dtype == "f32" else "<I", blob, a.offset)[0]
               for a in kernel.args if a.kind == "value"}
        self.launches.append({"grid": grid, "block": block, "args": arg, "tensors": dict(tensors)})
        assert tuple(block) == (256, 1, 1)
        for name in outputs:
            tensors[name].fill_(math.nan)
        d, causal = kernel.params["head_dim"], kernel.params["causal"]
        cu_q, cu_k = tensors.get("cu_seqlens_q"), tensors.get("cu_seqlens_k")

        def at(name, index):
            buf = tensors[name]
            assert int(index.min()) >= 0 and int(index.max()) < buf.numel(), f"{name} accessed outside its buffer"
            return index

        cols = torch.arange(d)
        for x in range(grid[0]):
            for h in range(grid[1]):
                for b in range(grid[2]):
                    start_q = int(cu_q[b]) if cu_q is not None else 0
                    start_k = int(cu_k[b]) if cu_k is not None else 0
                    len_q = int(cu_q[b + 1]) - start_q if cu_q is not None else arg["n_q"]
                    len_k = int(cu_k[b + 1]) - start_k if cu_k is not None else arg["n_kv"]
                    if 128 * x >= len_q:
                        continue
                    rows = torch.arange(128 * x, min(128 * x + 128, len_q))
                    keys = torch.arange(len_k)
                    hk = h // arg["group"]

                    def tile(name, p, batch, head, tokens):
                        """Element (batch, head, token, d) of tensor ``name``: its index in the buffer."""
                        index = (batch * arg[f"{p}_sb"] + head * arg[f"{p}_sh"] + tokens[:, None] * arg[f"{p}_sn"]
                                 + cols[None])
                        return at(name, index)
                    q = tensors["Q"][tile("Q", "q", b, h, start_q + rows)].double()
                    k = tensors["K"][tile("K", "k", b, hk, start_k + keys)].double()
                    v = tensors["V"][tile("V", "v", b, hk, start_k + keys)].double()
                    s = q @ k.T * arg["softmax_scale"]
                    if causal:
                        s = s.masked_fill(keys[None] > rows[:, None] + len_k - len_q, -math.inf)
                    lse = torch.logsumexp(s, -1)
                    p = torch.exp(s - lse[:, None]).nan_to_num(0.0)
                    o_index = tile("O", "o", b, h, start_q + rows)
                    tensors["O"][o_index] = (p @ v).to(tensors["O"].dtype)
                    lse_index = at("LSE", b * arg["lse_sb"] + h * arg["lse_sh"] + start_q + rows)
                    tensors["LSE"][lse_index] = lse.float()
        return None


@pytest.fixture
def model(monkeypatch):
    """``attention`` with the interface model in place of the kernel and the emulator."""
    m = InterfaceModel()
    built = []

    def kernel_for(target, dtype, head_dim, causal, varlen):
        built.append((target, dtype, head_dim, causal, varlen))
        return model_kernel(target, dtype, head_dim, causal, varlen)
    monkeypatch.setattr(attn, "attention_kernel", kernel_for)
    monkeypatch.setitem(backends._instances, "emu", m)
    m.built = built
    return m


def _check(o, lse, q, k, v, causal=False, scale=None, cu_q=None, cu_k=None, layout="bhnd"):
    attention_tolerance_check(o, lse, q, k, v, causal, scale, cu_q, cu_k, layout)


@pytest.mark.parametrize("b, hq, hkv, nq, nk, d, causal, dtype", [
    (2, 4, 4, 17, 17, 64, False, BF16),
    (1, 8, 2, 64, 100, 128, True, BF16),        # GQA, N_q < N_kv
    (2, 3, 1, 130, 17, 64, True, F16),          # MQA, two row blocks, rows that see no key
    (1, 2, 2, 1, 1, 128, True, F16),
])
def test_interface_model_contiguous(model, b, hq, hkv, nq, nk, d, causal, dtype):
    q, k, v = _qkv(b, hq, hkv, nq, nk, d, dtype)
    o, lse = attention(q, k, v, causal)
    _check(o, lse, q, k, v, causal)
    launch = model.launches[-1]
    assert launch["grid"] == (-(-nq // 128), hq, b)
    assert launch["args"]["group"] == hq // hkv and launch["args"]["softmax_scale"] == pytest.approx(d ** -0.5)
    assert launch["tensors"]["Q"].data_ptr() == q.data_ptr()             # the caller's memory, not a copy
    assert model.built[-1] == ("gfx942", "bf16" if dtype == BF16 else "f16", d, causal, False)
    assert o.is_contiguous() and lse.is_contiguous()


def test_interface_model_strides_of_a_packed_projection(model):
    """q, k, v sliced out of one packed qkv projection (B, N, 3, H, D), in both layouts: strides along
    batch, heads and sequence are handed to the kernel, no byte copied."""
    qkv = _randn(2, 20, 3, 4, 64, seed=4)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]                   # (B, N, H, D), not contiguous
    o, lse = attention(q, k, v, True, 0.2, layout="bnhd")
    assert o.shape == (2, 20, 4, 64) and lse.shape == (2, 4, 20)
    _check(o, lse, q, k, v, True, 0.2, layout="bnhd")
    tensors = model.launches[-1]["tensors"]
    assert [tensors[n].data_ptr() for n in "QKV"] == [q.data_ptr(), k.data_ptr(), v.data_ptr()]
    args = model.launches[-1]["args"]
    assert (args["q_sb"], args["q_sh"], args["q_sn"]) == (20 * 3 * 4 * 64, 64, 3 * 4 * 64)
    assert (args["o_sb"], args["o_sh"], args["o_sn"]) == (20 * 4 * 64, 64, 4 * 64)
    # the same tensors as torch SDPA's (B, H, N, D) views
    o, lse = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), False)
    assert o.shape == (2, 4, 20, 64)
    _check(o, lse, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), False)


def test_interface_model_expanded_and_sliced_heads(model):
    """One KV head expanded to two (stride 0), q a slice of every other head and batch, a head dim of
    stride 2 (the one case copied)."""
    q = _randn(4, 8, 33, 64, dtype=F16, seed=5)[::2, ::2]
    k = _randn(2, 1, 40, 64, dtype=F16, seed=6).expand(2, 2, 40, 64)
    v = _randn(2, 2, 40, 128, dtype=F16, seed=7)[..., ::2]
    o, lse = attention(q, k, v, True)
    _check(o, lse, q, k, v, True)
    tensors, args = model.launches[-1]["tensors"], model.launches[-1]["args"]
    assert tensors["Q"].data_ptr() == q.data_ptr() and tensors["K"].data_ptr() == k.data_ptr()
    assert tensors["K"].numel() == 40 * 64 + 40 * 64           # one head per batch: the span, not the view's size
    assert tensors["V"].data_ptr() != v.data_ptr() and args["v_sn"] == 64      # copied
    assert (args["q_sb"], args["q_sh"], args["k_sh"], args["group"]) == (2 * 8 * 33 * 64, 2 * 33 * 64, 0, 2)


def test_interface_model_varlen(model):
    """THD batches with an empty and a length-1 sequence, more than 128 queries in one, GQA, causal: o
    (total_q, H, D), lse (H, total_q); q packed with k and v in one tensor (strided tokens)."""
    lens_q, lens_k = [5, 0, 1, 140], [7, 3, 1, 100]
    cu_q, cu_k = _cu(*lens_q), _cu(*lens_k)
    q = _randn(sum(lens_q), 4, 64, seed=8)
    kv = _randn(sum(lens_k), 2, 2, 64, seed=9)
    k, v = kv[:, 0], kv[:, 1]
    for causal in (False, True):
        o, lse = attention(q, k, v, causal, None, cu_q, cu_k, layout="bnhd")
        assert o.shape == (146, 4, 64) and lse.shape == (4, 146)
        _check(o, lse, q, k, v, causal, None, cu_q, cu_k)
    args = model.launches[-1]["args"]
    assert model.launches[-1]["grid"] == (2, 4, 4) and (args["n_q"], args["n_kv"]) == (140, 100)
    assert (args["q_sb"], args["k_sn"], args["lse_sb"], args["lse_sh"]) == (0, 2 * 2 * 64, 0, 146)
    assert model.built[-1][-1] is True


def test_interface_model_through_the_op_and_targets(model):
    q, k, v = _qkv(1, 2, 2, 9, 12, 64)
    o, lse = torch.ops.isagen.attention(q, k, v, True)
    _check(o, lse, q, k, v, True)
    attention(q, k, v, target="gfx950")
    assert model.built[-1][0] == "gfx950"


def test_interface_model_through_compile_and_opcheck(model):
    """torch.compile(fullgraph=True) runs the op in the compiled graph; opcheck finds the fake outputs
    like the real ones (shapes, dtypes, strides) and no input written or aliased, varlen too."""
    q, k, v = _qkv(1, 2, 1, 40, 33, 64, seed=12)
    compiled = torch.compile(lambda q, k, v: torch.ops.isagen.attention(q, k, v, True), backend="eager",
                             fullgraph=True)
    o, lse = compiled(q, k, v)
    _check(o, lse, q, k, v, True)
    launches = len(model.launches)
    assert launches == 1
    utils = ("test_schema", "test_faketensor")
    torch.library.opcheck(torch.ops.isagen.attention.default, (q, k, v, True), test_utils=utils)
    thd = [x[0].transpose(0, 1) for x in (q, k, v)]
    torch.library.opcheck(torch.ops.isagen.attention.default, (*thd, False, 0.5, _cu(10, 30), _cu(3, 30)),
                          test_utils=utils)
    assert len(model.launches) > launches + 1


# --------------------------------------------------------------------------- the kernel, in the emulator
KERNEL_CASES = [
    # target, dtype, (B, H_q, H_kv, N_q, N_kv, D), causal, varlen lengths (q, k) or None, layout
    ("gfx942", BF16, (1, 2, 2, 17, 17, 64), False, None, "bhnd"),                        # MHA
    ("gfx942", BF16, (1, 8, 2, 64, 100, 128), True, None, "bnhd"),                       # GQA, N_q < N_kv
    ("gfx950", F16, (2, 2, 1, 100, 17, 64), True, None, "bhnd"),                         # MQA, keyless rows
    ("gfx942", BF16, (1, 2, 1, 1, 1, 64), False, None, "bhnd"),                          # N = 1
    ("gfx942", BF16, (None, 2, 1, None, None, 64), True, ([5, 0, 1, 20], [7, 3, 1, 17]), "bhnd"),
    ("gfx950", F16, (None, 2, 2, None, None, 128), False, ([1, 0, 17], [17, 1, 0]), "bhnd"),
]
SLOW_CASES = [
    (target, dtype, (b, hq, hkv, n, n2, d), causal, None, layout)
    for target in ("gfx942", "gfx950") for dtype in (BF16, F16) for d in (64, 128) for causal in (False, True)
    for (b, hq, hkv, n, n2, layout) in [(2, 8, 2, 100, 64, "bnhd"), (1, 4, 4, 64, 130, "bhnd")]
] + [
    (target, dtype, (None, 4, 2, None, None, d), causal, ([100, 1, 0, 64], [64, 17, 5, 100]), "bhnd")
    for target in ("gfx942", "gfx950") for dtype in (BF16, F16) for d in (64, 128) for causal in (False, True)
]


@pytest.mark.parametrize("dtype, causal, varlen", [("bf16", False, False), ("bf16", True, True)])
def test_kernel_arguments_are_the_interface(dtype, causal, varlen):
    """The built kernel takes the arguments this front end packs (names, order, types, access) and runs
    256 work-items per workgroup."""
    kernel = isagen.build("attention_bf16", "gfx942", dtype=dtype, head_dim=64, causal=causal, varlen=varlen)

    def described(args):
        return [(a.name, a.kind, a.dtype, a.access) for a in args]
    assert described(kernel.args) == described(interface_args(dtype, varlen))
    assert tuple(kernel.launch.block) == (256, 1, 1)
    assert attn.attention_kernel("gfx942", dtype, 64, causal, varlen).code_object == kernel.code_object


def _kernel_case(target, dtype, dims, causal, varlen, layout, seed=0):
    args = kernel_inputs(dtype, dims, causal, varlen, layout, seed)
    o, lse = attention(*args, target=target, backend="emu")
    attention_tolerance_check(o, lse, *args)


@pytest.mark.parametrize("target, dtype, dims, causal, varlen, layout", KERNEL_CASES, ids=_case_id)
def test_kernel(target, dtype, dims, causal, varlen, layout):
    _kernel_case(target, dtype, dims, causal, varlen, layout)


@pytest.mark.slow
@pytest.mark.parametrize("target, dtype, dims, causal, varlen, layout", SLOW_CASES, ids=_case_id)
def test_kernel_more_shapes(target, dtype, dims, causal, varlen, layout):
    _kernel_case(target, dtype, dims, causal, varlen, layout, seed=1)


def test_kernel_on_strided_inputs():
    """q, k, v out of one packed qkv projection (bnhd views, no copy), the KV half of the heads."""
    qkv = _randn(2, 33, 3, 4, 64, seed=11)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1, :2], qkv[:, :, 2, :2]
    o, lse = attention(q, k, v, True, 0.3, layout="bnhd", backend="emu")
    attention_tolerance_check(o, lse, q, k, v, True, 0.3, layout="bnhd")


def test_kernel_through_the_op_and_torch_compile():
    q, k, v = _qkv(1, 2, 1, 40, 33, 64, seed=12)
    compiled = torch.compile(lambda q, k, v: torch.ops.isagen.attention(q, k, v, True), backend="eager",
                             fullgraph=True)
    o, lse = compiled(q, k, v)
    attention_tolerance_check(o, lse, q, k, v, True)
    torch.library.opcheck(torch.ops.isagen.attention.default, (q, k, v, True),
                          test_utils=("test_schema", "test_faketensor"))


# the remaining lengths (255, 256, 1000 for N_q and N_kv), both targets, causal and not
LONG_CASES = [(target, BF16, dims, causal, None, layout)
              for target in ("gfx942", "gfx950") for causal in (False, True)
              for dims, layout in [((1, 2, 1, 1000, 255, 128), "bhnd"), ((1, 2, 2, 256, 1000, 64), "bnhd")]]


@pytest.mark.slow
@pytest.mark.parametrize("target, dtype, dims, causal, varlen, layout", LONG_CASES, ids=_case_id)
def test_kernel_long_sequences(target, dtype, dims, causal, varlen, layout):
    _kernel_case(target, dtype, dims, causal, varlen, layout, seed=2)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("q_scale, softmax_scale, causal", [
    (12.0, None, False),       # |q.k| ~ 5e3: the row max far from 0, a near one-hot softmax
    (12.0, 1.0, True),         # the same unscaled (logits ~ 5e3) with keyless causal rows
    (1.0, 1e-30, False),       # the smallest scale: every logit ~ 0, a uniform softmax
    (30.0, 1e30, True),        # the largest: exp2 saturates to one-hot, LSE ~ 1e31
])
def test_kernel_extreme_logits_and_scales(target, q_scale, softmax_scale, causal):
    """What torch computes, and no NaN where the float64 reference has none, at the edges of the scale
    and logit range (issue 14); rows that see no key are O = 0, LSE = -inf."""
    q, k, v = _qkv(1, 2, 1, 70, 50, 64, BF16, 5)
    q = (q.float() * q_scale).bfloat16()
    k = (k.float() * q_scale).bfloat16()
    o, lse = attention(q, k, v, causal, softmax_scale, target=target, backend="emu")
    ref_o, ref_lse = attention_reference(q, k, v, causal, softmax_scale)
    assert not torch.isnan(o).any() and not torch.isnan(lse).any()
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    attention_tolerance_check(o, lse, q, k, v, causal, softmax_scale)
