"""The f8f6f4 MFMAs of gfx950 with fp4 (e2m1), fp6 (e2m3) and bf6 (e3m2) operands, plain and block
scaled, against independent references:

* operand register counts: LLVM 22's assembler accepts exactly the widths ``operand_regs`` gives
  (8 / 6 / 4 VGPRs for fp8-bf8 / fp6-bf6 / fp4) and rejects the others;
* results: a numpy float64 matmul on values decoded from the OCP MX v1.0 element tables, the
  operands packed here by the documented lane formulas (not through mfma.py's index code): fp4/fp6
  lanes hold 32 consecutive k of their row (``lane = (k // 32) * M + i``), packed little-endian
  (fp4 element e in bits [4e+3:4e], fp6 in bits [6e+5:6e] of the lane's register string, as CK's
  ``f6x32_pk_t``); fp8 as the AMD CDNA4 blog's formula; E8M0 scales of K-block kb of row i in lane
  ``kb*M + i`` of the scale VGPR, the byte op_sel picks.
Triton's ``tl.dot_scaled`` code checks the same layouts on foreign code (test_emu_mx_triton.py).
"""

import shutil
import subprocess

import numpy as np
import pytest
import torch

from isagen.runtime.emu import mfma as M
from isagen.targets import get_target

RNG = np.random.default_rng(16)
NAMES = ["v_mfma_f32_16x16x128_f8f6f4", "v_mfma_f32_32x32x64_f8f6f4",
         "v_mfma_scale_f32_16x16x128_f8f6f4", "v_mfma_scale_f32_32x32x64_f8f6f4"]
FORMATS = {0: "fp8", 1: "bf8", 2: "fp6", 3: "bf6", 4: "fp4"}

# OCP MX v1.0, section 5.3: the FP4 E2M1 magnitudes, and the FP6 formats' limits
FP4_MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
FP6_LIMITS = {"fp6": (7.5, 0.125), "bf6": (28.0, 0.0625)}       # max normal, min subnormal


def minifloat_values(kind: str) -> np.ndarray:
    """code -> value of fp4/fp6/bf6 from the spec's parameters (no inf/NaN)."""
    if kind == "fp4":
        mags = np.array(FP4_MAGNITUDES)
        return np.concatenate([mags, -mags])
    ebits, mbits = {"fp6": (2, 3), "bf6": (3, 2)}[kind]
    bias = 2 ** (ebits - 1) - 1
    vals = []
    for code in range(64):
        sign = -1.0 if code & 32 else 1.0
        exp, man = divmod(code & 31, 2 ** mbits)
        frac = man / 2 ** mbits
        vals.append(sign * (frac * 2.0 ** (1 - bias) if exp == 0 else (1 + frac) * 2.0 ** (exp - bias)))
    out = np.array(vals)
    assert np.abs(out).max() == FP6_LIMITS[kind][0] and np.abs(out[1:32]).min() == FP6_LIMITS[kind][1]
    return out


def decode(codes: np.ndarray, kind: str) -> np.ndarray:
    if kind in ("fp8", "bf8"):
        dt = torch.float8_e4m3fn if kind == "fp8" else torch.float8_e5m2
        return torch.from_numpy(codes.astype(np.uint8)).view(dt).double().numpy()
    return minifloat_values(kind)[codes]


def random_codes(kind: str, shape) -> np.ndarray:
    if kind in ("fp8", "bf8"):        # finite, moderate values
        x = torch.from_numpy(RNG.standard_normal(shape) * 3)
        return x.to(torch.float8_e4m3fn if kind == "fp8" else torch.float8_e5m2).view(torch.uint8).numpy()
    return RNG.integers(0, 16 if kind == "fp4" else 64, shape).astype(np.uint8)


def pack_operand(X: np.ndarray, rows: int, K: int, fmt: int) -> np.ndarray:
    """uint32[regs, 1, 64] holding X[rows, K] (codes) by the documented lane formulas."""
    bits = 8 if fmt <= 1 else (6 if fmt <= 3 else 4)
    lanes = [0] * 64                                   # each lane's register string as a Python int
    for r in range(rows):
        for k in range(K):
            if fmt <= 1:                               # CDNA4 blog: byte h*16 + x of lane g*rows + r
                groups = 64 // rows
                h, rest = divmod(k, 16 * groups)
                g, x = divmod(rest, 16)
                lane, pos = g * rows + r, h * 16 + x
            else:
                lane, pos = (k // 32) * rows + r, k % 32
            lanes[lane] |= int(X[r, k]) << (bits * pos)
    out = np.zeros((bits, 1, 64), np.uint32)
    for lane, v in enumerate(lanes):
        for reg in range(bits):
            out[reg, 0, lane] = (v >> (32 * reg)) & 0xFFFFFFFF
    return out


def unpack_d(d: np.ndarray, m: int) -> np.ndarray:
    out = np.empty((m, m))
    for i in range(m):
        for j in range(m):
            reg, lane = ((i % 4), 16 * (i // 4) + j) if m == 16 else (4 * (i // 8) + i % 4, 32 * ((i // 4) % 2) + j)
            out[i, j] = d[reg, 0, lane].view(np.float32)
    return out


CASES = [(name, fa, fb) for name in NAMES
         for fa, fb in [(4, 4), (2, 2), (3, 3), (2, 4), (4, 3), (0, 4), (4, 1), (3, 0)]]


@pytest.mark.parametrize("name,fa,fb", CASES)
def test_narrow_formats_match_numpy(name, fa, fb):
    s = M.spec(name, "gfx950")
    ka, kb = FORMATS[fa], FORMATS[fb]
    A = random_codes(ka, (s.m, s.k))
    B = random_codes(kb, (s.n, s.k))                   # B[j, k]: column j of the K x N operand
    a, b = pack_operand(A, s.m, s.k, fa), pack_operand(B, s.n, s.k, fb)
    assert (a.shape[0], b.shape[0]) == M.operand_regs(name, fa, fb)
    C = RNG.standard_normal((s.m, s.n)).astype(np.float32)
    c = np.zeros((s.c_regs, 1, 64), np.uint32)
    for i in range(s.m):
        for j in range(s.n):
            reg, lane = M.cd_slot(s, 0, i, j)
            c[reg, 0, lane] = C[i, j].view(np.uint32)
    Av, Bv = decode(A, ka), decode(B, kb)
    kw = {}
    if s.scaled:
        nkb = s.k // 32
        sa = RNG.integers(118, 137, (4, 64)).astype(np.uint8)      # [byte, lane]
        sb = RNG.integers(118, 137, (4, 64)).astype(np.uint8)
        opa, opb = RNG.integers(0, 4, 2)
        vgpr = lambda by: by.T.copy().view(np.uint32)[:, 0][None, :]     # [byte, lane] -> uint32[1, 64]
        kw = dict(scale_a=vgpr(sa), scale_b=vgpr(sb), opsel_a=int(opa), opsel_b=int(opb))
        fac_a = np.array([[2.0 ** (int(sa[opa, (k // 32) * s.m + i]) - 127) for k in range(s.k)] for i in range(s.m)])
        fac_b = np.array([[2.0 ** (int(sb[opb, (k // 32) * s.n + j]) - 127) for k in range(s.k)] for j in range(s.n)])
        assert nkb * s.m == 64 and nkb * s.n == 64         # every lane of the scale VGPR is used
        Av, Bv = Av * fac_a, Bv * fac_b
    d = M.mfma(name, "gfx950", a, b, c, cbsz=fa, blgp=fb, **kw)
    want = Av @ Bv.T + C
    bound = np.abs(Av) @ np.abs(Bv).T + np.abs(C)
    got = unpack_d(d, s.m)
    assert np.all(np.abs(got - want) <= 2 ** -23 * bound + 1e-30), np.abs(got - want).max()
    # exact products, one rounding: almost all outputs are the correctly rounded f32 of the sum
    assert np.mean(got == want.astype(np.float32)) > 0.9


def test_fp4_low_nibble_is_the_even_element():
    """A = one fp4 element; B = ones: D[0][0] picks the element the nibble order says."""
    name = "v_mfma_f32_16x16x128_f8f6f4"
    s = M.spec(name, "gfx950")
    a = np.zeros((4, 1, 64), np.uint32)
    a[0, 0, 0] = 0x0000_00C2          # nibble 0 = 0x2 (1.0, k = 0), nibble 1 = 0xC (-2.0, k = 1)
    b = np.zeros((4, 1, 64), np.uint32)
    b[0, 0, 0] = 0x0000_0002          # B[k=0][j=0] = 1.0, B[k=1][0] = 0
    d = M.mfma(name, "gfx950", a, b, np.uint32(0), cbsz=4, blgp=4)
    assert d[0, 0, 0].view(np.float32) == 1.0
    b[0, 0, 0] = 0x0000_0020          # B[k=1][0] = 1.0 only
    d = M.mfma(name, "gfx950", a, b, np.uint32(0), cbsz=4, blgp=4)
    assert d[0, 0, 0].view(np.float32) == -2.0
    assert s.k == 128


@pytest.mark.skipif(shutil.which("llvm-mc-22") is None, reason="llvm-mc-22 not installed (apt-get install llvm-22)")
def test_operand_register_counts_match_llvm():
    """LLVM 22 accepts the widths operand_regs gives for every cbsz/blgp and rejects one more/less."""
    def line(name, na, nb, fa, fb):
        s = M.SPECS[name]
        scale = ", v60, v61" if s.scaled else ""
        return (f"{name} v[0:{s.c_regs - 1}], v[16:{15 + na}], v[32:{31 + nb}], v[0:{s.c_regs - 1}]{scale}"
                f" cbsz:{fa} blgp:{fb}")

    def assemble(lines):
        r = subprocess.run(["llvm-mc-22", "-triple", "amdgcn-amd-amdhsa", "-mcpu=gfx950", "-show-encoding"],
                           input="\n".join(lines) + "\n", capture_output=True, text=True)
        return r.stdout.count("encoding:"), r.stderr.count("error:")

    good, bad = [], []
    for name in NAMES:
        for fa in range(5):
            for fb in range(5):
                na, nb = M.operand_regs(name, fa, fb)
                good.append(line(name, na, nb, fa, fb))
                bad.append(line(name, na + 2 if na < 8 else na - 2, nb, fa, fb))
                bad.append(line(name, na, nb + 2 if nb < 8 else nb - 2, fa, fb))
    assert assemble(good) == (len(good), 0)
    assert assemble(bad) == (0, len(bad))


def test_fp4_fp6_pass_counts():
    """Half the passes when neither operand is fp8/bf8 (the sanitizer's hazard waits use them)."""
    info = get_target("gfx950").mfma("v_mfma_scale_f32_32x32x64_f8f6f4")
    assert [info.passes_for(a, b) for a, b in [(0, 0), (4, 0), (1, 4), (4, 4), (2, 3)]] == [16, 16, 16, 8, 8]


# ----------------------------------------------------------------------------- LLVM-compiled scale bytes

_SCALE_SEL_IR = """
declare <4 x float> @llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4.v8i32.v8i32(<8 x i32>, <8 x i32>, <4 x float>,
                                                                              i32, i32, i32, i32, i32, i32)
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @k(ptr addrspace(1) %out, ptr addrspace(1) %a, ptr addrspace(1) %b,
                             ptr addrspace(1) %sa, ptr addrspace(1) %sb) {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %pa = getelementptr <8 x i32>, ptr addrspace(1) %a, i32 %l
  %va = load <8 x i32>, ptr addrspace(1) %pa
  %pb = getelementptr <8 x i32>, ptr addrspace(1) %b, i32 %l
  %vb = load <8 x i32>, ptr addrspace(1) %pb
  %psa = getelementptr i32, ptr addrspace(1) %sa, i32 %l
  %xa = load i32, ptr addrspace(1) %psa
  %psb = getelementptr i32, ptr addrspace(1) %sb, i32 %l
  %xb = load i32, ptr addrspace(1) %psb
""" + "".join(f"""
  %r{s} = call <4 x float> @llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4.v8i32.v8i32(<8 x i32> %va, <8 x i32> %vb,
            <4 x float> zeroinitializer, i32 0, i32 0, i32 {s}, i32 %xa, i32 {3 - s}, i32 %xb)
  %l{s} = add i32 %l, {64 * s}
  %o{s} = getelementptr <4 x float>, ptr addrspace(1) %out, i32 %l{s}
  store <4 x float> %r{s}, ptr addrspace(1) %o{s}
""" for s in range(4)) + "  ret void\n}\n"


@pytest.mark.skipif(shutil.which("llc-22") is None or shutil.which("ld.lld-22") is None,
                    reason="llc-22 / ld.lld-22 not installed (apt-get install llvm-22 lld-22)")
def test_llvm_scale_byte_selects_match(tmp_path):
    """LLVM 22 lowers ``llvm.amdgcn.mfma.scale.*``'s scale_sel (byte 0..3 of each scale VGPR) to
    op_sel/op_sel_hi; the emulator runs LLVM's code object and picks the same bytes (all four, both
    scale sources), against the numpy model of the scaled product."""
    from isagen.runtime.emu import Device
    (tmp_path / "k.ll").write_text(_SCALE_SEL_IR)
    subprocess.run(["llc-22", "-mtriple=amdgcn-amd-amdhsa", "-mcpu=gfx950", "-filetype=obj", str(tmp_path / "k.ll"),
                    "-o", str(tmp_path / "k.o")], check=True)
    subprocess.run(["ld.lld-22", "-shared", str(tmp_path / "k.o"), "-o", str(tmp_path / "k.co")], check=True)
    name = "v_mfma_scale_f32_16x16x128_f8f6f4"
    s = M.spec(name, "gfx950")
    A = random_codes("fp8", (s.m, s.k))
    B = random_codes("fp8", (s.n, s.k))
    a, b = pack_operand(A, s.m, s.k, 0), pack_operand(B, s.n, s.k, 0)
    sa = RNG.integers(118, 137, (64, 4)).astype(np.uint8)          # [lane, byte]
    sb = RNG.integers(118, 137, (64, 4)).astype(np.uint8)
    dev = Device("gfx950", sanitize=True)
    mod = dev.load_module((tmp_path / "k.co").read_bytes())
    lanes = lambda regs: np.ascontiguousarray(regs[:, 0, :].T)       # [lane, reg]: one <8 x i32> per lane
    words = lambda by: by.view(np.uint32)[:, 0].copy()                 # [lane, byte] -> one u32 per lane
    bufs = [dev.to_device(x) for x in (lanes(a), lanes(b), words(sa), words(sb))]
    out = dev.alloc(4 * 64 * 16, "out")
    reports = mod.launch("k", grid=(1, 1, 1), block=(64, 1, 1), args=[out, *bufs], on_error="collect")
    assert reports == []
    got = dev.from_device(out, (4, 64, 4), np.float32)               # [call, lane, reg]
    Av, Bv = decode(A, "fp8"), decode(B, "fp8")
    for sel in range(4):
        fa = np.array([[2.0 ** (int(sa[(k // 32) * s.m + i, sel]) - 127) for k in range(s.k)] for i in range(s.m)])
        fb = np.array([[2.0 ** (int(sb[(k // 32) * s.n + j, 3 - sel]) - 127) for k in range(s.k)] for j in range(s.n)])
        want = (Av * fa) @ (Bv * fb).T
        d = got[sel].T[:, None, :].astype(np.float32).view(np.uint32)   # [reg, 1, lane]
        np.testing.assert_allclose(unpack_d(d, s.m), want, rtol=2e-6, atol=1e-30)
