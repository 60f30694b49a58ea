"""The MX GEMM (``gemm_mx``: MXFP8 and MXFP4 on gfx950's block-scaled MFMAs) in the emulator, sanitizer
on, against float64 torch math on the dequantized inputs (values from torch's float8 types and the OCP
MX v1.0 E2M1 table, written here, times 2^(e-127) per 32 k): every format, the large, mid and decode
tiles, ragged M / N, a leading partial K-tile, both MFMA shapes, bf16/f16/f32 out; a NaN scale poisons
exactly its row; nothing is written past C; no LDS bank conflict in the emulated address stream (scale
copies and reads included); the hot loops have no s_nop; gfx942 is refused.
"""

import numpy as np
import pytest
import torch

from isagen.builders.contract import evaluate
from isagen.builders.spec import parse_spec
from isagen.errors import SpecError
from isagen.kernels.gemm import hot_loops
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.runtime.emu import Device
from isagen.tiles.bank_check import BankObserver

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
E2M1 = torch.tensor(E2M1 + [-v for v in E2M1], dtype=torch.float64)
FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT = {"f32": (np.uint32, torch.float32), "bf16": (np.uint16, torch.bfloat16), "f16": (np.uint16, torch.float16)}
UNIT = {"f32": 2.0 ** -24, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}
SENTINEL = {"f32": 0x7FC12345, "bf16": 0x7FC1, "f16": 0x7E01}
PAD = 64

_BUILT: dict = {}


def built(**params):
    key = tuple(sorted(params.items()))
    if key not in _BUILT:
        body = ", ".join(f"{k}: {v}" for k, v in params.items())
        spec = parse_spec(f"kernel: gemm_mx\nname: gemm_mx_test\ntargets: [gfx950]\nparams: {{{body}}}\n",
                          "test_gemm_mx.yaml")
        program = spec.build("gfx950")
        _BUILT[key] = (spec, program, assemble(render_assembly(program), "gfx950", name=spec.name))
    return _BUILT[key]


def operand(fmt: str, rows: int, K: int, g) -> tuple[torch.Tensor, torch.Tensor]:
    """(stored tensor, float64 values): fp8 from N(0, 2) rounded by torch; e2m1 random codes packed two
    per byte, the even k in the low nibble."""
    if fmt == "e2m1":
        codes = torch.randint(0, 16, (rows, K), generator=g)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
        return packed, E2M1[codes]
    x = (torch.randn(rows, K, generator=g) * 2).to(FP8[fmt])
    return x, x.double()


def run_mx(M, N, K, *, seed=0, nan_row=None, **params):
    spec, _, co = built(**params)
    info = spec.launch_info("gfx950")
    a_fmt = params["a_format"]
    b_fmt = params.get("b_format", a_fmt)
    out = params.get("out_dtype", "bf16")
    g = torch.Generator().manual_seed(seed)
    A, av = operand(a_fmt, M, K, g)
    B, bv = operand(b_fmt, N, K, g)
    lo, hi = (121, 129) if out == "f16" else (118, 137)      # f16 out: keep C below 65504
    sa = torch.randint(lo, hi, (M, K // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    sb = torch.randint(lo, hi, (N, K // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    if nan_row is not None:
        sa[nan_row, K // 64] = 255                     # E8M0 NaN in the middle of one row's K
    fa = av * torch.exp2(sa.double() - 127).repeat_interleave(32, dim=1)
    fb = bv * torch.exp2(sb.double() - 127).repeat_interleave(32, dim=1)
    if nan_row is not None:
        fa[nan_row, (K // 64) * 32:(K // 64) * 32 + 32] = torch.nan
    ref, mag = fa @ fb.T, fa.abs().nan_to_num(0) @ fb.abs().T
    dev = Device("gfx950", sanitize=True)
    obs = dev.lds_observer = BankObserver("gfx950")
    mod = dev.load_module(co)
    bits, tdt = OUT[out]
    c = dev.to_device(np.full(M * N + PAD, SENTINEL[out], bits))
    raw = lambda t: dev.to_device(t.view(torch.uint8).contiguous().numpy())
    args = [raw(A), raw(B), c, raw(sa), raw(sb)]
    epb = 2 if a_fmt == "e2m1" else 1
    sizes = {"m": M, "n": N, "kb": K // 32, ("kp" if epb == 2 else "k"): K // epb}
    env = {**info.constants, **sizes}
    info.grid_for(sizes)
    args += [np.uint32(evaluate(info.source_of(n)[1], env)) for n in
             ("m", "n", "k", "tiles_m", "tiles_n", "k_tiles", "pad")]
    grid = tuple(evaluate(x, env) for x in info.grid)
    reports = mod.launch(spec.name, grid=grid, block=info.block, args=args, on_error="collect")
    assert reports == [], reports[:3]
    got = dev.from_device(c, (M * N + PAD,), bits)
    assert (got[M * N:] == SENTINEL[out]).all(), "wrote past C"
    cv = torch.from_numpy(got[:M * N].view(np.float32 if out == "f32" else np.int16).copy())
    cv = cv.view(tdt).double().reshape(M, N) if out != "f32" else cv.double().reshape(M, N)
    bad = obs.conflicts()
    assert not bad, f"LDS bank conflicts: {bad[:3]}"
    assert obs.instructions()
    return cv, ref, mag


def check(c, ref, mag, out):
    # exact products summed in fp32, then one rounding to the output type
    tol = UNIT[out] * ref.abs() + 2.0 ** -20 * mag + (2.0 ** -25 if out == "f16" else 0)    # f16 subnormals
    err = (c - ref).abs()
    assert bool((err <= tol).all()), f"max error {err.max().item():.3g}"


CASES = [
    # params, M, N, K
    (dict(a_format="e4m3"), 300, 256, 384),                                         # 256x256 pingpong8, ragged M
    (dict(a_format="e2m1", out_dtype="f32"), 260, 256, 640),                        # MXFP4, leading partial K-tile
    (dict(a_format="e5m2", b_format="e4m3", block_m=128, block_n=128, out_dtype="f16"), 100, 132, 256),
    (dict(a_format="e4m3", block_m=32, block_n=64, schedule="interleave4"), 1, 64, 384),    # decode M = 1
    (dict(a_format="e2m1", block_m=32, block_n=64, schedule="interleave4"), 7, 192, 384),   # decode MXFP4
    (dict(a_format="e2m1", block_m=64, block_n=64, schedule="interleave4", out_dtype="f32"), 40, 64, 256),
    (dict(a_format="e4m3", mfma=32, block_m=128, block_n=128, out_dtype="f32"), 130, 128, 256),   # 32x32x64
    (dict(a_format="e2m1", mfma=32, block_m=128, block_n=128, out_dtype="f32"), 64, 128, 384),
]


@pytest.mark.parametrize("params,M,N,K", CASES)
def test_mx_gemm_matches_float64(params, M, N, K):
    c, ref, mag = run_mx(M, N, K, **params)
    check(c, ref, mag, params.get("out_dtype", "bf16"))


def test_nan_scale_poisons_exactly_its_row():
    """E8M0 255 is NaN: the row of A it scales comes out NaN, every other row finite and right (the
    scale of row i, K-block kb reaches exactly C[i, :])."""
    c, ref, mag = run_mx(48, 64, 256, nan_row=37, a_format="e4m3", block_m=64, block_n=64, schedule="interleave4",
                         out_dtype="f32")
    assert bool(torch.isnan(c[37]).all())
    keep = torch.arange(48) != 37
    assert bool(torch.isfinite(c[keep]).all())
    check(c[keep], ref[keep], mag[keep], "f32")


@pytest.mark.parametrize("params", [dict(a_format="e4m3"), dict(a_format="e2m1")])
def test_hot_loops_have_no_nops_and_scaled_mfmas(params):
    _, program, _ = built(**params)
    for loop in hot_loops(program):
        names = [i.name for i in loop if hasattr(i, "name")]
        assert "s_nop" not in names
        assert any(n.startswith("v_mfma_scale_f32_16x16x128_f8f6f4") for n in names)
        assert not any(n.startswith("v_mfma_f32") for n in names)


def test_gfx942_is_refused_with_the_reason():
    spec = parse_spec("kernel: gemm_mx\nname: x\ntargets: [gfx942]\nparams: {a_format: e4m3}\n", "x.yaml")
    with pytest.raises(SpecError, match="gfx942 has no block-scaled MFMA.*need gfx950"):
        spec.build("gfx942")


def test_fp4_with_fp8_is_refused():
    spec = parse_spec("kernel: gemm_mx\nname: x\ntargets: [gfx950]\nparams: {a_format: e2m1, b_format: e4m3}\n",
                      "x.yaml")
    with pytest.raises(SpecError, match="b_format.*fp4 pairs only with fp4"):
        spec.build("gfx950")


def test_lds_budget_counts_the_scale_tiles():
    """A tile whose data stages fill gfx950's LDS exactly is refused for the scale tiles it adds; the
    bundled tile's LDS is the data stages plus the scale tiles the kernel allocates."""
    from isagen.kernels import gemm_mx
    spec = parse_spec("kernel: gemm_mx\nname: x\ntargets: [gfx950]\n"
                      "params: {a_format: e4m3, block_m: 256, block_n: 64, block_k: 256}\n", "x.yaml")
    with pytest.raises(SpecError, match=r"params.block_k: two LDS stages of data \(163840 bytes\) and E8M0 scale "
                                        r"tiles \(8192 bytes\) need 172032 bytes; gfx950 has 163840"):
        spec.build("gfx950")
    spec, program, _ = built(a_format="e4m3")
    plan = gemm_mx.make_plan(spec.params, "gfx950")
    assert program.lds_bytes == plan.lds_bytes + gemm_mx.scale_lds_bytes(plan) == 128 * 1024 + 2 * (1024 + 1024)
