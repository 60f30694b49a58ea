"""How ``isagen run`` bounds an output that is a sum over one of the sizes: the spec's ``tolerance:``
field (rtol/atol override the output type's one-rounding tolerance; ``reduction: k`` adds
``min(k, 10 sqrt(k)) * u * ref(|inputs|)``), the reduction taken from the launch contract when the spec
names none, and what that bound lets through: correct GEMMs at several shapes and seeds and a correct
GEMM whose exact result cancels to 0 pass (the dtype's bound alone fails the latter), while a reference
with one product, one K-tile or one output tile wrong fails.  The references are torch's float64
products of the same inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from isagen.builders.spec import bundled_specs_dir, parse_spec
from isagen.cli import main as cli_main
from isagen.errors import SpecError
from isagen.runtime import run

GEMM = "kernel: gemm_bf16\nname: g\ntargets: [gfx942]\nreference: A @ B.T\n"


@pytest.fixture(autouse=True)
def env(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "run-cache"))
    monkeypatch.delenv("ISAGEN_BACKEND", raising=False)


def test_spec_field_parses_and_names_its_errors():
    spec = parse_spec(GEMM + "tolerance: {rtol: 1e-5, atol: 0, reduction: k, accumulate: f32}\n", "g.yaml")
    assert spec.tolerance == {"rtol": 1e-5, "atol": 0.0, "reduction": "k", "accumulate": "f32"}
    assert parse_spec(GEMM, "g.yaml").tolerance == {}
    for text, message in [
        ("tolerance: 0.1", r"g.yaml:5: tolerance: expected a mapping"),
        ("tolerance: {rtl: 0.1}", r"g.yaml:5: tolerance.rtl: unknown key; a tolerance has: rtol, atol"),
        ("tolerance: {rtol: -1}", r"tolerance.rtol: expected a number >= 0, got the number -1"),
        ("tolerance: {atol: big}", r"tolerance.atol: expected a number >= 0, got 'big'"),
        ("tolerance: {reduction: q}", r"tolerance.reduction: expected the size symbol .* \(one of: m, n, k\)"),
        ("tolerance: {reduction: k, accumulate: f8}", r"tolerance.accumulate: expected one of f32, f64"),
        ("tolerance: {accumulate: f32}", r"tolerance.accumulate: needs tolerance.reduction"),
    ]:
        with pytest.raises(SpecError, match=message):
            parse_spec(GEMM + text + "\n", "g.yaml")


def test_compare_bounds_by_hand():
    want = torch.tensor([10.0, -10.0, 0.0, 0.0], dtype=torch.float64)
    mag = torch.tensor([100.0, 100.0, 50.0, 50.0], dtype=torch.float64)     # ref(|inputs|)
    u = 2.0 ** -24
    # k = 1000 > 10^2: bound = atol + rtol |want| + 10 sqrt(k) u mag, with rtol 1e-6, atol 1e-6
    bound = 1e-6 + 1e-6 * want.abs() + 10 * 1000 ** 0.5 * u * mag
    tol = {"rtol": 1e-6, "atol": 1e-6, "reduction": "k"}
    inside = run.compare("C", want + 0.99 * bound * torch.tensor([1, -1, 1, -1]), want, "f32", tol, {"k": 1000}, mag)
    assert inside.ok and inside.reduction == "10*sqrt(k) x u(f32) x ref(|inputs|), k=1000"
    assert inside.worst == pytest.approx(0.99)               # the share of its bound the worst element uses
    outside = run.compare("C", want + 1.01 * bound * torch.tensor([1, 0, 0, -1]), want, "f32", tol, {"k": 1000}, mag)
    assert outside.mismatches == 2 and outside.worst == pytest.approx(1.01)
    # a given bound (tolerance.bound): 0 allowed and 0 found is a share of 0, not 0/0
    given = run.compare("C", want + torch.tensor([0.0, 0.5, 0.0, 0.0]), want, "f32", {"bound": "b"},
                        bound=torch.tensor([0.0, 2.0, 1.0, 1.0], dtype=torch.float64))
    assert given.ok and given.worst == 0.25 and given.bound == "b"
    # k = 64 <= 10^2: the worst case k u mag is the smaller, and the bound
    small = 1e-6 + 1e-6 * want.abs() + 64 * u * mag
    assert run.compare("C", want + 0.99 * small, want, "f32", tol, {"k": 64}, mag).ok
    late = run.compare("C", want + 1.01 * small, want, "f32", tol, {"k": 64}, mag)
    assert late.mismatches == 4 and late.reduction == "k x u(f32) x ref(|inputs|), k=64"
    # several summed sizes multiply
    two = run.compare("C", want + 0.99 * bound, want, "f32", {**tol, "reduction": ("a", "b")}, {"a": 10, "b": 100}, mag)
    assert two.ok and two.reduction.endswith("a*b=1000")
    # without the reduction only rtol/atol remain: the same 0.99-bound errors fail where want = 0
    plain = run.compare("C", want + 0.99 * bound, want, "f32", {"rtol": 1e-6, "atol": 1e-6})
    assert plain.mismatches == 4 and (plain.rtol, plain.atol, plain.reduction) == (1e-6, 1e-6, "")
    # accumulate picks the unit round-off
    half = run.compare("C", want + 0.99 * 10 * 1000 ** 0.5 * 2.0 ** -11 * mag, want, "f32",
                       {"rtol": 0, "atol": 0, "reduction": "k", "accumulate": "f16"}, {"k": 1000}, mag)
    assert half.ok
    assert run.reduction_growth(10 ** 6) == pytest.approx(10 * 1000 * u)


def test_reduction_comes_from_the_launch_contract():
    """Sizes the inputs have and no written tensor has are summed over: a GEMM's k, nothing of an axpy."""
    from isagen.builders.contract import TensorParam

    def kernel(*tensors):
        return type("K", (), {"launch": type("L", (), {"tensors": tensors})()})()
    gemm = kernel(TensorParam("A", "bf16", ("m", "k")), TensorParam("B", "bf16", ("n", "k")),
                  TensorParam("C", "bf16", ("m", "n"), "out"))
    assert run.output_tolerance(gemm, {}) == {"reduction": ("k",), "accumulate": "f32"}
    assert run.output_tolerance(gemm, {"rtol": 0.1}) == {"rtol": 0.1, "reduction": ("k",), "accumulate": "f32"}
    declared = {"reduction": "k", "accumulate": "f64"}
    assert run.output_tolerance(gemm, declared) == declared                  # the spec's own wins
    axpy = kernel(TensorParam("x", "f32", ("n",)), TensorParam("y", "f32", ("n",), "inout"))
    assert run.output_tolerance(axpy, {"atol": 0.5}) == {"atol": 0.5}
    norm = kernel(TensorParam("x", "bf16", ("rows", "hidden")), TensorParam("w", "bf16", ("hidden",)),
                  TensorParam("out", "bf16", ("rows", "hidden"), "out"))
    assert run.output_tolerance(norm, {}) == {}


# --------------------------------------------------------------------------- correct and wrong GEMMs (emulator)
def _gemm_run(spec, m, n, k, seed=0, A=None, B=None):
    """Build ``spec``, run it on the emulator on random inputs (or ``A``/``B``), and return what ``isagen
    run`` checks: the output, the float64 reference, ref(|inputs|), the tolerance and the sizes."""
    import isagen
    kernel = isagen.build(spec, "gfx942")
    sizes = {"m": m, "n": n, "k": k}
    tensors = run.random_inputs(kernel, sizes, "cpu", seed)
    if A is not None:
        tensors["A"], tensors["B"] = A, B
    inputs = {name: t.clone() for name, t in tensors.items()}
    kernel.run(**tensors, backend="emu")
    want = run.reference(kernel, inputs, {}, sizes)["C"]
    mag = run.reference(kernel, {name: t.abs() for name, t in inputs.items()}, {}, sizes)["C"]
    tolerance = run.output_tolerance(kernel, parse_spec(Path(kernel.spec_path).read_text(), "s.yaml").tolerance)
    return kernel, tensors["C"], want, mag, tolerance, sizes, inputs


@pytest.mark.parametrize("spec, m, n, k, seed", [
    ("gemm_bf16_128x128", 136, 128, 2048, 3),      # a long K and a partial tile row
    ("gemm_bf16_f32out", 264, 256, 512, 1),        # fp32 output: the reduction term is all the headroom
    ("gemm_bf16", 256, 264, 72, 2),                # a leading partial K-tile, a partial tile column
])
def test_correct_gemms_pass(spec, m, n, k, seed):
    kernel, got, want, mag, tol, sizes, _ = _gemm_run(spec, m, n, k, seed)
    check = run.compare("C", got, want, kernel.launch.tensors[2].dtype, tol, sizes, mag)
    assert check.ok, check


def test_a_gemm_that_cancels_to_zero_passes():
    """A = [X, X], B = [Y, -Y] along K: every exact output is 0, while the kernel's fp32 sums of the
    first half (size ~sqrt(k)) leave their rounding behind.  A bound relative to |ref| (the bf16 output's
    rtol/atol) fails this correct kernel; the reduction's bound passes it."""
    gen = torch.Generator().manual_seed(5)
    X = torch.randn(128, 1024, generator=gen).bfloat16()
    Y = torch.randn(128, 1024, generator=gen).bfloat16()
    A, B = torch.cat([X, X], 1), torch.cat([Y, -Y], 1)
    _, got, want, mag, tol, sizes, _ = _gemm_run("gemm_bf16_128x128", 128, 128, 2048, A=A, B=B)
    assert float(want.abs().max()) == 0.0                     # exactly: each product cancels its twin
    assert float(got.double().abs().max()) > 1e-5             # the kernel's rounding, above bf16's atol
    assert not run.compare("C", got, want, "bf16").ok          # the old bound fails a correct kernel
    assert run.compare("C", got, want, "bf16", tol, sizes, mag).ok


def _tiles_swapped(C, rows):
    """C with its first two output tile rows exchanged (a kernel storing each where the other belongs)."""
    return torch.cat([C[rows:2 * rows], C[:rows], C[2 * rows:]])


@pytest.mark.parametrize("spec, block_m, k_tile", [("gemm_bf16_128x128", 128, 64), ("gemm_bf16_f32out", 256, 32)])
def test_planted_tile_errors_fail(spec, block_m, k_tile):
    """What a wrong kernel would write, checked against the true reference: the output of a K loop one
    iteration short (the last K-tile skipped), and the correct output with two tiles stored in each
    other's place.  Both fail, nearly everywhere they differ, at k = 2048 where the reduction's bound
    is widest; the correct output of the same run passes."""
    kernel, got, want, mag, tol, sizes, inputs = _gemm_run(spec, 2 * block_m, 128, 2048, seed=4)
    assert kernel.params["block_m"] == block_m
    dtype = kernel.launch.tensors[2].dtype
    assert run.compare("C", got, want, dtype, tol, sizes, mag).ok
    A, B = inputs["A"].double(), inputs["B"].double()
    short = (A[:, :-k_tile] @ B[:, :-k_tile].T).to(got.dtype)
    skipped = run.compare("C", short, want, dtype, tol, sizes, mag)
    assert skipped.mismatches > 0.8 * skipped.numel, skipped
    swapped = run.compare("C", _tiles_swapped(got, block_m), want, dtype, tol, sizes, mag)
    assert swapped.mismatches > 0.95 * swapped.numel, swapped


def _spec_copy(tmp_path, name, **replace):
    text = (bundled_specs_dir() / "gemm_bf16_f32out.yaml").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text.replace("name: gemm_bf16_f32out", f"name: {name}"))
    return str(path)


def test_fp32_gemm_passes_with_its_declared_reduction(capsys):
    assert cli_main(["run", "gemm_bf16_f32out", "--shape", "m=256", "--shape", "n=256", "--shape", "k=1024"]) == 0
    out = capsys.readouterr().out
    assert "(rtol 1.3e-06, atol 1e-05 + 10*sqrt(k) x u(f32) x ref(|inputs|), k=1024) PASS" in out


def test_a_planted_mismatch_fails_with_exit_code_1(tmp_path, capsys):
    """One product of the K-sum missing from the reference: far outside the bound."""
    path = _spec_copy(tmp_path, "gemm_missing_term", **{"reference: A @ B.T": "reference: A[:, 1:] @ B[:, 1:].T"})
    assert cli_main(["run", path, "--shape", "m=256", "--shape", "n=256", "--shape", "k=256"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "FAIL" and "C: max abs err" in out and "FAIL (" in out


def test_magnitude_field_parses_and_names_its_errors():
    spec = parse_spec(GEMM + "tolerance: {reduction: k, magnitude: A.abs() @ B.abs().T}\n", "g.yaml")
    assert spec.tolerance == {"reduction": "k", "magnitude": "A.abs() @ B.abs().T"}
    for text, message in [
        ("tolerance: {magnitude: 3}", r"tolerance.magnitude: expected a torch expression giving each output's sum"),
        ("tolerance: {magnitude: 'A @'}", r"tolerance.magnitude: not a valid expression"),
        ("tolerance: {bound: '0.1', magnitude: A}", r"tolerance.bound: replaces .*magnitude; give it alone"),
    ]:
        with pytest.raises(SpecError, match=message):
            parse_spec(GEMM + text + "\n", "g.yaml")


def test_packed_fp4_magnitude_is_that_of_the_decoded_values():
    """gemm_mxfp4's A and B are bytes of two e2m1 codes: the default magnitude (the reference on the
    inputs' absolute values) is then the reference itself, cancellation included, so its growth term
    protects nothing; the spec's ``tolerance.magnitude`` is |A|·|B|ᵀ of the decoded values, computed
    here from the e2m1 table of the OCP MX specification."""
    plan = run.plan_run(str(bundled_specs_dir() / "gemm_mxfp4.yaml"), target="gfx950", backend="emu")
    kernel, sizes = plan.kernel, plan.sizes
    t = run.random_inputs(kernel, sizes, "cpu", 3)
    tol = run.output_tolerance(kernel, plan.tolerance)
    assert tol["reduction"] == "kp" and tol["magnitude"]
    e2m1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=torch.float64)

    def decoded_abs(x, scale):
        codes = torch.stack([x.long() & 15, x.long() >> 4], dim=-1).reshape(x.shape[0], -1)
        return e2m1[codes & 7] * torch.exp2(scale.double() - 127).repeat_interleave(32, dim=1)
    want = decoded_abs(t["A"], t["scale_a"]) @ decoded_abs(t["B"], t["scale_b"]).T
    mag = run.magnitude(kernel, tol, t, {}, sizes)["C"]
    assert torch.equal(mag, want)
    ref = run.reference(kernel, t, {}, sizes)["C"]
    assert (mag >= ref.abs()).all() and (mag > 2 * ref.abs()).any()       # random signs cancel
    default = run.magnitude(kernel, {"reduction": "kp"}, t, {}, sizes)["C"]
    assert torch.equal(default.abs(), ref.abs())                          # why the spec gives it
    check = run.compare("C", ref, ref, "bf16", tol, sizes, mag)
    assert check.ok and check.reduction == "10*sqrt(kp) x u(f32) x magnitude, kp=320"
