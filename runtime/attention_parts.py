"""Float64 references of the attention backward's kernels taken one at a time (``isagen run
attention_bwd_bf16``), on whatever DELTA and LSE2 they are given.

``isagen.attention_backward`` (runtime/attention.py) checks the whole backward against torch autograd;
this checks one kernel against its own formula (kernels/attention_bwd.py), for any inputs::

    P  = exp2(S c - LSE2)        S = Q·Kᵀ, c = scale·log2 e, masked (causal, bottom-right) to 0
    dP = dO·Vᵀ,  dS = P (dP - DELTA)
    dV = Pᵀ·dO,  dK = scale dSᵀ·Q,  dQ = scale dS·K

The kernel multiplies P and dS as 16-bit MFMA operands, so the reference rounds them to the inputs'
element type at the same points (``dtype``); everything else is float64.  Tensors are the
contract's: contiguous (B, H, N, D), DELTA and LSE2 (B, H, N_q).
"""

from __future__ import annotations

import math

import torch

OPERAND_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def backward_part_reference(Q, K, V, dO, DELTA, LSE2, causal, softmax_scale, part, dtype="bf16"):
    """``(dK, dV)`` for ``part == "dkdv"``, ``dQ`` for ``"dq"`` (float64), GQA by head groups; ``dtype`` is
    the kernel's element type (the precision P and dS are multiplied in)."""
    operand_dtype = OPERAND_DTYPES[dtype]
    q, k, v, do = (x.double() for x in (Q, K, V, dO))
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    n_q, n_kv = q.shape[2], k.shape[2]
    s = (q @ kk.transpose(-1, -2)) * (softmax_scale * math.log2(math.e)) - LSE2.double()[..., None]
    if causal:
        i = torch.arange(n_q)[:, None]
        j = torch.arange(n_kv)[None, :]
        s = s.masked_fill(j > i + n_kv - n_q, float("-inf"))
    p = torch.exp2(s)
    dp = do @ vv.transpose(-1, -2)
    ds = p * (dp - DELTA.double()[..., None])
    p16, ds16 = (x.to(operand_dtype).double() for x in (p, ds))
    if part == "dq":
        return softmax_scale * (ds16 @ kk)
    b, h_kv = k.shape[0], k.shape[1]
    dv = (p16.transpose(-1, -2) @ do).reshape(b, h_kv, group, n_kv, -1).sum(2)
    dk = softmax_scale * (ds16.transpose(-1, -2) @ q).reshape(b, h_kv, group, n_kv, -1).sum(2)
    return dk, dv
