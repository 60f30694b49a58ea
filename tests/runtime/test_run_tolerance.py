"""The spec's ``tolerance:`` field and how ``isagen run`` uses it: rtol/atol override the output type's
one-rounding tolerance; ``reduction: k`` adds the componentwise bound of a k-term sum,
``k * u * ref(|inputs|)`` (Higham §3.1).  Checked by hand-computed bounds, by the spec parser's errors,
and end to end: the fp32-output GEMM passes at K=1024 (a K-long fp32 sum, which one rounding's
tolerance cannot cover) while a reference with one product of the reduction missing fails (exit 1)."""

from __future__ import annotations

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
    # bound = atol + rtol |want| + k u mag, with rtol 1e-6, atol 1e-6, k 1000
    bound = 1e-6 + 1e-6 * want.abs() + 1000 * u * mag
    tol = {"rtol": 1e-6, "atol": 1e-6, "reduction": "k"}
    inside = run.compare("C", want + 0.99 * bound * torch.tensor([1, -1, 1, -1]), want, "f32", tol, {"k": 1000}, mag)
    assert inside.ok and inside.reduction == "k=1000 x u(f32) x ref(|inputs|)"
    outside = run.compare("C", want + 1.01 * bound * torch.tensor([1, 0, 0, -1]), want, "f32", tol, {"k": 1000}, mag)
    assert outside.mismatches == 2
    # without the reduction only rtol/atol remain: the same 0.99-bound errors fail where want = 0
    plain = run.compare("C", want + 0.99 * bound, want, "f32", {"rtol": 1e-6, "atol": 1e-6})
    assert plain.mismatches == 4 and (plain.rtol, plain.atol, plain.reduction) == (1e-6, 1e-6, "")
    # accumulate picks the unit round-off
    half = run.compare("C", want + 0.99 * 1000 * 2.0 ** -11 * mag, want, "f32",
                       {"rtol": 0, "atol": 0, "reduction": "k", "accumulate": "f16"}, {"k": 1000}, mag)
    assert half.ok


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
    assert "(rtol 1.3e-06, atol 1e-05 + k=1024 x u(f32) x ref(|inputs|)) PASS" in out


def test_a_planted_mismatch_fails_with_exit_code_1(tmp_path, capsys):
    """One product of the K-sum missing from the reference: far outside the bound."""
    path = _spec_copy(tmp_path, "gemm_missing_term", **{"reference: A @ B.T": "reference: A[:, 1:] @ B[:, 1:].T"})
    assert cli_main(["run", path, "--shape", "m=256", "--shape", "n=256", "--shape", "k=256"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "FAIL" and "C: max abs err" in out and "FAIL (" in out
