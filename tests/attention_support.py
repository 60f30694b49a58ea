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
