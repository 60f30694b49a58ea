"""Attention forward on torch tensors: ``isagen.attention(q, k, v, causal=...) -> (o, lse)``.

    import torch, isagen
    q = torch.randn(2, 8, 1000, 128, dtype=torch.bfloat16)           # (B, H_q, N_q, D): torch SDPA's layout
    k = v = torch.randn(2, 2, 1000, 128, dtype=torch.bfloat16)       # (B, H_kv, N_kv, D): GQA, 4 query heads each
    o, lse = isagen.attention(q, k, v, causal=True)                  # o like q, lse (B, H_q, N_q) float32

The kernel is ``specs/attention_bf16.yaml`` (generator ``attention``, docs/attention.md), built per
dtype, head dim, causal and varlen (``dtype=f16`` for fp16) and kept per process.  This module turns
torch tensors of any of three layouts into its kernel arguments:

* ``layout="bhnd"`` (default): torch SDPA's (B, H, N, D); ``o`` is returned as a new contiguous
  (B, H_q, N_q, D) tensor.
* ``layout="bnhd"``: flash-attn's (B, N, H, D); ``o`` is (B, N_q, H_q, D).
* ``cu_seqlens_q``/``cu_seqlens_k`` given: flash-attn's varlen THD packing whatever ``layout`` says:
  q is (total_q, H_q, D), k and v (total_k, H_kv, D), sequence b holds tokens
  ``cu_seqlens[b]:cu_seqlens[b+1]``; ``o`` is (total_q, H_q, D) and ``lse`` (H_q, total_q), as
  ``flash_attn_varlen_func`` returns them.  The offsets are read on the host (a device sync on a GPU).

Inputs are never copied when their head dim is contiguous (stride 1): any strides along batch, heads and
sequence are passed to the kernel as they are (q, k, v sliced out of one packed qkv projection, a
transposed view, an expanded KV head).  A tensor whose head dim is strided, or whose tokens are less
than D elements apart (a broadcast sequence), is copied with ``.contiguous()``
first.  The kernel addresses each tensor with 32-bit offsets, so each must span less
than 2 GiB from its first to its last element.

Semantics (flash-attn's): ``softmax_scale`` defaults to 1/sqrt(D); query head h reads KV head
``h // (H_q // H_kv)``; causal masking is aligned to the bottom right, query i (of N_q) sees key j (of
N_kv) iff ``j <= i + N_kv - N_q``, per sequence with varlen.  ``lse`` is the natural-log
logsumexp of the scaled scores in float32.  A query row that sees no key (causal with N_q > N_kv, or
N_kv = 0) gives ``o = 0`` (torch SDPA's safe softmax since PyTorch 2.5) and ``lse = -inf``
(``torch.logsumexp`` of nothing).

Backward (issue 15): ``attention`` is differentiable (``o.backward(do)`` fills q, k and v's ``.grad``;
``lse`` is a non-differentiable output), and ``attention_backward(do, q, k, v, o, lse, ...) -> (dq, dk,
dv)`` runs the prep kernel (``attention_bwd_prep``: DELTA = rowsum(dO * O), LSE2 = LSE * log2 e, +inf for
-inf) and the two deterministic main kernels (``attention_bwd`` parts dkdv and dq); see the section
"backward" below and docs/attention.md, "Backward: Python API".

``attention_reference`` is the same function in float64 from explicit masks (the tests' reference);
``torch_attention`` is torch's own SDPA in the inputs' precision; ``attention_error_bounds`` and
``attention_tolerance_check`` hold the tolerance of flash-attn's tests (the kernel's error at most twice
torch's own, see there).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import numbers
from dataclasses import dataclass, field

import torch

from isagen.api import Kernel
from isagen.errors import LaunchError, SpecError, TargetError
from isagen.kernels.attention_bwd import BLOCK as BWD_BLOCK
from isagen.kernels.attention_prep import ROWS as PREP_ROWS
from isagen.runtime.backends import choose_backend, get_backend
from isagen.runtime.kernel_cache import cached_build, call_target

SPEC = "attention_bf16"
BLOCK_Q = 128                       # query rows per workgroup (the kernel's interface)
HEAD_DIMS = (64, 128)
DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
LAYOUTS = {"bhnd": "torch SDPA's (B, H, N, D)", "bnhd": "flash-attn's (B, N, H, D)"}
MAX_SEQLEN = 2 ** 24                # tokens per sequence, exclusive: the kernel's positions stay exact in f32
MAX_SPAN_BYTES = 2 ** 31            # the kernel's 32-bit offsets: each tensor spans less than 2 GiB
# softmax_scale: a number float32 holds as a finite normal value > 0
SCALE_MIN, SCALE_MAX = torch.finfo(torch.float32).tiny, torch.finfo(torch.float32).max

# the tolerance of flash-attn's tests (attention_error_bounds)
O_FACTOR = 2.0                      # the kernel's O error <= O_FACTOR x torch's own low-precision SDPA error ...
O_ATOL = 1e-5                       # ... + this: slack for the f32 arithmetic before O's final rounding
LSE_RTOL = 1e-3                     # |lse - ref| <= LSE_RTOL * max(1, |ref|)


def _fail(message: str):
    raise LaunchError(f"attention: {message}")


# --------------------------------------------------------------------------- reading the arguments
@dataclass
class Operand:
    """One of q, k, v as the kernel sees it: B (None for THD, where the offsets give it), H, N, D, and
    the element strides along batch, heads and sequence (0 along a batch or head dimension of size 1; D
    along a sequence of one token: the kernel's row window spans ``rows x sequence stride`` elements)."""

    name: str
    tensor: torch.Tensor
    b: int | None
    h: int
    n: int
    d: int
    strides: tuple[int, int, int]            # (batch, head, sequence)


def _stride(t: torch.Tensor, dim: int) -> int:
    return t.stride(dim) if t.shape[dim] > 1 else 0


def _seq_stride(t: torch.Tensor, dim: int) -> int:
    """The stride between tokens; one token is one row of D elements whatever torch reports."""
    return t.stride(dim) if t.shape[dim] > 1 else t.shape[-1]


def _in_place(op: Operand) -> bool:
    """Whether the kernel reads ``op`` where it is: head dim contiguous, tokens at least D apart (the
    kernel's buffer window spans whole rows: overlapping or broadcast tokens are copied)."""
    return op.tensor.stride(-1) == 1 and op.strides[2] >= op.d


def _operand(name: str, t, layout: str, varlen: bool) -> Operand:
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_nested:
        _fail(f"{name} is a nested tensor; pass a dense one (for varlen batches: THD tensors and cu_seqlens)")
    if t.layout != torch.strided:
        _fail(f"{name} has layout {t.layout}; pass a dense tensor (.to_dense())")
    if varlen:
        if t.dim() != 3:
            _fail(f"{name} has shape {tuple(t.shape)}; with cu_seqlens it must be (total_tokens, H, D), "
                  f"3 dimensions")
        return Operand(name, t, None, t.shape[1], t.shape[0], t.shape[2], (0, _stride(t, 1), _seq_stride(t, 0)))
    if t.dim() != 4:
        order = "(B, H, N, D)" if layout == "bhnd" else "(B, N, H, D)"
        _fail(f"{name} has shape {tuple(t.shape)}; layout '{layout}' takes 4 dimensions {order}")
    if layout == "bhnd":
        b, h, n, d = t.shape
        return Operand(name, t, b, h, n, d, (_stride(t, 0), _stride(t, 1), _seq_stride(t, 2)))
    b, n, h, d = t.shape
    return Operand(name, t, b, h, n, d, (_stride(t, 0), _stride(t, 2), _seq_stride(t, 1)))


@dataclass
class Problem:
    """The checked shape of one attention call."""

    q: Operand
    k: Operand
    v: Operand
    layout: str
    varlen: bool
    batch: int
    heads: int                   # H_q
    kv_heads: int                # H_kv
    head_dim: int
    total_q: int                 # tokens of q (N_q without varlen)
    total_k: int
    cu_q: torch.Tensor | None = None
    cu_k: torch.Tensor | None = None
    lens_q: list[int] = field(default_factory=list)   # per sequence (varlen, when the offsets were read)
    lens_k: list[int] = field(default_factory=list)

    @property
    def max_q(self) -> int:
        return max(self.lens_q, default=0) if self.varlen else self.q.n

    @property
    def max_k(self) -> int:
        return max(self.lens_k, default=0) if self.varlen else self.k.n

    def output_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(o's shape, lse's shape): o in q's layout, lse (B, H_q, N_q), or (H_q, total_q) with varlen."""
        h, d = self.heads, self.head_dim
        if self.varlen:
            return (self.total_q, h, d), (h, self.total_q)
        b, n = self.batch, self.q.n
        return ((b, h, n, d) if self.layout == "bhnd" else (b, n, h, d)), (b, h, n)


def _layout(layout) -> str:
    if not isinstance(layout, str) or layout not in LAYOUTS:
        known = ", ".join(f"'{k}' ({v})" for k, v in LAYOUTS.items())
        _fail(f"layout {layout!r} is not one of {known}")
    return layout


def _cu_seqlens(name: str, cu, device, total: int, read: bool) -> list[int]:
    """Check one cu_seqlens tensor; its sequence lengths when ``read`` (its values are on the host then)."""
    if not isinstance(cu, torch.Tensor):
        _fail(f"{name} must be a 1-D int32 torch.Tensor of sequence offsets, got {type(cu).__name__}")
    if cu.dtype != torch.int32:
        _fail(f"{name} has dtype {cu.dtype}; it must be torch.int32 (flash-attn's cu_seqlens)")
    if cu.dim() != 1 or cu.numel() < 1:
        _fail(f"{name} has shape {tuple(cu.shape)}; it must be 1-D with batch + 1 offsets (at least one: 0)")
    if cu.device != device:
        _fail(f"{name} is on {cu.device} but q is on {device}")
    if not read:
        return []
    offsets = [int(x) for x in cu.tolist()]
    if offsets[0] != 0:
        _fail(f"{name}[0] is {offsets[0]}; the offsets must start at 0")
    for i, (a, b) in enumerate(zip(offsets, offsets[1:])):
        if b < a:
            _fail(f"{name} decreases at index {i + 1} ({a} then {b}); the offsets must be non-decreasing")
    if offsets[-1] != total:
        what = "q" if name.endswith("_q") else "k"
        _fail(f"{name}[-1] is {offsets[-1]} but {what} has {total} tokens; the last offset must be the total")
    return [b - a for a, b in zip(offsets, offsets[1:])]


def check_problem(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, layout="bhnd", *, read_offsets: bool = True,
                  kernel: bool = True) -> Problem:
    """Check the shapes, dtypes, devices and offsets of one call (LaunchError naming the argument).

    ``read_offsets=False`` skips what needs the offsets' values (a fake tensor has none); ``kernel=False``
    skips what only the kernel needs (its dtypes and head dims: the float64 reference takes any)."""
    layout = _layout(layout)
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        given, missing = ("cu_seqlens_q", "cu_seqlens_k") if cu_seqlens_k is None else ("cu_seqlens_k",
                                                                                         "cu_seqlens_q")
        _fail(f"{given} is given but {missing} is not; varlen needs both")
    varlen = cu_seqlens_q is not None
    ops = [_operand(n, t, layout, varlen) for n, t in (("q", q), ("k", k), ("v", v))]
    oq, ok_, ov = ops
    for o in (ok_, ov):
        if o.tensor.dtype != oq.tensor.dtype:
            _fail(f"{o.name} has dtype {o.tensor.dtype} but q has {oq.tensor.dtype}")
        if o.tensor.device != oq.tensor.device:
            _fail(f"{o.name} is on {o.tensor.device} but q is on {oq.tensor.device}")
    if kernel and oq.tensor.dtype not in DTYPES:
        _fail(f"q has dtype {oq.tensor.dtype}; the kernel takes {' or '.join(map(str, DTYPES))}")
    if not kernel and not oq.tensor.dtype.is_floating_point:
        _fail(f"q has dtype {oq.tensor.dtype}; expected a floating-point tensor")
    if kernel and oq.d not in HEAD_DIMS:
        _fail(f"q has head dim {oq.d}; the kernel supports {' and '.join(map(str, HEAD_DIMS))}")
    for o in (ok_, ov):
        if o.d != oq.d:
            _fail(f"{o.name} has head dim {o.d} but q has {oq.d}; they must be equal")
    if (ov.b, ov.h, ov.n) != (ok_.b, ok_.h, ok_.n):
        _fail(f"v has shape {tuple(ov.tensor.shape)} but k has {tuple(ok_.tensor.shape)}; they must have the "
              f"same batch size, heads and sequence length")
    if not varlen and ok_.b != oq.b:
        _fail(f"k has batch size {ok_.b} but q has {oq.b}")
    if ok_.h == 0 and oq.h > 0:
        _fail(f"k has 0 heads but q has {oq.h}")
    if ok_.h and oq.h % ok_.h:
        _fail(f"q has {oq.h} heads, not a multiple of k's {ok_.h} (each KV head serves H_q / H_kv query heads)")
    lens_q: list[int] = []
    lens_k: list[int] = []
    batch = oq.b or 0
    if varlen:
        device = oq.tensor.device
        lens_q = _cu_seqlens("cu_seqlens_q", cu_seqlens_q, device, oq.n, read_offsets)
        lens_k = _cu_seqlens("cu_seqlens_k", cu_seqlens_k, device, ok_.n, read_offsets)
        if cu_seqlens_q.numel() != cu_seqlens_k.numel():
            _fail(f"cu_seqlens_q has {cu_seqlens_q.numel() - 1} sequences but cu_seqlens_k has "
                  f"{cu_seqlens_k.numel() - 1}")
        batch = cu_seqlens_q.numel() - 1
    return Problem(oq, ok_, ov, layout, varlen, batch, oq.h, ok_.h, oq.d, oq.n, ok_.n,
                   cu_seqlens_q, cu_seqlens_k, lens_q, lens_k)


def check_scale(softmax_scale, head_dim: int) -> float:
    """``softmax_scale``, or 1/sqrt(D) for None: a real number float32 holds as a normal value > 0."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim) if head_dim else 1.0
    if isinstance(softmax_scale, torch.Tensor):
        _fail("softmax_scale must be a Python number, got a torch.Tensor (pass .item())")
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
        _fail(f"softmax_scale must be a number, got {type(softmax_scale).__name__} {softmax_scale!r:.40}")
    scale = float(softmax_scale)
    if not SCALE_MIN <= scale <= SCALE_MAX:
        _fail(f"softmax_scale={scale!r}: expected a finite number > 0 that float32 holds "
              f"({SCALE_MIN:.3g} to {SCALE_MAX:.3g})")
    return scale


def _span(t: torch.Tensor) -> int:
    """Elements from the first to the last element of ``t`` (0 when it has none)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D contiguous view of ``t``'s storage from its first to its last element: what the kernel
    addresses through the strides (nothing is copied)."""
    return torch.as_strided(t, (_span(t),), (1,), t.storage_offset())


def _check_kernel_limits(p: Problem) -> None:
    for name, n in (("q", p.max_q), ("k", p.max_k)):
        if n >= MAX_SEQLEN:
            _fail(f"{name} has a sequence of {n} tokens; the kernel takes fewer than 2**24 ({MAX_SEQLEN}) per "
                  f"sequence")
    o_shape, lse_shape = p.output_shapes()
    itemsize = p.q.tensor.element_size()
    spans = [(o.name, _span(o.tensor) * itemsize) for o in (p.q, p.k, p.v)]
    spans += [("o", math.prod(o_shape) * itemsize), ("lse", math.prod(lse_shape) * 4)]
    for name, nbytes in spans:
        if nbytes >= MAX_SPAN_BYTES:
            _fail(f"{name} spans {nbytes / 2**30:.2f} GiB from its first to its last element; the kernel's 32-bit "
                  f"offsets reach less than 2 GiB (split the batch or the heads)")


# --------------------------------------------------------------------------- the kernel
def attention_kernel(target: str, dtype: str, head_dim: int, causal: bool, varlen: bool) -> Kernel:
    """The built attention kernel for these parameters (built once per process, then reused)."""
    return cached_build(SPEC, target, dtype=dtype, head_dim=head_dim, causal=causal, varlen=varlen)


def _target(target, backend_name: str, device: torch.device) -> str:
    return call_target(target, backend_name, device, "attention")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              softmax_scale: float | None = None, cu_seqlens_q: torch.Tensor | None = None,
              cu_seqlens_k: torch.Tensor | None = None, layout: str = "bhnd", target: str | None = None,
              backend: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward: ``(o, lse)`` with ``o = softmax(q k^T * softmax_scale + mask) v``.

    Differentiable: when q, k or v requires grad (and grad mode is on), ``o.backward(do)`` runs
    ``attention_backward`` (same target and backend) and fills their ``.grad``.  ``lse`` is returned
    as a non-differentiable output: a loss that reaches it contributes no gradient through it
    (flash-attn's convention).

    ``q`` (B, H_q, N_q, D), ``k``/``v`` (B, H_kv, N_kv, D) in ``layout="bhnd"`` (torch SDPA's), or
    (B, N, H, D) in ``"bnhd"`` (flash-attn's); with ``cu_seqlens_q``/``cu_seqlens_k`` (int32, batch + 1
    offsets each, flash-attn's varlen) q is (total_q, H_q, D) and k/v (total_k, H_kv, D) whatever ``layout``
    says.  bf16 or fp16, D 64 or 128, H_q a multiple of H_kv (GQA/MQA).  ``causal``: bottom-right
    aligned, query i sees key j iff j <= i + N_kv - N_q.  ``softmax_scale``: default 1/sqrt(D), else a
    finite number > 0 that float32 holds.

    Returns ``o`` (new, q's dtype: (B, H_q, N_q, D) contiguous, (B, N_q, H_q, D) for bnhd, (total_q, H_q,
    D) for varlen) and ``lse`` (float32 natural-log logsumexp of the scaled scores: (B, H_q, N_q), or
    (H_q, total_q) for varlen).  A row that sees no key gives o = 0 and lse = -inf.

    Strides along batch, heads and sequence are used as they are (nothing is copied); a head dim of
    stride != 1, or tokens less than D elements apart, is copied with ``.contiguous()``.
    ``target``: gfx942 or gfx950, default the GPU's
    architecture on hip, else gfx942 (the emulator runs either).  ``backend``: hip or emu, default as for
    ``Kernel.run`` (``ISAGEN_BACKEND``, else hip on a supported AMD GPU, else emu).

    A mistake is one ``LaunchError`` naming the argument: dtypes, devices, dimensions, head dims, head
    counts, batch sizes, layout, cu_seqlens (int32, 1-D, from 0, non-decreasing, ending at the token
    count, as many for q as for k), softmax_scale, a sequence of 2**24 tokens or more, a tensor spanning
    2 GiB or more.  See docs/attention.md."""
    args = (q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout, target, backend)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v)):
        return _AttentionFunction.apply(*args)
    return _attention(*args)


def _attention(q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None, cu_seqlens_k=None, layout="bhnd",
               target=None, backend=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``attention`` without autograd (the torch op's implementation and the autograd forward)."""
    if not isinstance(causal, bool):
        _fail(f"causal must be True or False, got {type(causal).__name__} {causal!r:.40}")
    p = check_problem(q, k, v, cu_seqlens_q, cu_seqlens_k, layout)
    scale = check_scale(softmax_scale, p.head_dim)
    device = p.q.tensor.device
    try:
        backend_name = choose_backend(backend)
    except LaunchError as e:
        raise LaunchError(f"attention: {e}") from None
    tgt = _target(target, backend_name, device)
    # a head dim of stride != 1, or tokens closer than D elements, the kernel cannot read in place: copied
    p.q, p.k, p.v = (op if _in_place(op) else _operand(op.name, op.tensor.contiguous(), p.layout, p.varlen)
                     for op in (p.q, p.k, p.v))
    _check_kernel_limits(p)

    o_shape, lse_shape = p.output_shapes()
    o = torch.empty(o_shape, dtype=p.q.tensor.dtype, device=device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=device)
    if o.numel() == 0:                     # no batch, no head or no query: nothing to compute
        return o, lse
    if p.total_k == 0:                     # no key anywhere: every row sees none
        return o.zero_(), lse.fill_(-math.inf)
    be = get_backend(backend_name)
    for name, t in (("q", q), ("k", k), ("v", v)):
        try:
            be.check_device(name, t)
        except LaunchError as e:
            raise LaunchError(f"attention: {e}") from None

    o_op = _operand("o", o, p.layout, p.varlen)
    lse_strides = (0, _stride(lse, 0)) if p.varlen else (_stride(lse, 0), _stride(lse, 1))
    kernel = attention_kernel(tgt, DTYPES[p.q.tensor.dtype], p.head_dim, causal, p.varlen)
    tensors = {"Q": _flat(p.q.tensor), "K": _flat(p.k.tensor), "V": _flat(p.v.tensor), "O": _flat(o),
               "LSE": _flat(lse)}
    if p.cu_q is not None and p.cu_k is not None:
        tensors["cu_seqlens_q"] = p.cu_q.contiguous()
        tensors["cu_seqlens_k"] = p.cu_k.contiguous()
    values: dict = dict(tensors)
    values.update(n_q=p.max_q, n_kv=p.max_k, group=p.heads // p.kv_heads, softmax_scale=scale,
                  lse_sb=lse_strides[0], lse_sh=lse_strides[1])
    for prefix, op in (("q", p.q), ("k", p.k), ("v", p.v), ("o", o_op)):
        values.update(zip((f"{prefix}_sb", f"{prefix}_sh", f"{prefix}_sn"), op.strides))
    grid = (-(-p.max_q // BLOCK_Q), p.heads, p.batch)
    kernel.launch_with(tensors, values, grid, ["O", "LSE"], backend=backend_name)
    return o, lse


def output_like(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, layout="bhnd"):
    """Empty (o, lse) of the shapes and dtypes ``attention`` returns, from the inputs' metadata only
    (the torch op's fake implementation: it works on fake and meta tensors)."""
    p = check_problem(q, k, v, cu_seqlens_q, cu_seqlens_k, layout, read_offsets=False)
    o_shape, lse_shape = p.output_shapes()
    return q.new_empty(o_shape), q.new_empty(lse_shape, dtype=torch.float32)


# --------------------------------------------------------------------------- references
# float64 scores a reference makes at once (1 GiB): at full size a (B, H_q, N_q, N_kv) score tensor is
# 32 GiB (16x64x2048x2048), and each step of the formula makes another; see ``by_score_chunks``
SCORE_CHUNK = 2 ** 27


def score_chunks(b: int, h_kv: int, group: int, n_q: int, n_kv: int) -> list[list[tuple[slice, slice]]]:
    """How ``by_score_chunks`` cuts (B, H_kv): rows of (batch slice, KV-head slice) pieces, a row per batch
    slice.  Each piece is as many whole batch elements as keep their ``b' * h_kv * group * n_q * n_kv``
    scores within ``SCORE_CHUNK``; where one batch element's do not fit, a row per batch element of as
    many KV heads as fit (at least one: a KV head's query heads stay together, so GQA sums stay whole)."""
    per_kv_head = group * n_q * n_kv
    if b * h_kv * per_kv_head <= SCORE_CHUNK:
        return [[(slice(0, b), slice(0, h_kv))]]
    if h_kv * per_kv_head <= SCORE_CHUNK:
        step = SCORE_CHUNK // (h_kv * per_kv_head)
        return [[(slice(b0, min(b0 + step, b)), slice(0, h_kv))] for b0 in range(0, b, step)]
    step = max(1, SCORE_CHUNK // per_kv_head)
    return [[(slice(b0, b0 + 1), slice(k0, min(k0 + step, h_kv))) for k0 in range(0, h_kv, step)]
            for b0 in range(b)]


def by_score_chunks(fn, q_like: tuple, kv_like: tuple, group: int) -> tuple:
    """``fn(*q_like, *kv_like)`` evaluated a chunk of ``score_chunks`` at a time, its outputs put back
    together: ``q_like`` are (B, H_q, N_q, ...) tensors, ``kv_like`` (B, H_kv, N_kv, ...) ones with
    H_q = group * H_kv (query head h reads KV head h // group); ``fn`` returns a tuple of (B', heads,
    ...) tensors, heads the chunk's query heads or its KV heads.  Every chunk is the whole formula on
    its slices, so the outputs are the whole-tensor formula's (each (batch, head) is independent)."""
    b, h_kv = kv_like[0].shape[:2]
    rows = score_chunks(b, h_kv, group, q_like[0].shape[2], kv_like[0].shape[2])
    if len(rows) == 1 and len(rows[0]) == 1:
        return fn(*q_like, *kv_like)

    def piece(bs: slice, ks: slice) -> tuple:
        qs = slice(ks.start * group, ks.stop * group)
        return fn(*(t[bs, qs] for t in q_like), *(t[bs, ks] for t in kv_like))

    def cat(outs: list, dim: int) -> tuple:
        return tuple(torch.cat(ts, dim) for ts in zip(*outs))

    return cat([cat([piece(bs, ks) for bs, ks in row], 1) for row in rows], 0)


def _sequences(p: Problem, x: torch.Tensor, which: str) -> list[torch.Tensor]:
    """``x`` as a list of (B', H, N, D) blocks of one sequence length: the whole batch at once, or one
    sequence per block with varlen."""
    if not p.varlen:
        return [x if p.layout == "bhnd" else x.transpose(1, 2)]
    offsets = p.cu_q if which == "q" else p.cu_k
    assert offsets is not None           # varlen: check_problem saw both
    cu = offsets.tolist()
    return [x[a:b].transpose(0, 1).unsqueeze(0) for a, b in zip(cu, cu[1:])]


def causal_mask(n_q: int, n_kv: int, device=None) -> torch.Tensor:
    """(n_q, n_kv) bool, True where query i sees key j: ``j <= i + n_kv - n_q`` (bottom-right aligned)."""
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_kv, device=device)[None, :]
    return j <= i + (n_kv - n_q)


def _assemble(p: Problem, blocks: list[torch.Tensor], lses: list[torch.Tensor]):
    """Per-block outputs (B', H, N, D) and (B', H, N) back to attention's output layouts."""
    if not p.varlen:
        o = blocks[0] if p.layout == "bhnd" else blocks[0].transpose(1, 2)
        return o.contiguous(), lses[0]
    o = torch.cat([b[0].transpose(0, 1) for b in blocks], 0) if blocks else None
    lse = torch.cat([x[0] for x in lses], 1) if lses else None
    o_shape, lse_shape = p.output_shapes()
    if o is None or lse is None:
        o = torch.zeros(o_shape, dtype=torch.float64, device=p.q.tensor.device)
        lse = torch.zeros(lse_shape, dtype=torch.float64, device=p.q.tensor.device)
    return o, lse


def attention_reference(q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
                        layout="bhnd"):
    """``attention`` in float64, from its definition: scores ``q k^T * scale`` with an explicit boolean
    mask (bottom-right causal), K/V heads repeated for GQA (``repeat_interleave``), softmax, ``@ v``;
    per sequence with varlen, a chunk of heads at a time (``by_score_chunks``).  Same arguments and
    output layouts as ``attention``; any floating dtype and head dim.  ``lse`` is ``torch.logsumexp`` of
    the masked scores (-inf for a row that sees no key), and such a row's ``o`` is 0, as torch's SDPA
    gives (its safe softmax)."""
    p = check_problem(q, k, v, cu_seqlens_q, cu_seqlens_k, layout, kernel=False)
    scale = check_scale(softmax_scale, p.head_dim)
    group = p.heads // p.kv_heads if p.kv_heads else 1
    blocks, lses = [], []
    for qb, kb, vb in zip(*(_sequences(p, t.double(), w) for t, w in ((q, "q"), (k, "k"), (v, "k")))):
        o, lse = by_score_chunks(functools.partial(_reference_chunk, scale, causal, group), (qb,), (kb, vb), group)
        blocks.append(o)
        lses.append(lse)
    return _assemble(p, blocks, lses)


def _reference_chunk(scale, causal, group, qb, kb, vb):
    """``attention_reference``'s (o, lse) of (B', H, N, D) blocks (float64)."""
    kb, vb = kb.repeat_interleave(group, dim=1), vb.repeat_interleave(group, dim=1)
    s = (qb @ kb.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], s.device), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    w = torch.exp(s - lse[..., None])
    w = torch.where(torch.isinf(lse)[..., None], torch.zeros_like(w), w)     # no key: o = 0
    return w @ vb, lse


def torch_attention(q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
                    layout="bhnd"):
    """``o`` of torch's own ``scaled_dot_product_attention`` in the inputs' dtype, with the same explicit
    mask (per sequence with varlen, a chunk of heads at a time): the baseline of the tolerance
    (``attention_error_bounds``)."""
    p = check_problem(q, k, v, cu_seqlens_q, cu_seqlens_k, layout, kernel=False)
    scale = check_scale(softmax_scale, p.head_dim)
    group = p.heads // p.kv_heads if p.kv_heads else 1
    blocks = []
    for qb, kb, vb in zip(*(_sequences(p, t, w) for t, w in ((q, "q"), (k, "k"), (v, "k")))):
        blocks += by_score_chunks(functools.partial(_sdpa_chunk, scale, causal, group), (qb,), (kb, vb), group)
    if not p.varlen:
        o = blocks[0] if p.layout == "bhnd" else blocks[0].transpose(1, 2)
        return o.contiguous()
    if not blocks:
        return q.new_zeros(p.output_shapes()[0])
    return torch.cat([b[0].transpose(0, 1) for b in blocks], 0)


def _sdpa_chunk(scale, causal, group, qb, kb, vb):
    """``torch_attention``'s o of (B', H, N, D) blocks, as a 1-tuple."""
    kb, vb = kb.repeat_interleave(group, dim=1), vb.repeat_interleave(group, dim=1)
    mask = causal_mask(qb.shape[-2], kb.shape[-2], qb.device) if causal else None
    return (torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale),)


def attention_error_bounds(q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
                           layout="bhnd", *, factor: float = O_FACTOR, o_atol: float = O_ATOL,
                           lse_rtol: float = LSE_RTOL):
    """(o bound, lse bound): how far ``attention``'s outputs may be from ``attention_reference``'s.

    flash-attn's convention: the kernel's largest O error is at most ``factor`` (2) times the largest
    error of torch's own SDPA in the inputs' dtype (``torch_attention``, same mask) plus ``o_atol``
    (a scalar bound); each lse within ``lse_rtol * max(1, |ref|)`` (relative, absolute below 1)."""
    ref_o, ref_lse = attention_reference(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout)
    low = torch_attention(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout)
    err = (low.double() - ref_o).abs()
    torch_err = err.max() if err.numel() else err.new_zeros(())
    o_bound = factor * torch_err + o_atol
    lse_bound = lse_rtol * ref_lse.abs().clamp_min(1.0)
    return o_bound, torch.where(torch.isinf(ref_lse), torch.zeros_like(lse_bound), lse_bound)


def attention_tolerance_check(o, lse, q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None,
                              cu_seqlens_k=None, layout="bhnd", **bounds) -> dict:
    """Assert that ``(o, lse)`` (``attention``'s outputs for these arguments) are within
    ``attention_error_bounds`` of ``attention_reference``; -inf lse exactly where the reference has it.
    Returns the errors found (``o_err``, ``o_bound``, ``lse_err``); raises AssertionError naming the
    first element out of bounds."""
    ref_o, ref_lse = attention_reference(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout)
    o_bound, lse_bound = attention_error_bounds(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k,
                                                layout, **bounds)
    if tuple(o.shape) != tuple(ref_o.shape) or tuple(lse.shape) != tuple(ref_lse.shape):
        raise AssertionError(f"shapes: o {tuple(o.shape)} lse {tuple(lse.shape)}, expected "
                             f"{tuple(ref_o.shape)} and {tuple(ref_lse.shape)}")
    if lse.dtype != torch.float32 or o.dtype != q.dtype:
        raise AssertionError(f"dtypes: o {o.dtype} lse {lse.dtype}, expected {q.dtype} and torch.float32")
    o_err = (o.detach().cpu().double() - ref_o.cpu()).abs()
    bad = ~(o_err <= o_bound.cpu())                 # NaN is bad too
    if bad.any():
        at = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(f"o{list(at)} = {float(o[at]):.6g}, reference {float(ref_o[at]):.6g}: error "
                             f"{float(o_err[at]):.3g} > bound {float(o_bound):.3g} (2 x torch's own "
                             f"{q.dtype} error + {O_ATOL:g}); {int(bad.sum())} of {bad.numel()} elements")
    got = lse.detach().cpu().double()
    want = ref_lse.cpu()
    lse_err = torch.where(torch.isinf(want) & (got == want), torch.zeros_like(got), (got - want).abs())
    bad = ~(lse_err <= lse_bound.cpu())
    if bad.any():
        at = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(f"lse{list(at)} = {float(got[at]):.7g}, reference {float(want[at]):.7g}: error "
                             f"{float(lse_err[at]):.3g} > bound {float(lse_bound[at]):.3g}; "
                             f"{int(bad.sum())} of {bad.numel()} elements")
    return {"o_err": float(o_err.max()) if o_err.numel() else 0.0, "o_bound": float(o_bound),
            "lse_err": float(lse_err.max()) if lse_err.numel() else 0.0}


# =========================================================================== backward
# ``attention_backward(do, q, k, v, o, lse, ...) -> (dq, dk, dv)``: three kernels, no atomics.
#   1. ``attention_bwd_prep`` (kernels/attention_prep.py): DELTA = rowsum(dO * O) and LSE2 = LSE * log2(e)
#      (+inf where LSE is -inf) per query row, fp32, in fresh tensors of lse's shape;
#   2. ``attention_bwd`` part dkdv: one workgroup per BWD_BLOCK (64) keys of one (batch, KV head) loops
#      over the query tiles and over every query head of its GQA group, dK and dV accumulated in registers;
#   3. ``attention_bwd`` part dq: one workgroup per BWD_BLOCK queries of one (batch, query head) loops over
#      the KV tiles.
# Both recompute P = exp2(S * scale * log2(e) - LSE2) from Q, K and LSE2.  Every output element is
# written by exactly one workgroup in a fixed order: two runs give the same bits.
BWD_SPEC = "attention_bwd_bf16"
PREP_SPEC = "attention_bwd_prep_bf16"
# rows per workgroup (the kernels' interface): PREP_ROWS query rows of the prep kernel, BWD_BLOCK resident
# keys (dkdv) or queries (dq) of the main kernels
GRAD_FACTOR = 2.0                   # dq, dk, dv error <= GRAD_FACTOR x torch's own low-precision backward's ...
GRAD_ATOL = 1e-4                    # ... + this (fp32 sums whose exact value torch may hit by luck)


def _fail_bwd(message: str):
    raise LaunchError(f"attention_backward: {message}")


@contextlib.contextmanager
def _renamed(name: str):
    """The forward's checks, reporting as ``name:`` instead of ``attention:`` (one line, no traceback)."""
    try:
        yield
    except (LaunchError, TargetError) as e:
        text = str(e)
        text = text[len("attention: "):] if text.startswith("attention: ") else text
        raise type(e)(f"{name}: {text}") from None


def prep_kernel(target: str, dtype: str, head_dim: int, varlen: bool) -> Kernel:
    """The built prep kernel (DELTA, LSE2) for these parameters (built once per process)."""
    return cached_build(PREP_SPEC, target, dtype=dtype, head_dim=head_dim, varlen=varlen)


def backward_kernel(target: str, dtype: str, head_dim: int, causal: bool, varlen: bool, part: str,
                    dq_atomic: bool = False) -> Kernel:
    """The built backward kernel ``part`` (dkdv or dq; dkdv with ``dq_atomic`` adds dQ by atomics) for these
    parameters (built once per process)."""
    return cached_build(BWD_SPEC, target, dtype=dtype, head_dim=head_dim, causal=causal, varlen=varlen, part=part,
                   dq_atomic=dq_atomic)


@dataclass
class BackwardProblem:
    """The checked shapes of one backward call: the forward's problem and o, do, lse."""

    p: Problem
    o: Operand
    do: Operand
    lse: torch.Tensor


def _like_q(p: Problem, name: str, t, what: str, ref_name: str, ref) -> Operand:
    """``t`` (o or do): a tensor of ``ref``'s shape, dtype and device."""
    if t is None:
        _fail_bwd(f"{name} is None; pass {what}")
    with _renamed("attention_backward"):
        op = _operand(name, t, p.layout, p.varlen)
    if tuple(t.shape) != tuple(ref.shape):
        _fail_bwd(f"{name} has shape {tuple(t.shape)} but {ref_name} has {tuple(ref.shape)}; {name} is {what}, "
                  f"shaped like {ref_name}")
    if t.dtype != ref.dtype:
        _fail_bwd(f"{name} has dtype {t.dtype} but {ref_name} has {ref.dtype}")
    if t.device != ref.device:
        _fail_bwd(f"{name} is on {t.device} but {ref_name} is on {ref.device}")
    return op


def check_backward(do, q, k, v, o, lse, cu_seqlens_q=None, cu_seqlens_k=None, layout="bhnd", *,
                   read_offsets: bool = True) -> BackwardProblem:
    """Check one backward call (``LaunchError`` naming the argument, ``attention_backward:``): everything
    ``check_problem`` checks, then o shaped like q (dtype, device), do like o, lse float32 of the
    forward's lse shape on q's device."""
    with _renamed("attention_backward"):
        p = check_problem(q, k, v, cu_seqlens_q, cu_seqlens_k, layout, read_offsets=read_offsets)
    o_op = _like_q(p, "o", o, "attention's output", "q", q)
    do_op = _like_q(p, "do", do, "the gradient of attention's output", "o", o)
    lse_shape = p.output_shapes()[1]
    if lse is None:
        _fail_bwd("lse is None; pass the lse that isagen.attention returned with o (the backward recomputes "
                  "the probabilities from it)")
    if not isinstance(lse, torch.Tensor):
        _fail_bwd(f"lse must be a torch.Tensor, got {type(lse).__name__}")
    if lse.layout != torch.strided or lse.is_nested:
        _fail_bwd("lse must be a dense tensor")
    if lse.dtype != torch.float32:
        _fail_bwd(f"lse has dtype {lse.dtype}; it must be torch.float32 (attention's lse)")
    if tuple(lse.shape) != lse_shape:
        form = "(H_q, total_q)" if p.varlen else "(B, H_q, N_q)"
        _fail_bwd(f"lse has shape {tuple(lse.shape)}; attention's lse for these inputs is {lse_shape} {form}")
    if lse.device != q.device:
        _fail_bwd(f"lse is on {lse.device} but q is on {q.device}")
    return BackwardProblem(p, o_op, do_op, lse)


def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                       lse: torch.Tensor, causal: bool = False, softmax_scale: float | None = None,
                       cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_k: torch.Tensor | None = None,
                       layout: str = "bhnd", target: str | None = None, backend: str | None = None,
                       deterministic: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention backward: ``(dq, dk, dv)``, the gradients of ``attention``'s ``o`` against ``do``.

    ``o`` and ``lse`` are what ``attention(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k,
    layout)`` returned; every argument means what it means there (layouts, varlen, strides, GQA, causal,
    softmax_scale, target, backend).  ``do`` is shaped like ``o`` (same dtype and device).  Returns new
    tensors: ``dq`` shaped like q, ``dk``/``dv`` like k/v, contiguous, in q's dtype.  A query row that saw no
    key (lse = -inf) contributes nothing: its dq row is 0.  No key anywhere: dq = 0; no query: dk = dv = 0.

    Tensors are read where they are when their head dim is contiguous (any other strides); one whose
    head dim is strided (an expanded gradient, ``o.sum().backward()``'s do) or whose tokens are closer
    than D elements is copied first, as are an lse that is not contiguous.  ``deterministic=True`` (the
    default): no atomics, a separate dq kernel, the same bits every run.  ``deterministic=False``: the dkdv
    kernel adds dQ into an fp32 buffer with ``buffer_atomic_add_f32`` (no dq kernel; the order of the sums,
    so the last bits, depends on the GPU's scheduling); it needs LDS that gfx942 has only for D=64.
    Mistakes are one ``LaunchError`` line starting ``attention_backward:``."""
    if not isinstance(causal, bool):
        _fail_bwd(f"causal must be True or False, got {type(causal).__name__} {causal!r:.40}")
    if not isinstance(deterministic, bool):
        _fail_bwd(f"deterministic must be True or False, got {type(deterministic).__name__} {deterministic!r:.40}")
    bp = check_backward(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, layout)
    p = bp.p
    with _renamed("attention_backward"):
        scale = check_scale(softmax_scale, p.head_dim)
        try:
            backend_name = choose_backend(backend)
        except LaunchError as e:
            raise LaunchError(f"attention_backward: {e}") from None
        tgt = _target(target, backend_name, p.q.tensor.device)
    p.q, p.k, p.v, bp.o, bp.do = (op if _in_place(op) else _operand(op.name, op.tensor.contiguous(), p.layout, p.varlen)
                                  for op in (p.q, p.k, p.v, bp.o, bp.do))
    lse = bp.lse if bp.lse.is_contiguous() else bp.lse.contiguous()
    with _renamed("attention_backward"):
        _check_kernel_limits(p)
    itemsize = p.q.tensor.element_size()
    for op in (bp.o, bp.do):
        if _span(op.tensor) * itemsize >= MAX_SPAN_BYTES:
            _fail_bwd(f"{op.name} spans {_span(op.tensor) * itemsize / 2**30:.2f} GiB from its first to its last "
                      f"element; the kernels' 32-bit offsets reach less than 2 GiB (split the batch or the heads)")

    device, dtype = p.q.tensor.device, p.q.tensor.dtype
    dq = torch.empty(tuple(q.shape), dtype=dtype, device=device)
    dk = torch.empty(tuple(k.shape), dtype=dtype, device=device)
    dv = torch.empty(tuple(v.shape), dtype=dtype, device=device)
    if p.total_q == 0 or p.total_k == 0 or p.heads == 0 or p.batch == 0:
        # nothing to compute: no query (dk = dv = 0), no key (dq = 0: every row sees none), or empty
        return dq.zero_(), dk.zero_(), dv.zero_()
    be = get_backend(backend_name)
    for name, t in (("do", do), ("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse)):
        try:
            be.check_device(name, t)
        except LaunchError as e:
            raise LaunchError(f"attention_backward: {e}") from None

    # 1. DELTA and LSE2, fresh fp32 tensors of lse's shape (and strides)
    delta = torch.empty(tuple(lse.shape), dtype=torch.float32, device=device)
    lse2 = torch.empty_like(delta)
    lse_strides = (0, _stride(delta, 0)) if p.varlen else (_stride(delta, 0), _stride(delta, 1))
    dtype_name = DTYPES[dtype]
    cu: dict = {}
    if p.cu_q is not None and p.cu_k is not None:
        cu = {"cu_seqlens_q": p.cu_q.contiguous(), "cu_seqlens_k": p.cu_k.contiguous()}
    prep = prep_kernel(tgt, dtype_name, p.head_dim, p.varlen)
    tensors = {"O": _flat(bp.o.tensor), "dO": _flat(bp.do.tensor), "LSE": _flat(lse), "DELTA": _flat(delta),
               "LSE2": _flat(lse2)}
    if cu:
        tensors["cu_seqlens_q"] = cu["cu_seqlens_q"]
    values: dict = dict(tensors)
    values.update(n_q=p.max_q, lse_sb=lse_strides[0], lse_sh=lse_strides[1])
    for prefix, op in (("o", bp.o), ("do", bp.do)):
        values.update(zip((f"{prefix}_sb", f"{prefix}_sh", f"{prefix}_sn"), op.strides))
    prep.launch_with(tensors, values, (-(-p.max_q // PREP_ROWS), p.heads, p.batch), ["DELTA", "LSE2"],
                     backend=backend_name)

    # 2. and 3. dK, dV per KV block; dQ per query block
    common = {"Q": _flat(p.q.tensor), "K": _flat(p.k.tensor), "V": _flat(p.v.tensor), "dO": _flat(bp.do.tensor),
              "DELTA": _flat(delta), "LSE2": _flat(lse2), **cu}
    scalars: dict = {"n_q": p.max_q, "n_kv": p.max_k, "group": p.heads // p.kv_heads, "softmax_scale": scale,
                     "lse_sb": lse_strides[0], "lse_sh": lse_strides[1]}
    for prefix, op in (("q", p.q), ("k", p.k), ("v", p.v), ("do", bp.do)):
        scalars.update(zip((f"{prefix}_sb", f"{prefix}_sh", f"{prefix}_sn"), op.strides))
    dkdv_grid = (-(-p.max_k // BWD_BLOCK), p.kv_heads, p.batch)
    parts: tuple[tuple[str, dict, tuple[int, int, int]], ...]
    if deterministic:
        parts = (("dkdv", {"dK": dk, "dV": dv}, dkdv_grid),
                 ("dq", {"dQ": dq}, (-(-p.max_q // BWD_BLOCK), p.heads, p.batch)))
    else:
        dq_acc = torch.zeros(tuple(q.shape), dtype=torch.float32, device=device)   # the atomics add into it
        parts = (("dkdv", {"dK": dk, "dV": dv, "dQacc": dq_acc}, dkdv_grid),)
    for part, outs, grid in parts:
        try:
            kernel = backward_kernel(tgt, dtype_name, p.head_dim, causal, p.varlen, part,
                                     dq_atomic=not deterministic)
        except SpecError as e:
            raise LaunchError(f"attention_backward: deterministic=False: {str(e).split(': ', 2)[-1]}") from None
        tensors = {**common, **{n: _flat(t) for n, t in outs.items()}}
        values = {**tensors, **scalars}
        for name, t in outs.items():
            strides = _operand(name, t, p.layout, p.varlen).strides
            values.update(zip((f"{name.lower()}_sb", f"{name.lower()}_sh", f"{name.lower()}_sn"), strides))
        kernel.launch_with(tensors, values, grid, list(outs), backend=backend_name)
    if not deterministic:
        dq.copy_(dq_acc)              # fp32 sums -> q's dtype, rounded to nearest even
    if p.varlen:        # sequences with no query (no key): their dk, dv (dq) rows are 0 whatever a kernel did
        cq, ck = [0, *itertools.accumulate(p.lens_q)], [0, *itertools.accumulate(p.lens_k)]
        for b, (nq, nk) in enumerate(zip(p.lens_q, p.lens_k)):
            if nq == 0 and nk:
                dk[ck[b]:ck[b + 1]] = 0
                dv[ck[b]:ck[b + 1]] = 0
            if nk == 0 and nq:
                dq[cq[b]:cq[b + 1]] = 0
    return dq, dk, dv


def gradients_like(do, q, k, v, o, lse, cu_seqlens_q=None, cu_seqlens_k=None, layout="bhnd"):
    """Empty ``(dq, dk, dv)`` of the shapes and dtypes ``attention_backward`` returns, from the inputs'
    metadata only (the torch op's fake implementation)."""
    check_backward(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, layout, read_offsets=False)
    return q.new_empty(tuple(q.shape)), k.new_empty(tuple(k.shape)), v.new_empty(tuple(v.shape))


class _AttentionFunction(torch.autograd.Function):
    """``attention`` with ``attention_backward`` as its gradient (lse: non-differentiable)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout, target, backend):
        o, lse = _attention(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout, target, backend)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.extra = (causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout, target, backend)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        causal, scale, cu_q, cu_k, layout, target, backend = ctx.extra
        dq, dk, dv = attention_backward(do, q, k, v, o, lse, causal, scale, cu_q, cu_k, layout, target, backend)
        return dq, dk, dv, None, None, None, None, None, None, None


# --------------------------------------------------------------------------- backward references
def _rows_back(p: Problem, blocks: list[torch.Tensor], which: str) -> torch.Tensor:
    """Per-sequence (B', H, N, D) gradient blocks back to the layout of q (``which`` = "q") or k."""
    shape = tuple((p.q if which == "q" else p.k).tensor.shape)
    if not p.varlen:
        g = blocks[0] if p.layout == "bhnd" else blocks[0].transpose(1, 2)
        return g.contiguous()
    if not blocks:
        return torch.zeros(shape, dtype=torch.float64, device=p.q.tensor.device)
    return torch.cat([b[0].transpose(0, 1) for b in blocks], 0)


def attention_backward_reference(do, q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None,
                                 cu_seqlens_k=None, layout="bhnd"):
    """``(dq, dk, dv)`` in float64 from the formulas (no autograd; a chunk of heads at a time,
    ``by_score_chunks``): per (sequence, query head) with
    P = softmax(scale q k^T + mask) (rows that see no key: P = 0), dV = P^T dO, dP = dO V^T,
    DELTA = rowsum(P * dP), dS = P * (dP - DELTA), dQ = scale dS K, dK = scale dS^T Q; K/V heads repeated
    for GQA and their gradients summed over each group.  Same arguments and layouts as
    ``attention_backward`` (no o or lse: they are recomputed); any floating dtype and head dim."""
    with _renamed("attention_backward"):
        p = check_problem(q, k, v, cu_seqlens_q, cu_seqlens_k, layout, kernel=False)
        scale = check_scale(softmax_scale, p.head_dim)
    if not isinstance(do, torch.Tensor) or tuple(do.shape) != tuple(q.shape):
        _fail_bwd(f"do has shape {tuple(getattr(do, 'shape', ()))} but q has {tuple(q.shape)}")
    group = p.heads // p.kv_heads if p.kv_heads else 1
    dqs, dks, dvs = [], [], []
    seqs = [_sequences(p, t.double(), w) for t, w in ((q, "q"), (k, "k"), (v, "k"), (do, "q"))]
    for qb, kb, vb, dob in zip(*seqs):
        dq, dk, dv = by_score_chunks(functools.partial(_backward_chunk, scale, causal, group), (qb, dob), (kb, vb),
                                     group)
        dqs.append(dq)
        dks.append(dk)
        dvs.append(dv)
    return _rows_back(p, dqs, "q"), _rows_back(p, dks, "k"), _rows_back(p, dvs, "k")


def _backward_chunk(scale, causal, group, qb, dob, kb, vb):
    """``attention_backward_reference``'s (dq, dk, dv) of (B', H, N, D) blocks (float64)."""
    kr, vr = kb.repeat_interleave(group, dim=1), vb.repeat_interleave(group, dim=1)
    s = (qb @ kr.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], s.device), -math.inf)
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    w = torch.exp(s - lse)
    w = torch.where(torch.isinf(lse), torch.zeros_like(w), w)          # no key: P = 0
    dp = dob @ vr.transpose(-1, -2)
    ds = w * (dp - (w * dp).sum(-1, keepdim=True))
    b, h, n, d = kb.shape
    return (ds @ kr * scale, (ds.transpose(-1, -2) @ qb * scale).reshape(b, h, group, n, d).sum(2),
            (w.transpose(-1, -2) @ dob).reshape(b, h, group, n, d).sum(2))


def torch_attention_backward(do, q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None,
                             cu_seqlens_k=None, layout="bhnd"):
    """``(dq, dk, dv)`` of torch's own autograd through ``scaled_dot_product_attention`` in the inputs'
    dtype (the same explicit mask, K/V heads repeated for GQA, per sequence with varlen): the baseline
    of the backward's tolerance.  Sequences without queries or keys get zero gradients."""
    with _renamed("attention_backward"):
        p = check_problem(q, k, v, cu_seqlens_q, cu_seqlens_k, layout, kernel=False)
        scale = check_scale(softmax_scale, p.head_dim)
    group = p.heads // p.kv_heads if p.kv_heads else 1
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    outs, grads = [], []
    with torch.enable_grad():
        seqs = [_sequences(p, t, w) for t, w in ((leaves[0], "q"), (leaves[1], "k"), (leaves[2], "k"))]
        for qb, kb, vb, dob in zip(*seqs, _sequences(p, do.detach(), "q")):
            if qb.shape[-2] == 0 or kb.shape[-2] == 0 or qb.numel() == 0:
                continue
            kr, vr = kb.repeat_interleave(group, dim=1), vb.repeat_interleave(group, dim=1)
            mask = causal_mask(qb.shape[-2], kb.shape[-2], qb.device) if causal else None
            outs.append(torch.nn.functional.scaled_dot_product_attention(qb, kr, vr, attn_mask=mask, scale=scale))
            grads.append(dob)
        if outs:
            torch.autograd.backward(outs, grads)
    return tuple(t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves)


def attention_backward_error_bounds(do, q, k, v, causal=False, softmax_scale=None, cu_seqlens_q=None,
                                    cu_seqlens_k=None, layout="bhnd", *, factor: float = GRAD_FACTOR,
                                    atol: float = GRAD_ATOL):
    """(dq bound, dk bound, dv bound): flash-attn's test rule for the backward.  Each gradient's largest
    error against ``attention_backward_reference`` may be ``factor`` (2) times the largest error of torch's
    own autograd through SDPA in the inputs' dtype (``torch_attention_backward``) plus ``atol``."""
    args = (do, q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout)
    refs = attention_backward_reference(*args)
    lows = torch_attention_backward(*args)
    bounds = []
    for low, ref in zip(lows, refs):
        err = (low.detach().cpu().double() - ref.cpu()).abs()
        bounds.append(factor * (err.max() if err.numel() else err.new_zeros(())) + atol)
    return tuple(bounds)


def attention_backward_tolerance_check(dq, dk, dv, do, q, k, v, causal=False, softmax_scale=None,
                                       cu_seqlens_q=None, cu_seqlens_k=None, layout="bhnd", **bounds) -> dict:
    """Assert that ``(dq, dk, dv)`` (``attention_backward``'s outputs for these arguments) are within
    ``attention_backward_error_bounds`` of ``attention_backward_reference`` (shapes and dtypes as the
    inputs'; NaN fails).  Returns the errors and bounds found; raises AssertionError naming the first
    element out of bounds."""
    args = (do, q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, layout)
    refs = attention_backward_reference(*args)
    limits = attention_backward_error_bounds(*args, **bounds)
    found: dict = {}
    for name, got, ref, limit, like in zip(("dq", "dk", "dv"), (dq, dk, dv), refs, limits, (q, k, v)):
        if tuple(got.shape) != tuple(like.shape) or got.dtype != like.dtype:
            raise AssertionError(f"{name}: shape {tuple(got.shape)} {got.dtype}, expected {tuple(like.shape)} "
                                 f"{like.dtype}")
        err = (got.detach().cpu().double() - ref.cpu()).abs()
        bad = ~(err <= limit)                                      # NaN is bad too
        if bad.any():
            at = tuple(int(i) for i in bad.nonzero()[0])
            raise AssertionError(f"{name}{list(at)} = {float(got[at]):.6g}, reference {float(ref[at]):.6g}: error "
                                 f"{float(err[at]):.3g} > bound {float(limit):.3g} (2 x torch's own {q.dtype} "
                                 f"error + {GRAD_ATOL:g}); {int(bad.sum())} of {bad.numel()} elements")
        found[f"{name}_err"] = float(err.max()) if err.numel() else 0.0
        found[f"{name}_bound"] = float(limit)
    return found


def attention_bwd_prep_reference(o, do, lse, layout="bhnd"):
    """``(DELTA, LSE2)`` of the prep kernel in float64: ``DELTA = sum_d dO * O`` per row, ``LSE2 = LSE *
    log2(e)`` (+inf where LSE is -inf).  ``layout``: "bhnd" (O (B, H, N, D), LSE (B, H, N)), "bnhd"
    (O (B, N, H, D)) or "thd" (varlen: O (total, H, D), LSE (H, total))."""
    delta = (do.double() * o.double()).sum(-1)
    if layout in ("bnhd", "thd"):
        delta = delta.transpose(-1, -2)
    lse2 = lse.double() * (1.0 / math.log(2.0))
    lse2 = torch.where(torch.isneginf(lse.double()), torch.full_like(lse2, math.inf), lse2)
    return delta, lse2


def attention_bwd_prep_error_bounds(o, do, lse, layout="bhnd"):
    """(DELTA bound, LSE2 bound): a D-term fp32 sum of exact products, D·u·sum|dO·O| (Higham's worst
    case); LSE2 one fp32 product with the rounded log2(e), 2u·|LSE2| (0 where it is infinite)."""
    u = 2.0 ** -24
    mag = (do.double().abs() * o.double().abs()).sum(-1)
    if layout in ("bnhd", "thd"):
        mag = mag.transpose(-1, -2)
    lse2 = (lse.double() / math.log(2.0)).abs()
    return o.shape[-1] * u * mag, torch.where(torch.isinf(lse2), torch.zeros_like(lse2), 2 * u * lse2)
