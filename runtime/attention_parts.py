"""Float64 references of the attention backward's kernels taken one at a time (``isagen run
attention_bwd_bf16``), on whatever DELTA and LSE2 they are given.

``isagen.attention_backward`` (runtime/attention.py) checks the whole backward against torch autograd;
this checks one kernel against its own formula (kernels/attention_bwd.py), for any inputs::

    P  = exp2(S c - LSE2)        S = Q·Kᵀ, c = scale·log2 e, masked (causal, bottom-right) to 0
    dP = dO·Vᵀ,  dS = P (dP - DELTA)
    dV = Pᵀ·dO,  dK = scale dSᵀ·Q,  dQ = scale dS·K

The kernel multiplies P and dS as 16-bit MFMA operands, so the reference rounds them to the inputs'
element type at the same points (``dtype``); everything else is float64.  Tensors are the
contract's: contiguous (B, H, N, D), DELTA and LSE2 (B, H, N_q).  The formula is evaluated a chunk of
(batch elements, KV heads with their query heads) at a time (``runtime/attention.py``'s ``by_score_chunks``):
at full size (16x64x2048x2048) one float64 score tensor is 32 GiB.
"""

from __future__ import annotations

import functools
import math

import torch

from isagen.runtime.attention import by_score_chunks

OPERAND_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def backward_part_reference(Q, K, V, dO, DELTA, LSE2, causal, softmax_scale, part, dtype="bf16", cu_seqlens_q=None,
                            cu_seqlens_k=None):
    """``(dK, dV)`` for ``part == "dkdv"``, ``dQ`` for ``"dq"`` (float64), GQA by head groups; ``dtype`` is
    the kernel's element type (the precision P and dS are multiplied in).  With ``cu_seqlens_q/_k`` the
    tensors are flash-attn's THD packing (Q (total_q, H, D), DELTA/LSE2 (H, total_q)), per sequence."""
    if cu_seqlens_q is None or cu_seqlens_k is None:
        return _part(Q, K, V, dO, DELTA, LSE2, causal, softmax_scale, part, OPERAND_DTYPES[dtype])
    cq, ck = [int(x) for x in cu_seqlens_q], [int(x) for x in cu_seqlens_k]
    outs = ([torch.zeros(Q.shape, dtype=torch.float64)] if part == "dq"
            else [torch.zeros(K.shape, dtype=torch.float64), torch.zeros(V.shape, dtype=torch.float64)])
    for b in range(len(cq) - 1):
        (q0, q1), (k0, k1) = (cq[b], cq[b + 1]), (ck[b], ck[b + 1])
        if q1 == q0 or k1 == k0:
            continue                                    # no query or no key: zero gradients
        seq = (x.transpose(0, 1)[None] for x in (Q[q0:q1], K[k0:k1], V[k0:k1], dO[q0:q1]))
        got = _part(*seq, DELTA[:, q0:q1][None], LSE2[:, q0:q1][None], causal, softmax_scale, part,
                    OPERAND_DTYPES[dtype])
        got = (got,) if part == "dq" else got
        rows = (q0, q1) if part == "dq" else (k0, k1)
        for out, g in zip(outs, got):
            out[rows[0]:rows[1]] = g[0].transpose(0, 1)
    return outs[0] if part == "dq" else tuple(outs)


def _part(Q, K, V, dO, DELTA, LSE2, causal, softmax_scale, part, operand_dtype):
    """``backward_part_reference`` on (B, H, N, D) tensors, a chunk of heads at a time (``by_score_chunks``:
    a full-size problem's scores do not fit in memory at once)."""
    group = Q.shape[1] // K.shape[1]
    fn = functools.partial(_part_chunk, causal, softmax_scale, part, operand_dtype)
    got = by_score_chunks(fn, (Q, dO, DELTA, LSE2), (K, V), group)
    return got[0] if part == "dq" else got


def _part_chunk(causal, softmax_scale, part, operand_dtype, Q, dO, DELTA, LSE2, K, V):
    """``(dQ,)`` or ``(dK, dV)`` of one chunk: the formula of the module docstring."""
    q, k, v, do = (x.double() for x in (Q, K, V, dO))
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    n_q, n_kv = q.shape[2], k.shape[2]
    s = (q @ kk.transpose(-1, -2)) * (softmax_scale * math.log2(math.e)) - LSE2.double()[..., None]
    if causal:
        i = torch.arange(n_q, device=s.device)[:, None]
        j = torch.arange(n_kv, device=s.device)[None, :]
        s = s.masked_fill(j > i + n_kv - n_q, float("-inf"))
    p = torch.exp2(s)
    dp = do @ vv.transpose(-1, -2)
    ds = p * (dp - DELTA.double()[..., None])
    p16, ds16 = (x.to(operand_dtype).double() for x in (p, ds))
    if part == "dq":
        return (softmax_scale * (ds16 @ kk),)
    b, h_kv = k.shape[0], k.shape[1]
    dv = (p16.transpose(-1, -2) @ do).reshape(b, h_kv, group, n_kv, -1).sum(2)
    dk = softmax_scale * (ds16.transpose(-1, -2) @ q).reshape(b, h_kv, group, n_kv, -1).sum(2)
    return dk, dv
