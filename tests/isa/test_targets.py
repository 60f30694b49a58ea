"""The target table against the vendors' published numbers and LLVM's limits."""

import pytest

from isagen.errors import TargetError
from isagen.targets import TARGETS, get_target

# Data-sheet figures (AMD Instinct product pages): dense peak TFLOPs without sparsity, HBM TB/s.
DATASHEET = {
    "MI300X": {"bf16": 1307.4, "fp8": 2614.9, "hbm": 5.3, "cus": 304},
    "MI325X": {"bf16": 1307.4, "fp8": 2614.9, "hbm": 6.0, "cus": 304},
    "MI355X": {"bf16": 2516.6, "fp8": 5033.2, "hbm": 8.0, "cus": 256},
    "MI350X": {"bf16": 2306.9, "fp8": 4613.7, "hbm": 8.0, "cus": 256},
}


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_products_match_data_sheets(target):
    for product in get_target(target).products:
        sheet = DATASHEET[product.name]
        assert product.peak_bf16_tflops == pytest.approx(sheet["bf16"], rel=2e-3)
        assert product.peak_fp8_tflops == pytest.approx(sheet["fp8"], rel=2e-3)
        assert product.hbm_tb_s == sheet["hbm"]
        assert product.cus == sheet["cus"]
        assert product.xcds == 8


def test_register_file_and_lds():
    g942, g950 = get_target("gfx942"), get_target("gfx950")
    for t in (g942, g950):
        assert t.wave_size == 64
        assert t.unified_regs_per_lane == 512 and t.max_arch_vgprs == 256 and t.max_agprs == 256
        assert t.max_sgprs == 102
    assert g942.lds_bytes == 65536 and g950.lds_bytes == 163840
    assert g942.lds_dma_widths == (1, 2, 4) and g950.lds_dma_widths == (1, 2, 4, 12, 16)
    assert g942.fp8_format == "fnuz" and g950.fp8_format == "ocp"
    assert g942.products[0].cus // g942.products[0].xcds == 38
    assert g950.products[0].cus // g950.products[0].xcds == 32


def test_mfma_rates_agree_with_peak():
    """An MFMA's FLOPs / cycles x 4 SIMDs must equal the product's FLOP per CU per clock."""
    for t in TARGETS.values():
        p = t.flagship
        for name, rate in (("bf16", p.bf16_flop_per_cu_clk), ("fp8", p.fp8_flop_per_cu_clk)):
            best = max(i.flops * t.simds_per_cu / i.cycles for i in t.mfmas
                       if i.in_type == name or (name == "fp8" and i.in_type == "f8f6f4"))
            assert best == rate, (t.name, name)


def test_mfma_support_per_target():
    g942, g950 = get_target("gfx942"), get_target("gfx950")
    assert g942.has_mfma("v_mfma_f32_16x16x16_bf16") and g950.has_mfma("v_mfma_f32_16x16x16_bf16")
    assert not g942.has_mfma("v_mfma_f32_16x16x32_bf16") and g950.has_mfma("v_mfma_f32_16x16x32_bf16")
    assert g942.has_mfma("v_mfma_f32_16x16x8_xf32") and not g950.has_mfma("v_mfma_f32_16x16x8_xf32")
    assert g950.find_mfma("bf16", 16, 16)[0].k == 32
    with pytest.raises(TargetError, match="gfx942 has no MFMA 'v_mfma_f32_32x32x16_bf16'"):
        g942.mfma("v_mfma_f32_32x32x16_bf16")


def test_target_lookup():
    assert get_target("gfx942:sramecc+:xnack-").name == "gfx942"
    assert get_target("GFX950").name == "gfx950"
    assert get_target("gfx942").target_id == "gfx942:sramecc+:xnack-"
    with pytest.raises(TargetError, match="unsupported target 'gfx90a'"):
        get_target("gfx90a")


@pytest.mark.parametrize("target", list(TARGETS))
def test_has_tr16_read_agrees_with_the_instruction_table(target):
    from isagen.isa.table import isa_table
    t = get_target(target)
    assert t.has_tr16_read == ("ds_read_b64_tr_b16" in isa_table(t).defs)


def test_mfmas_outside_the_instruction_table_match_llvm():
    """The legacy MFMAs (multi-block, f32 and f64 inputs) the instruction table does not offer: LLVM
    accepts their register counts, and their passes are llvm-mca's reciprocal throughput for gfx942
    (as tests/isa/test_isa_encoding.py checks for the instruction-table ones)."""
    import re
    import shutil
    import subprocess
    mca = shutil.which("llvm-mca-19")
    if mca is None:
        pytest.skip("llvm-mca-19 not installed (apt-get install llvm-19)")
    t = get_target("gfx942")
    legacy = [i for i in t.mfmas if not i.in_isa_table]
    assert len(legacy) >= 16

    def regs(file, first, n):
        return f"{file}{first}" if n == 1 else f"{file}[{first}:{first + n - 1}]"
    text = "".join(f"{i.mnemonic} {regs('a', 0, i.c_regs)}, {regs('v', 0, i.a_regs)}, "
                   f"{regs('v', 16, i.b_regs)}, {regs('a', 0, i.c_regs)}\n" for i in legacy)
    run = subprocess.run([mca, "-mtriple=amdgcn", "-mcpu=gfx942", "-instruction-info", "-iterations=1"],
                         input=text, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    rows = re.findall(r"^\s*\d+\s+\d+\s+([\d.]+)\s.*?(v_mfma\w+)", run.stdout, re.MULTILINE)
    assert [name for _, name in rows] == [i.mnemonic for i in legacy]
    for info, (throughput, _) in zip(legacy, rows):
        assert float(throughput) == info.passes, f"{info.mnemonic}: passes {info.passes}, LLVM {throughput}"


def test_every_mfma_has_one_entry():
    from isagen.targets import ALL_MFMAS, mfma_targets
    for t in TARGETS.values():
        names = [i.mnemonic for i in t.mfmas]
        assert len(names) == len(set(names)), t.name
        for info in t.mfmas:
            assert ALL_MFMAS[info.mnemonic] is info and t.name in mfma_targets(info.mnemonic)
    assert mfma_targets("v_mfma_f32_8x8x8_bf16") == ()
