"""The GPU targets isagen generates code for: gfx942 (CDNA3) and gfx950 (CDNA4).

One table holds every per-architecture fact a builder, a checker or a report needs.  Builders ask
the target (``target.lds_bytes``, ``target.mfma("v_mfma_f32_16x16x32_bf16")``); nothing else in
isagen hard-codes an architecture number.

Sources: AMD's CDNA3/CDNA4 ISA guides and product data sheets, LLVM's AMDGPU backend
(AMDGPUBaseInfo.cpp for register/LDS granules and limits), the AMD Matrix Instruction Calculator
for MFMA cycles; docs/targets.md lists every field, where it comes from and what a new target needs.
Peak rates are derived (CUs x FLOP/CU/clock x clock) and checked against the data sheets in tests.

This is the only code file that spells processor names: everything else takes them from ``TARGETS``,
``DEFAULT_TARGET`` or a ``Target``'s fields (tests/test_no_arch_literals.py enforces it).
"""

from __future__ import annotations

from dataclasses import field

from isagen.errors import TargetError
from isagen.records import record, value_methods


@value_methods
@record(frozen=True, repr=False, eq=False)
class MfmaInfo:
    """One matrix instruction: shape, operand types, register counts, issue passes and modifiers.

    This is isagen's one MFMA table: the instruction table, the hazard checks, the emulator and its
    sanitizer all look MFMAs up here (through ``Target.mfma``); the emulator adds only operand lane
    layouts and numerics.

    ``passes`` is LLVM's unit (one pass = 4 cycles of the SIMD's matrix core); the hazard tables are
    written in passes.  ``a_regs``/``b_regs``/``c_regs`` are per-lane dword counts of the A, B and C/D
    operands.  ``xdl`` is true for every MFMA except the f32/f64-input ones (the hazard rules differ).
    ``blocks`` is the number of independent output blocks (the legacy ``_2b``/``_4b``/``_16b`` forms);
    ``cbsz_abid``/``blgp`` say whether the A-block broadcast and B lane-pattern modifiers exist (for
    f64, BLGP's bits negate A/B/C).  ``in_isa_table`` is false for the legacy multi-block, f32- and
    f64-input forms: the architecture has them (the decoder and emulator run them) but isagen's
    instruction table does not offer them to builders yet.
    """

    mnemonic: str
    m: int
    n: int
    k: int
    in_type: str          # element type of A and B: bf16, f16, fp8, bf8, fp8_bf8, bf8_fp8 (A_B), i8,
                          # f8f6f4 (format chosen by cbsz/blgp), xf32
    out_type: str         # accumulator type: f32 (i32 for i8)
    a_regs: int
    b_regs: int
    c_regs: int
    passes: int
    xdl: bool = True
    blocks: int = 1
    cbsz_abid: bool = False
    blgp: bool = False
    in_isa_table: bool = True

    @property
    def cycles(self) -> int:
        return 4 * self.passes

    def passes_for(self, cbsz: int = 0, blgp: int = 0) -> int:
        """Passes with these modifiers: the f8f6f4 forms take half of ``passes`` (the fp8 figure)
        when neither A nor B is fp8/bf8 (cbsz and blgp >= 2: fp6/bf6/fp4; LLVM's SISchedule.td)."""
        if self.in_type == "f8f6f4" and cbsz >= 2 and blgp >= 2:
            return self.passes // 2
        return self.passes

    @property
    def flops(self) -> int:
        """Floating-point operations of one wave-level instruction (2*M*N*K per output block)."""
        return 2 * self.m * self.n * self.k * self.blocks


@value_methods
@record(frozen=True, repr=False, eq=False)
class GemmDefaults:
    """What the GEMM generator uses on a target when a spec leaves a tuning parameter at 0."""

    block_k: int    # K per pipeline stage: two stages of 256x256 must fit the target's LDS
    group_m: int    # tile-rows the chiplet-aware order walks together
    chunk: int      # consecutive tiles each XCD takes in the chiplet-aware order


@value_methods
@record(frozen=True, repr=False, eq=False)
class Product:
    """A shipping accelerator of a target, for roofline numbers in reports."""

    name: str
    cus: int
    xcds: int
    clock_mhz: int          # peak engine clock
    hbm_tb_s: float         # peak HBM bandwidth, TB/s
    hbm_gib: int
    bf16_flop_per_cu_clk: int
    fp8_flop_per_cu_clk: int

    @property
    def peak_bf16_tflops(self) -> float:
        """Dense BF16 peak (no sparsity)."""
        return self.cus * self.bf16_flop_per_cu_clk * self.clock_mhz * 1e6 / 1e12

    @property
    def peak_fp8_tflops(self) -> float:
        """Dense FP8 peak (no sparsity)."""
        return self.cus * self.fp8_flop_per_cu_clk * self.clock_mhz * 1e6 / 1e12


@value_methods
@record(frozen=True, repr=False, eq=False)
class Target:
    """Per-architecture facts.  See the module docstring for sources."""

    name: str                       # LLVM processor name, e.g. "gfx942"
    family: str                     # "CDNA3" / "CDNA4"
    products: tuple[Product, ...]
    wave_size: int = 64
    # --- unified VGPR/AGPR file (gfx90a+): 512 dwords per lane, arch VGPRs first, AGPRs from accum_offset
    unified_regs_per_lane: int = 512
    max_arch_vgprs: int = 256
    max_agprs: int = 256
    vgpr_alloc_granule: int = 8     # registers are allocated to a wave in blocks of 8
    accum_offset_granule: int = 4   # .amdhsa_accum_offset is a multiple of 4 in [4, 256]
    # --- SGPRs
    max_sgprs: int = 102            # addressable SGPRs per wave (s0..s101); VCC is s[106:107]
    sgprs_per_simd: int = 800
    sgpr_alloc_granule: int = 16
    # --- waves
    simds_per_cu: int = 4
    max_waves_per_simd: int = 8
    max_workgroup_size: int = 1024
    # --- LDS
    lds_bytes: int = 65536          # per CU, and the most one workgroup may allocate
    lds_banks: int = 32             # 4-byte banks
    lds_alloc_granule: int = 512    # bytes; [verify] for gfx950
    # --- memory instructions
    lds_dma_widths: tuple[int, ...] = (1, 2, 4)  # bytes per lane of buffer_load ... lds
    max_vmcnt: int = 63
    max_lgkmcnt: int = 15
    has_tr16_read: bool = False     # ds_read_b64_tr_b16 (transposing LDS read), CDNA4
    # --- data types
    fp8_format: str = "fnuz"        # CDNA3: e4m3fnuz/e5m2fnuz; CDNA4: OCP e4m3fn/e5m2
    mfmas: tuple[MfmaInfo, ...] = field(default_factory=tuple)
    # --- code objects and toolchains
    e_flags_mach: int = 0           # EF_AMDGPU_MACH value of the ELF header (AMDGPUUsage)
    llvm_min_major: int = 0         # first LLVM release whose AMDGPU backend knows the processor
    # --- generator tuning
    gemm_defaults: GemmDefaults = GemmDefaults(block_k=32, group_m=4, chunk=16)

    # ------------------------------------------------------------------ derived
    @property
    def target_id(self) -> str:
        """The target ID production devices run: SRAM ECC on, XNACK off."""
        return f"{self.name}:sramecc+:xnack-"

    @property
    def flagship(self) -> Product:
        return self.products[0]

    def mfma(self, mnemonic: str) -> MfmaInfo:
        """The table's entry for ``mnemonic``; a TargetError naming both if this target lacks it."""
        for info in self.mfmas:
            if info.mnemonic == mnemonic:
                return info
        known = ", ".join(m.mnemonic for m in self.mfmas)
        raise TargetError(f"{self.name} has no MFMA '{mnemonic}' (it has: {known})")

    def has_mfma(self, mnemonic: str) -> bool:
        return any(m.mnemonic == mnemonic for m in self.mfmas)

    def find_mfma(self, in_type: str, m: int, n: int) -> list[MfmaInfo]:
        """MFMAs a builder can emit (in the instruction table) with the given input type and output
        tile, largest K first."""
        found = [i for i in self.mfmas if i.in_isa_table and i.in_type == in_type and i.m == m and i.n == n]
        return sorted(found, key=lambda i: -i.k)


# --------------------------------------------------------------------------- MFMA tables
# Cycles from the AMD Matrix Instruction Calculator (CDNA3); CDNA4 rates from the MI355X data sheet
# (peak FLOP/CU/clock).  Passes are LLVM's: the ReleaseAtCycles of the MFMA's write resource in
# SISchedule.td (SIDPGFX942FullSpeedModel / SIDPGFX950FullSpeedModel), which GCNHazardRecognizer uses
# for its wait-state counts: 16x16x{16,32,64} are 4 passes and 32x32x{8,16,32} 8 passes on both
# targets; f8f6f4 K=128/K=64 are 8/16 passes when either input is fp8/bf8 (cbsz or blgp <= 1, the
# default) and 4/8 passes for fp6/fp4 inputs (the table keeps the fp8 figure, the conservative one).
# Register counts are checked by assembling every MFMA with LLVM (tests/isa/test_isa_encoding.py).

# The legacy forms (multi-block, f32 and f64 inputs; CDNA1-era names both targets keep) take their
# passes from the Matrix Instruction Calculator's CDNA3 cycle counts.

def _mfma(mn: str, m: int, n: int, k: int, t: str, a: int, b: int, c: int, passes: int,
          xdl: bool = True, out: str = "f32") -> MfmaInfo:
    return MfmaInfo(mn, m, n, k, t, out, a, b, c, passes, xdl)


def _legacy(mn: str, m: int, n: int, k: int, t: str, a: int, b: int, c: int, passes: int, *,
            blocks: int, xdl: bool, cbsz_abid: bool, blgp: bool, out: str = "f32") -> MfmaInfo:
    return MfmaInfo(mn, m, n, k, t, out, a, b, c, passes, xdl, blocks, cbsz_abid, blgp,
                    in_isa_table=False)


_CDNA3_MFMAS = (
    _mfma("v_mfma_f32_16x16x16_bf16", 16, 16, 16, "bf16", 2, 2, 4, 4),
    _mfma("v_mfma_f32_32x32x8_bf16", 32, 32, 8, "bf16", 2, 2, 16, 8),
    _mfma("v_mfma_f32_16x16x16_f16", 16, 16, 16, "f16", 2, 2, 4, 4),
    _mfma("v_mfma_f32_32x32x8_f16", 32, 32, 8, "f16", 2, 2, 16, 8),
    _mfma("v_mfma_f32_16x16x32_fp8_fp8", 16, 16, 32, "fp8", 2, 2, 4, 4),
    _mfma("v_mfma_f32_16x16x32_bf8_bf8", 16, 16, 32, "bf8", 2, 2, 4, 4),
    _mfma("v_mfma_f32_16x16x32_fp8_bf8", 16, 16, 32, "fp8_bf8", 2, 2, 4, 4),
    _mfma("v_mfma_f32_16x16x32_bf8_fp8", 16, 16, 32, "bf8_fp8", 2, 2, 4, 4),
    _mfma("v_mfma_f32_32x32x16_fp8_fp8", 32, 32, 16, "fp8", 2, 2, 16, 8),
    _mfma("v_mfma_f32_32x32x16_bf8_bf8", 32, 32, 16, "bf8", 2, 2, 16, 8),
    _mfma("v_mfma_f32_32x32x16_fp8_bf8", 32, 32, 16, "fp8_bf8", 2, 2, 16, 8),
    _mfma("v_mfma_f32_32x32x16_bf8_fp8", 32, 32, 16, "bf8_fp8", 2, 2, 16, 8),
    _mfma("v_mfma_i32_16x16x32_i8", 16, 16, 32, "i8", 2, 2, 4, 4, out="i32"),
    _mfma("v_mfma_i32_32x32x16_i8", 32, 32, 16, "i8", 2, 2, 16, 8, out="i32"),
)

_CDNA3_ONLY_MFMAS = (
    _mfma("v_mfma_f32_16x16x8_xf32", 16, 16, 8, "xf32", 2, 2, 4, 4),
    _mfma("v_mfma_f32_32x32x4_xf32", 32, 32, 4, "xf32", 2, 2, 16, 8),
)

_CDNA4_NEW_MFMAS = (
    _mfma("v_mfma_f32_16x16x32_bf16", 16, 16, 32, "bf16", 4, 4, 4, 4),
    _mfma("v_mfma_f32_32x32x16_bf16", 32, 32, 16, "bf16", 4, 4, 16, 8),
    _mfma("v_mfma_f32_16x16x32_f16", 16, 16, 32, "f16", 4, 4, 4, 4),
    _mfma("v_mfma_f32_32x32x16_f16", 32, 32, 16, "f16", 4, 4, 16, 8),
    _mfma("v_mfma_i32_16x16x64_i8", 16, 16, 64, "i8", 4, 4, 4, 4, out="i32"),
    _mfma("v_mfma_i32_32x32x32_i8", 32, 32, 32, "i8", 4, 4, 16, 8, out="i32"),
    _mfma("v_mfma_f32_16x16x128_f8f6f4", 16, 16, 128, "f8f6f4", 8, 8, 4, 8),
    _mfma("v_mfma_f32_32x32x64_f8f6f4", 32, 32, 64, "f8f6f4", 8, 8, 16, 16),
    # block-scaled (MX) forms: two extra VGPR operands carry the E8M0 scales of A and B
    _mfma("v_mfma_scale_f32_16x16x128_f8f6f4", 16, 16, 128, "f8f6f4", 8, 8, 4, 8),
    _mfma("v_mfma_scale_f32_32x32x64_f8f6f4", 32, 32, 64, "f8f6f4", 8, 8, 16, 16),
)

_LEGACY_MFMAS = (
    _legacy("v_mfma_f32_32x32x1_2b_f32", 32, 32, 1, "f32", 1, 1, 32, 16, blocks=2, xdl=False, cbsz_abid=True,
            blgp=True),
    _legacy("v_mfma_f32_16x16x1_4b_f32", 16, 16, 1, "f32", 1, 1, 16, 8, blocks=4, xdl=False, cbsz_abid=True, blgp=True),
    _legacy("v_mfma_f32_4x4x1_16b_f32", 4, 4, 1, "f32", 1, 1, 4, 2, blocks=16, xdl=False, cbsz_abid=True, blgp=True),
    _legacy("v_mfma_f32_32x32x2_f32", 32, 32, 2, "f32", 1, 1, 16, 16, blocks=1, xdl=False, cbsz_abid=False, blgp=True),
    _legacy("v_mfma_f32_16x16x4_f32", 16, 16, 4, "f32", 1, 1, 4, 8, blocks=1, xdl=False, cbsz_abid=False, blgp=True),
    _legacy("v_mfma_f32_32x32x4_2b_f16", 32, 32, 4, "f16", 2, 2, 32, 16, blocks=2, xdl=True, cbsz_abid=True, blgp=True),
    _legacy("v_mfma_f32_16x16x4_4b_f16", 16, 16, 4, "f16", 2, 2, 16, 8, blocks=4, xdl=True, cbsz_abid=True, blgp=True),
    _legacy("v_mfma_f32_4x4x4_16b_f16", 4, 4, 4, "f16", 2, 2, 4, 2, blocks=16, xdl=True, cbsz_abid=True, blgp=True),
    _legacy("v_mfma_f32_32x32x4_2b_bf16", 32, 32, 4, "bf16", 2, 2, 32, 16, blocks=2, xdl=True, cbsz_abid=True,
            blgp=True),
    _legacy("v_mfma_f32_16x16x4_4b_bf16", 16, 16, 4, "bf16", 2, 2, 16, 8, blocks=4, xdl=True, cbsz_abid=True,
            blgp=True),
    _legacy("v_mfma_f32_4x4x4_16b_bf16", 4, 4, 4, "bf16", 2, 2, 4, 2, blocks=16, xdl=True, cbsz_abid=True, blgp=True),
    _legacy("v_mfma_i32_32x32x4_2b_i8", 32, 32, 4, "i8", 1, 1, 32, 16, blocks=2, xdl=True, cbsz_abid=True, blgp=True,
            out="i32"),
    _legacy("v_mfma_i32_16x16x4_4b_i8", 16, 16, 4, "i8", 1, 1, 16, 8, blocks=4, xdl=True, cbsz_abid=True, blgp=True,
            out="i32"),
    _legacy("v_mfma_i32_4x4x4_16b_i8", 4, 4, 4, "i8", 1, 1, 4, 2, blocks=16, xdl=True, cbsz_abid=True, blgp=True,
            out="i32"),
    _legacy("v_mfma_f64_16x16x4_f64", 16, 16, 4, "f64", 2, 2, 8, 8, blocks=1, xdl=False, cbsz_abid=False, blgp=True,
            out="f64"),
    _legacy("v_mfma_f64_4x4x4_4b_f64", 4, 4, 4, "f64", 2, 2, 2, 4, blocks=4, xdl=False, cbsz_abid=False, blgp=True,
            out="f64"),
)

MI300X = Product("MI300X", cus=304, xcds=8, clock_mhz=2100, hbm_tb_s=5.3, hbm_gib=192,
                 bf16_flop_per_cu_clk=2048, fp8_flop_per_cu_clk=4096)
MI325X = Product("MI325X", cus=304, xcds=8, clock_mhz=2100, hbm_tb_s=6.0, hbm_gib=256,
                 bf16_flop_per_cu_clk=2048, fp8_flop_per_cu_clk=4096)
MI355X = Product("MI355X", cus=256, xcds=8, clock_mhz=2400, hbm_tb_s=8.0, hbm_gib=288,
                 bf16_flop_per_cu_clk=4096, fp8_flop_per_cu_clk=8192)
MI350X = Product("MI350X", cus=256, xcds=8, clock_mhz=2200, hbm_tb_s=8.0, hbm_gib=288,
                 bf16_flop_per_cu_clk=4096, fp8_flop_per_cu_clk=8192)

GFX942 = Target(
    name="gfx942", family="CDNA3", products=(MI300X, MI325X),
    lds_bytes=65536, lds_banks=32, lds_dma_widths=(1, 2, 4), has_tr16_read=False, fp8_format="fnuz",
    mfmas=_CDNA3_MFMAS + _CDNA3_ONLY_MFMAS + _LEGACY_MFMAS,
    e_flags_mach=0x04C, llvm_min_major=17,
    # 64 KiB of LDS cannot double-buffer 256x256x64, hence block_k 32
    gemm_defaults=GemmDefaults(block_k=32, group_m=4, chunk=16),
)

GFX950 = Target(
    name="gfx950", family="CDNA4", products=(MI355X, MI350X),
    lds_bytes=163840, lds_banks=64, lds_dma_widths=(1, 2, 4, 12, 16), has_tr16_read=True, fp8_format="ocp",
    mfmas=_CDNA3_MFMAS + _CDNA4_NEW_MFMAS + _LEGACY_MFMAS,
    e_flags_mach=0x04F, llvm_min_major=20,
    gemm_defaults=GemmDefaults(block_k=64, group_m=8, chunk=64),
)

TARGETS: dict[str, Target] = {t.name: t for t in (GFX942, GFX950)}

#: the target a command, launch or decode uses when none is named
DEFAULT_TARGET: str = GFX942.name

#: every MFMA any target has, by mnemonic (one entry per instruction: the facts do not differ
#: between targets that share an instruction)
ALL_MFMAS: dict[str, MfmaInfo] = {info.mnemonic: info for t in TARGETS.values() for info in t.mfmas}

#: EF_AMDGPU_MACH values of the ELF header (AMDGPUUsage "AMDGPU ELF Header"): isagen's targets and the
#: older processors a foreign code object may name, so a report can say which processor it is for
ELF_MACHINES: dict[int, str] = {
    **{t.e_flags_mach: t.name for t in TARGETS.values()},
    0x040: "gfx940", 0x041: "gfx941", 0x03F: "gfx90a", 0x030: "gfx908", 0x02F: "gfx906", 0x02C: "gfx900",
}


def mfma_targets(mnemonic: str) -> tuple[str, ...]:
    """Names of the targets that have the MFMA ``mnemonic`` (empty if none does)."""
    return tuple(t.name for t in TARGETS.values() if t.has_mfma(mnemonic))


# the target-ID features LLVM knows for these processors (AMDGPUUsage, "Target Features"): each may be
# given once, as feature+ (on) or feature- (off); one left out means "any"
TARGET_FEATURES = ("sramecc", "xnack")


def parse_target_id(text: str) -> tuple[Target, dict[str, str]]:
    """``'gfx942:sramecc+:xnack-'`` -> (the target, {"sramecc": "+", "xnack": "-"}), parsed as LLVM
    does: a known processor, then known features with + or -, each at most once."""
    if not isinstance(text, str):
        raise TargetError(f"a target is a name such as {DEFAULT_TARGET}, got {type(text).__name__}")
    proc, *features = text.strip().split(":")
    base = proc.strip().lower()
    if base not in TARGETS:
        raise TargetError(f"unsupported target '{text}' (supported: {', '.join(TARGETS)})")
    found: dict[str, str] = {}
    for feature in features:
        name, sign = feature[:-1], feature[-1:]
        if name not in TARGET_FEATURES or sign not in ("+", "-"):
            raise TargetError(f"target '{text}': unknown feature '{feature}' (a target ID takes "
                              f"{', '.join(f'{f}+ or {f}-' for f in TARGET_FEATURES)})")
        if name in found:
            raise TargetError(f"target '{text}': feature {name} given twice")
        found[name] = sign
    return TARGETS[base], found


def get_target(name: str | Target) -> Target:
    """Look a target up by name; accepts a full target ID such as 'gfx942:sramecc+:xnack-' (its
    features are checked, see ``parse_target_id``, and otherwise ignored: use ``build_target`` where
    code is generated for the ID)."""
    if isinstance(name, Target):
        return name
    return parse_target_id(name)[0]


def build_target(name: str | Target) -> Target:
    """The target a kernel is built for.  isagen writes code objects for the ID production devices run,
    ``<proc>:sramecc+:xnack-`` (``Target.target_id``); a target ID asking for other features (xnack+:
    the page-migration mode; sramecc-) is refused rather than silently built as something else."""
    if isinstance(name, Target):
        return name
    target, features = parse_target_id(name)
    production = {f[:-1]: f[-1] for f in target.target_id.split(":")[1:]}
    other = [f"{k}{v}" for k, v in features.items() if production.get(k) != v]
    if other:
        raise TargetError(f"target '{name}': isagen builds {target.target_id} code objects only; "
                          f"{', '.join(other)} is not supported")
    return target
