"""``isagen run``: every bundled spec passes in the emulator against its torch reference, typed with no
arguments (its sizes, and where they come from, on the first line); a wrong reference fails with exit
code 1; the comparison, reference evaluation, size origins, the spec's ``emulator_shapes:`` and argument
parsing on their own."""

from __future__ import annotations

import pytest
import torch

import isagen
from isagen.cli import main as cli_main
from isagen.errors import SpecError
from isagen.runtime import run
from isagen.targets import DEFAULT_TARGET


@pytest.fixture(autouse=True)
def env(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "run-cache"))
    monkeypatch.delenv("ISAGEN_BACKEND", raising=False)


def test_compare_uses_the_dtype_tolerance():
    want = torch.tensor([1.0, -2.0, 0.0, float("nan"), float("inf")], dtype=torch.float64)
    got = torch.tensor([1.0 + 1e-7, -2.0, 5e-6, float("nan"), float("inf")])
    c = run.compare("y", got, want, "f32")
    assert c.ok and c.mismatches == 0 and (c.rtol, c.atol) == (1.3e-6, 1e-5)
    assert c.max_abs == pytest.approx(5e-6, rel=1e-3)
    bad = run.compare("y", torch.tensor([1.0, -2.01, 0.0]), want[:3], "f32")
    assert not bad.ok and bad.mismatches == 1 and bad.max_rel == pytest.approx(0.005, rel=1e-2)
    # the same 0.5% error is inside bf16's tolerance (one bf16 rounding is up to 0.39%)
    assert run.compare("y", torch.tensor([1.0, -2.01, 0.0]), want[:3], "bf16").ok
    nan_for_number = run.compare("y", torch.tensor([float("nan")]), torch.tensor([1.0], dtype=torch.float64), "f32")
    assert not nan_for_number.ok


def test_reference_and_arguments_errors():
    class K:
        name, spec_path = "k", "specs/k.yaml"
        reference = "alpha * x + w"
        params: dict = {}          # a Kernel's resolved parameters (the reference's scope names them)
        target = "gfx942"          # ... and its target
        launch = type("L", (), {"tensors": ()})()
    with pytest.raises(SpecError, match=r"specs/k.yaml: reference 'alpha \* x \+ w' failed: NameError"):
        run.reference(K, {"x": torch.ones(2)}, {"alpha": 1.0}, {"n": 2})
    assert run.parse_assignments(["n=4096", "m=0x10,k=8"], "--shape", run._int) == {"n": 4096, "m": 16, "k": 8}
    with pytest.raises(SpecError, match="--shape n: expected name=value"):
        run.parse_assignments(["n"], "--shape", run._int)
    with pytest.raises(SpecError, match="'big' is not a number"):
        run.parse_assignments(["n=big"], "--shape", run._int)


# --------------------------------------------------------------------------- end to end (the emulator)
def _bundled():
    from isagen.builders.spec import bundled_specs_dir
    return sorted(p.stem for p in bundled_specs_dir().glob("*.yaml"))


@pytest.mark.parametrize("spec", _bundled())
def test_every_bundled_spec_passes_as_typed(spec, capsys):
    """``isagen run SPEC`` with no arguments, as the README has it: the spec's own sizes (on the
    emulator its emulator_shapes: where it has them), named with their origin on the first line."""
    from isagen.api import resolve_spec
    from isagen.builders.spec import load_spec
    loaded = load_spec(resolve_spec(spec))
    assert cli_main(["run", spec]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    sizes = {**loaded.shapes, **loaded.emulator_shapes}
    target = DEFAULT_TARGET if DEFAULT_TARGET in loaded.targets else loaded.targets[0]     # MXFP8: gfx950 only
    assert first.startswith(f"{spec} [{target}, emu] " + " ".join(f"{k}={v}" for k, v in sizes.items()))
    if loaded.emulator_shapes:
        hw = " ".join(f"{k}={v}" for k, v in loaded.shapes.items())
        assert f"(the spec's emulator_shapes; on hardware {hw}): grid" in first
    else:
        assert "(the spec's shapes): grid" in first
    assert out.splitlines()[-1] == "PASS" and "max abs err" in out and "emulated in" in out
    if loaded.kernel == "gemm_bf16":            # its output sums k products: the bound says so
        assert "x u(f32) x ref(|inputs|), k=" in out


def test_size_origins_on_the_first_line(capsys):
    assert cli_main(["run", "axpy_f32"]) == 0
    assert capsys.readouterr().out.startswith("axpy_f32 [gfx942, emu] n=1048576 (the spec's shapes): grid (512, 1, 1)")
    assert cli_main(["run", "axpy_f32", "--shape", "n=5003"]) == 0
    assert capsys.readouterr().out.startswith("axpy_f32 [gfx942, emu] n=5003 (--shape): grid (3, 1, 1)")
    # a partial --shape: the rest from emulator_shapes, the hardware sizes named
    assert cli_main(["run", "gemm_bf16_256x128", "--shape", "k=64"]) == 0
    assert capsys.readouterr().out.startswith(
        "gemm_bf16_256x128 [gfx942, emu] m=512 n=256 k=64 (m n: the spec's emulator_shapes; k: --shape; "
        "on hardware m=8192 n=4096 k=8192): grid (4, 1, 1) x block (512, 1, 1)")


def test_size_origin_wording():
    assert run.size_origin(["n"], {}, {}, {"n": 4}) == "the spec's shapes"
    assert run.size_origin(["m", "k"], {"k": 8}, {"m": 2}, {"m": 64, "k": 64}) == \
        "m: the spec's emulator_shapes; k: --shape; on hardware m=64 k=64"


def test_emulator_shapes_field(tmp_path):
    from isagen.builders.spec import parse_spec
    base = "kernel: gemm_bf16\nname: g\ntargets: [gfx942]\nshapes: {m: 8192, n: 8192, k: 8192}\n"
    spec = parse_spec(base + "emulator_shapes: {m: 256, k: 64}\n", "g.yaml")
    assert spec.emulator_shapes == {"m": 256, "k": 64} and spec.shapes["m"] == 8192
    assert parse_spec(base, "g.yaml").emulator_shapes == {}
    for text, message in [
        ("emulator_shapes: 5", r"g.yaml:5: emulator_shapes: expected a mapping of shape: size, got the number 5"),
        ("emulator_shapes: {q: 1}", r"g.yaml:5: emulator_shapes.q: unknown shape 'q' for generator 'gemm_bf16'"),
        ("emulator_shapes: {m: -1}", r"emulator_shapes.m: expected a size \(integer >= 0\), got the number -1"),
        ("emulator_shapes: {m: true}", r"emulator_shapes.m: expected a size .* got the boolean true"),
        ("emulatr_shapes: {m: 1}", r"emulatr_shapes: unknown field \(did you mean 'emulator_shapes'\?\)"),
        ("shapes: false", r"shapes: expected a mapping of shape: size, got the boolean false"),
    ]:
        with pytest.raises(SpecError, match=message):
            parse_spec(base.replace("shapes: {m: 8192, n: 8192, k: 8192}\n", "") + text + "\n"
                       if text.startswith("shapes") else base + text + "\n", "g.yaml")


def test_overrides_and_explicit_backend(capsys):
    assert cli_main(["run", "add_bf16", "-D", "block=64", "-D", "unroll=2", "--target", "gfx942",
                     "--shape", "n=3001", "--backend", "emu", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "add_bf16 [gfx942, emu] n=3001 (--shape): grid (3, 1, 1) x block (64, 1, 1)" in out    # cdiv(3001, 64*8*2)


def test_a_wrong_reference_fails_with_exit_code_1(tmp_path, capsys):
    from isagen.builders.spec import bundled_specs_dir
    text = (bundled_specs_dir() / "axpy_f32.yaml").read_text().replace("reference: alpha * x + y",
                                                                      "reference: alpha * x - y")
    assert "alpha * x - y" in text
    path = tmp_path / "axpy_wrong.yaml"
    path.write_text(text)
    assert cli_main(["run", str(path), "--shape", "n=1000", "--scalar", "alpha=2"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "FAIL" and "y: max abs err" in out and "FAIL (" in out


def test_user_errors_exit_2(capsys):
    assert cli_main(["run", "axpy_f32", "--shape", "m=10"]) == 2
    assert "unknown size(s) m (it takes: n)" in capsys.readouterr().err
    assert cli_main(["run", "axpy_f32", "--scalar", "beta=1"]) == 2
    assert "unknown scalar(s) beta" in capsys.readouterr().err
    assert cli_main(["run", "axpy_f32", "--shape", "n=-5"]) == 2
    err = capsys.readouterr().err
    assert "axpy_f32: --shape n=-5: a size cannot be negative" in err and "Traceback" not in err


def test_hip_backend_without_a_gpu_is_one_line(capsys):
    from isagen.runtime.gpu import rocm_gpu_available
    ok, why = rocm_gpu_available()
    if ok:
        pytest.skip("this machine has a supported AMD GPU")
    assert cli_main(["run", "axpy_f32", "--shape", "n=100", "--backend", "hip"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"isagen: error: the hip backend needs a supported AMD GPU: {why} (use --backend emu)"


@pytest.mark.parametrize("spec,shapes", [
    ("attention_bf16", ["total_q=150", "total_kv=90", "b1=4"]),
    ("attention_bwd_bf16", ["total_q=150", "total_kv=90", "b1=4"]),
    ("attention_bwd_prep_bf16", ["total_q=150", "b1=4"]),
])
def test_varlen_specs_run_on_drawn_offsets(spec, shapes):
    """cu_seqlens inputs are drawn as offsets (0, non-decreasing, ending at the packed total: the
    contract's ``fill``), not as random integers, so ``isagen run -D varlen=true`` passes."""
    args = ["run", spec, "-D", "varlen=true", "--backend", "emu", "--target", "gfx950"]
    for s in shapes:
        args += ["--shape", s]
    assert cli_main(args) == 0
    kernel = isagen.build(spec, "gfx950", varlen=True)
    inputs = run.random_inputs(kernel, {"h": 2, "h_kv": 1, "total_q": 150, "total_kv": 90, "b1": 6}, seed=3)
    cu = inputs["cu_seqlens_q"]
    assert cu[0] == 0 and cu[-1] == 150 and bool((cu[1:] >= cu[:-1]).all()) and len(cu) == 6


def test_cpu_emulator_states_its_eta_up_front(monkeypatch, capsys):
    """On the CPU engine ``isagen run`` prints the launch's estimate as one line after the first line and
    before the results: its wave-instructions (the lone first workgroup's per wave times the waves) and
    its time.  The estimate comes after that first workgroup only, with the rest of the launch still to
    run; its count equals the launch's own (the workgroups of layer_norm do the same work) and its time
    is within a factor of 4 of the launch's measured wall time."""
    import re
    import time

    from isagen.runtime.emu import dispatch
    monkeypatch.setenv("ISAGEN_EMU_DEVICE", "cpu")         # (the CPU engine's estimate, whatever the suite runs on)
    # ... with the default engine choice: ISAGEN_EMU_CGEN=force (how the suite is also run) builds the native
    # code (generates its C, compiles or loads it) inside the first workgroup's batch, whose time then says
    # little of the later batches' (the estimate 5.6x over, measured, with the sanitizer on or off)
    monkeypatch.delenv("ISAGEN_EMU_CGEN", raising=False)
    events = []
    batch, note = dispatch.run_batch, dispatch.report_note
    monkeypatch.setattr(dispatch, "run_batch", lambda *a: (events.append("batch"), batch(*a)))
    monkeypatch.setattr(dispatch, "report_note", lambda text: (events.append("note"), note(text)))
    t0 = time.perf_counter()
    assert cli_main(["run", "layer_norm_bf16", "--backend", "emu", "--shape", "rows=1024",
                     "--shape", "hidden=1024"]) == 0                     # 64 workgroups of 4 waves
    wall = time.perf_counter() - t0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("layer_norm_bf16 [") and "grid (64, 1, 1) x block (256, 1, 1)" in lines[0]
    m = re.fullmatch(r"emulator \(cpu\): ~([\d,]+) wave-instructions \(([\d,]+) per wave x ([\d,]+) waves, from "
                     r"its first workgroup\), estimated ~([\d.]+) (s|min)", lines[1])
    assert m, lines
    est_insts, per_wave, waves = (int(g.replace(",", "")) for g in m.groups()[:3])
    est_s = float(m[4]) * (60 if m[5] == "min" else 1)
    assert waves == 64 * 4 and est_insts == per_wave * waves
    assert events[:2] == ["batch", "note"] and events.count("note") == 1 and events.count("batch") >= 2
    timing = re.fullmatch(r"  time: emulated in ([\d.]+) ms wall, (\d+) wave instructions executed", lines[-2])
    assert timing, lines
    launch_s, executed = float(timing[1]) / 1e3, int(timing[2])
    assert executed == est_insts
    assert launch_s / 4 <= est_s <= 4 * launch_s, (est_s, launch_s, wall)
    events.clear()
    assert cli_main(["run", "layer_norm_bf16", "--backend", "emu"]) == 0        # 64 waves: quick, no estimate
    assert "note" not in events and "emulator (cpu)" not in capsys.readouterr().out


def test_reference_names_resolve_without_earlier_imports():
    """A spec's ``isagen.prims.fp8_model.f(...)`` must not depend on what the process imported before
    (it failed with AttributeError when nothing had imported fp8_model): checked in a fresh process."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from isagen.runtime.run import _Package\n"
            "assert 'isagen.prims.fp8_model' not in sys.modules\n"
            "pkg = _Package(sys.modules['isagen'])\n"
            "print(pkg.prims.fp8_model.torch_mxfp4_quant.__module__)\n"
            "try:\n"
            "    pkg.prims.no_such_module\n"
            "except AttributeError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "isagen.prims.fp8_model"
    assert out[1] == "module 'isagen.prims' has no attribute 'no_such_module'"


def test_fp8_reference_resolves_in_a_fresh_process():
    """A spec whose reference names ``isagen.prims.fp8_model`` runs in a process where nothing else imported
    that module (it is no longer a side effect of building a kernel): ``isagen run`` checks it and passes."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "ISAGEN_EMU_DEVICE": "cpu"}
    r = subprocess.run([sys.executable, "-m", "isagen", "run", str(root / "specs" / "static_quant_fp8_bf16.yaml"),
                        "--backend", "emu"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


def test_reference_device_is_cuda_only_for_the_cuda_emulator_engine(monkeypatch):
    """``isagen run``'s reference is evaluated by torch on the GPU exactly when the emulator runs on its cuda
    engine and torch has CUDA (the same expression; at full sizes the CPU takes minutes), else on the CPU."""
    import torch

    from isagen.runtime.run import reference_device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("ISAGEN_EMU_DEVICE", "cuda")
    assert reference_device("emu") == "cuda"
    assert reference_device("hip") == "cpu"          # the hip backend's inputs are on the GPU already
    monkeypatch.setenv("ISAGEN_EMU_DEVICE", "cpu")
    assert reference_device("emu") == "cpu"
    monkeypatch.setenv("ISAGEN_EMU_DEVICE", "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert reference_device("emu") == "cpu"


def test_abs_of_8_bit_floats_keeps_dtype_and_values():
    """The reference's magnitude inputs (run._abs): every fp8 code's absolute value as torch's abs gives it,
    in the same dtype (CUDA torch has no abs for 8-bit floats, so it clears the sign bit)."""
    import torch

    from isagen.runtime.run import _abs
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dt)
        got, want = _abs(x), x.abs()
        assert got.dtype == dt
        g, w = got.float(), want.float()
        assert ((g == w) | (g.isnan() & w.isnan())).all()
    y = torch.tensor([-1.5, 2.0, -0.0])
    assert torch.equal(_abs(y), y.abs())
