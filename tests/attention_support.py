"""What the attention tests share (tests/runtime/test_attention_api.py, test_attention_backward_api.py):
seeded inputs, cu_seqlens, readable test ids, and a per-session cache with the default backend."""

from __future__ import annotations

import itertools

import pytest
import torch

BF16, F16 = torch.bfloat16, torch.float16


@pytest.fixture(autouse=True)
def attention_env(tmp_path_factory, monkeypatch):
    """One build cache for the session's attention kernels; the backend the test names, not the caller's."""
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "attention-cache"))
    monkeypatch.delenv("ISAGEN_BACKEND", raising=False)


def randn(*shape, dtype=BF16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def qkv(b, hq, hkv, nq, nk, d, dtype=BF16, seed=0):
    """Seeded q (B, H_q, N_q, D), k and v (B, H_kv, N_kv, D)."""
    return (randn(b, hq, nq, d, dtype=dtype, seed=seed), randn(b, hkv, nk, d, dtype=dtype, seed=seed + 1),
            randn(b, hkv, nk, d, dtype=dtype, seed=seed + 2))


def cu(*lens):
    """cu_seqlens of sequences of these lengths."""
    return torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32)


def case_id(value):
    """Readable test ids: bf16, 1x8x2x64x100x128, causal, varlen lengths."""
    if isinstance(value, torch.dtype):
        return {BF16: "bf16", F16: "f16"}[value]
    if isinstance(value, tuple) and value and isinstance(value[0], list):
        return "varlen" + "/".join(",".join(map(str, lens)) for lens in value)
    if isinstance(value, tuple):
        return "x".join("-" if x is None else str(x) for x in value)
    if isinstance(value, bool):
        return "causal" if value else "full"
    return None if value is not None else "dense"


def kernel_inputs(dtype, dims, causal, varlen, layout, seed=0):
    """The positional arguments ``(q, k, v, causal, scale, cu_q, cu_k, layout)`` of one kernel case:
    ``dims`` = (B, H_q, H_kv, N_q, N_kv, D); ``varlen`` = (query lengths, key lengths) for THD tensors."""
    b, hq, hkv, nq, nk, d = dims
    if varlen:
        lens_q, lens_k = varlen
        q, k, v = (randn(sum(lens_q), hq, d, dtype=dtype, seed=seed),
                   randn(sum(lens_k), hkv, d, dtype=dtype, seed=seed + 1),
                   randn(sum(lens_k), hkv, d, dtype=dtype, seed=seed + 2))
        return q, k, v, causal, None, cu(*lens_q), cu(*lens_k), layout
    q, k, v = qkv(b, hq, hkv, nq, nk, d, dtype, seed)
    if layout == "bnhd":
        q, k, v = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    return q, k, v, causal, None, None, None, layout
