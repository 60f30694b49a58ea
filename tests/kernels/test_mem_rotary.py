"""Rotary embedding (rotate-half and interleaved) in the emulator (sanitizer on) against float64 torch:
both layouts and every dtype, head sizes 64/128/256, token counts that leave a partial wave and
workgroup, head counts that exercise the remainder loop, and exactly the minimum bytes moved (cos/sin
once per token, not per head)."""

import pytest
import torch
from mem_support import assert_close, kernel, rand, run

import isagen


def reference(style, x, cos, sin):
    x, c, s = x.double(), cos.double()[:, None, :], sin.double()[:, None, :]
    d = x.shape[-1]
    if style == "neox":
        a, b = x[..., :d // 2], x[..., d // 2:]
        return torch.cat([a * c - b * s, b * c + a * s], -1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c - b * s, b * c + a * s], -1).flatten(-2)


def check(k, style, dtype, tokens, heads, head_dim, seed):
    x = rand((tokens, heads, head_dim), dtype, seed, scale=2)
    ang = torch.rand(tokens, head_dim // 2, generator=torch.Generator().manual_seed(seed)) * 6.3
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    out = torch.empty_like(x)
    stats = run(k, x, cos, sin, out)
    assert_close(out, reference(style, x, cos, sin), dtype, f"rotary {style} {dtype} {tokens}x{heads}x{head_dim}",
                 scale=2)
    esize = x.element_size()
    assert stats["global_bytes_read"] == esize * (x.numel() + cos.numel() + sin.numel())
    assert stats["global_bytes_written"] == esize * x.numel()
    assert set(stats["global_bytes_by_width"]) == {16}


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("style", ["neox", "interleaved"])
def test_layouts_and_dtypes(style, dtype):
    k = kernel("rotary", style=style, dtype=dtype, head_dim=128, waves=2, heads_per_step=3)
    for tokens, heads in ((13, 5), (1, 1), (40, 3)):
        check(k, style, dtype, tokens, heads, 128, seed=tokens * 10 + heads)


@pytest.mark.parametrize("head_dim,dtype", [(64, "bf16"), (256, "bf16"), (64, "f32"), (256, "f16")])
def test_head_sizes(head_dim, dtype):
    for style in ("neox", "interleaved"):
        k = kernel("rotary", style=style, dtype=dtype, head_dim=head_dim, waves=4, heads_per_step=2)
        check(k, style, dtype, 37, 3, head_dim, seed=head_dim)


def test_bundled_specs_and_gfx950():
    for style in ("neox", "interleaved"):
        for target in ("gfx942", "gfx950"):
            k = isagen.build(f"rotary_{style}_bf16", target)
            check(k, style, "bf16", 70, 6, 128, seed=5)


def test_bad_head_dim():
    from isagen.errors import SpecError
    with pytest.raises(SpecError, match=r"head_dim=96 with bf16: head_dim/2 = 48 must be 8 x a power of two"):
        kernel("rotary", dtype="bf16", head_dim=96)
