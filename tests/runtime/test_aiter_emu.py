"""AITER's bf16 GEMM assembly kernel (``bf16gemm_fp32bf16_tn_64x64_splitk_clean``, gfx942, committed in
tests/data/aiter) launched through ``isagen.runtime.aiter`` on the emulator, sanitizer on, against torch.

The reference is torch's fp32 matmul of the same bf16 inputs.  The sanitizer's findings in AMD's kernel
are pinned: they are the two wait-state rules docs/emulator.md ("Findings in AITER's kernels") explains
(SALU-written M0 read by LDS DMA with 0 wait states, VALU-written SGPR read by a VALU 1 wait state
later), and nothing else -- no out-of-bounds access, missing wait, race or unsupported instruction.
"""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from isagen.errors import LaunchError  # noqa: E402
from isagen.runtime import aiter  # noqa: E402
from isagen.runtime.emu import Device  # noqa: E402

CO = Path(__file__).resolve().parent.parent / "data" / "aiter" / "gfx942" / \
    "bf16gemm__bf16gemm_fp32bf16_tn_64x64_splitk_clean.co"
KNOWN = ("reads m0 as the LDS-DMA base 0 wait states after an SALU wrote it; needs 1",
         "1 wait state(s) after `v_cmp_u_f32_e64 s[60:61]")


def _run(M, N, K, split, out_dtype="float32"):
    g = torch.Generator().manual_seed(M * 7 + N + K + split)
    A = torch.randn(M, K, generator=g).bfloat16()
    B = torch.randn(N, K, generator=g).bfloat16()
    out, reports, mod = aiter.gemm_a16w16(A, B, str(CO), splitk=split, out_dtype=out_dtype, on_error="collect")
    ref = A.float() @ B.float().T
    return out, ref, reports, mod


def _only_known_findings(reports):
    unknown = [str(r) for r in reports if r.category != "hazard" or not any(k in r.message for k in KNOWN)]
    assert unknown == []


@pytest.mark.parametrize("M,N,K,split", [(128, 128, 256, 2), (72, 64, 256, 2), (200, 256, 1024, 4)])
def test_bf16_gemm_matches_torch(M, N, K, split):
    out, ref, reports, mod = _run(M, N, K, split)
    assert out.shape == (M, N) and not out.isnan().any()       # D starts as NaN: every element is written
    assert ((out - ref).norm() / ref.norm()).item() < 1e-6
    assert mod.last_stats["grid"] == (N // 64, -(-M // 64), split)
    assert mod.last_stats["block"] == (256, 1, 1)
    assert (mod.last_semaphore == 0).all()                     # the last workgroup of each tile resets it
    _only_known_findings(reports)
    assert any("reads m0" in r.message for r in reports)


def test_bf16_gemm_bf16_output():
    """bf16 D: each split's fp32 partial is rounded to bf16 and added into D with
    ``global_atomic_pk_add_bf16`` (bf16 + bf16, rounded to bf16), in whatever order the splits arrive.
    Reference: torch's fp32 partial sums per K range, folded in bf16 in every order of the splits; each
    element must be one of those results (to one bf16 ulp: the MFMA's fp32 summation order can move a
    partial across a bf16 rounding boundary)."""
    import itertools

    M, N, K, split = 72, 128, 512, 3
    g = torch.Generator().manual_seed(5)
    A = torch.randn(M, K, generator=g).bfloat16()
    B = torch.randn(N, K, generator=g).bfloat16()
    out, reports, _ = aiter.gemm_a16w16(A, B, str(CO), splitk=split, out_dtype="bfloat16", on_error="collect")
    assert out.dtype == torch.bfloat16
    ks = K // split // 64 * 64                                 # the kernel's K range per split (a 64 multiple)
    bounds = [min(i * ks, K) if i < split else K for i in range(split + 1)]
    parts = [(A[:, a:b].float() @ B[:, a:b].float().T).bfloat16() for a, b in zip(bounds, bounds[1:])]
    cands = []
    for order in itertools.permutations(range(split)):
        acc = torch.zeros(M, N).bfloat16()
        for s_ in order:
            acc = (acc.float() + parts[s_].float()).bfloat16()
        cands.append(acc.float())
    c = torch.stack(cands)
    err = (c - out.float()).abs().min(dim=0).values
    ulp = torch.stack([x.abs() for x in cands]).max(dim=0).values.clamp_min(1e-30) * 2.0 ** -7
    assert (err <= ulp).all()
    assert (err == 0).float().mean().item() > 0.98
    _only_known_findings(reports)
    assert any("v_cmp_u_f32_e64" in r.message for r in reports)


def test_kernel_args_layout_is_the_metadata_s():
    """The packed struct (AITER's C++ KernelArgs) puts each field at the offset the code object's own
    metadata names for it (an independent record of the same layout, written by AITER's build)."""
    mod = Device("gfx942").load_module(CO.read_bytes())
    k = mod.kernel(next(iter(mod.co.kernels)))
    named = [(a[".name"], int(a[".offset"])) for a in k.explicit_args if a[".name"] != "pad"]
    assert len(named) == len(aiter.BF16GEMM_ARG_FIELDS)
    for i, ((mname, moff), (fname, _)) in enumerate(zip(named, aiter.BF16GEMM_ARG_FIELDS)):
        assert moff == aiter.SLOT * i
        norm = fname.removeprefix("ptr_").replace("_", "").lower()
        assert mname.replace("_", "").lower().removeprefix("ptr").removesuffix("dim") in (norm, "ptr" + norm), \
            (mname, fname)
    assert int(k.meta[".kernarg_segment_size"]) == aiter.BF16GEMM_ARGS_SIZE
    raw = aiter.pack_bf16gemm_args(M=200, N=256, alpha=1.0, ptr_semaphore=0x1234_5678_9A)
    assert raw[224:228] == (200).to_bytes(4, "little") and raw[240:244] == (256).to_bytes(4, "little")
    assert raw[64:68] == np.float32(1.0).tobytes() and raw[336:344] == (0x1234_5678_9A).to_bytes(8, "little")


def test_launcher_refuses_what_aiter_refuses():
    A = torch.zeros(64, 256).bfloat16()
    with pytest.raises(LaunchError, match="tileN=64"):
        aiter.gemm_a16w16(A, torch.zeros(96, 256).bfloat16(), str(CO), splitk=2)
    with pytest.raises(LaunchError, match="divisible by 64"):
        aiter.gemm_a16w16(torch.zeros(64, 96).bfloat16(), torch.zeros(64, 96).bfloat16(), str(CO), splitk=2)
    with pytest.raises(LaunchError, match="split-K 1"):       # the *_clean kernels take split-K > 1 only
        aiter.gemm_a16w16(A, torch.zeros(64, 256).bfloat16(), str(CO), splitk=1)
    cfg = aiter.Bf16GemmConfig.from_name(CO.name.split("__")[1])
    assert (cfg.tile_m, cfg.tile_n, cfg.b_preshuffle, cfg.splitk) == (64, 64, False, True)
    # automatic split-K on a 304-CU MI300X: 4 tiles -> min(304 // 4, 16, K / 64)
    assert aiter.bf16gemm_splitk(cfg, 128, 128, 4096, None) == 16
    assert aiter.bf16gemm_splitk(cfg, 128, 128, 256, None) == 4


def test_every_instruction_of_the_kernel_is_modelled():
    """All 2052 instructions of the object compile to emulator semantics (none stops with 'not modelled'),
    the paths these tests do not take (bias, beta * C) included -- among them the split-K protocol's
    ``s_atomic_dec`` on the semaphore."""
    mod = Device("gfx942").load_module(CO.read_bytes())
    k = mod.kernel(next(iter(mod.co.kernels)))
    prog = k.program(True)
    steps = [prog.step(i) for i in range(len(k._insts))]
    assert len(steps) > 2000
    assert [(str(s.inst), s.error) for s in steps if s.error] == []
    assert any(s.inst.name == "s_atomic_dec" for s in steps)


@pytest.mark.parametrize("order", ["reverse", "shuffle:7"])
def test_split_k_protocol_in_other_workgroup_orders(order, monkeypatch):
    """The split-K protocol (partials added atomically, arrivals counted on the semaphore) gives the same
    result whatever order the workgroups run in."""
    monkeypatch.setenv("ISAGEN_EMU_WG_ORDER", order)
    out, ref, reports, mod = _run(72, 64, 256, 2)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-6
    assert (mod.last_semaphore == 0).all()
    _only_known_findings(reports)
