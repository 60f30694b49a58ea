"""Bad input to the Python API, ``isagen run``/``demo`` and the launch contract that once ended in a Python
traceback or was accepted silently (issue 13), with more of the same kinds: each is one ``IsagenError``
line from the API and ``isagen: error:`` with exit code 2 from the command line, raised before anything
is allocated or launched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import isagen
from isagen.builders.spec import bundled_specs_dir, load_spec
from isagen.cli import main as cli_main
from isagen.errors import IsagenError, LaunchError, SpecError, TargetError
from isagen.runtime import gpu, run
from isagen.targets import build_target, get_target, parse_target_id


@pytest.fixture(autouse=True)
def env(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "bad-input-cache"))
    monkeypatch.delenv("ISAGEN_BACKEND", raising=False)


def one_line_exit_2(capsys, argv, words):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("isagen: error: ") and words in lines[0], err


# ---------------------------------------------------------------------------- isagen.build's arguments
@pytest.mark.parametrize("spec", [None, 42, 4.2, b"axpy_f32", ["axpy_f32"], {"name": "axpy_f32"}, object()])
def test_build_refuses_a_spec_that_is_not_a_name_or_path(spec):
    with pytest.raises(SpecError, match=r"isagen.build: spec must be a spec name or a path .*, got " +
                       type(spec).__name__):
        isagen.build(spec)


@pytest.mark.parametrize("target", [942, 9.42, ["gfx942"], b"gfx942"])
def test_build_refuses_a_target_that_is_not_a_name(target):
    with pytest.raises(SpecError, match="isagen.build: target must be a target name"):
        isagen.build("axpy_f32", target)


# ---------------------------------------------------------------------------- target IDs, as LLVM parses them
@pytest.mark.parametrize("text, words", [
    ("gfx942:bogus", "unknown feature 'bogus'"),
    ("gfx942:xnack", "unknown feature 'xnack'"),
    ("gfx942:xnack*", "unknown feature 'xnack*'"),
    ("gfx942:", "unknown feature ''"),
    ("gfx942::xnack-", "unknown feature ''"),
    ("gfx942:xnack+:xnack-", "feature xnack given twice"),
    ("gfx942:xnack-:xnack-", "feature xnack given twice"),
    ("gfx950:sramecc+:sramecc+", "feature sramecc given twice"),
    ("gfx1100", "unsupported target"),
    ("", "unsupported target"),
])
def test_malformed_target_ids(text, words):
    with pytest.raises(TargetError) as info:
        get_target(text)
    assert words in str(info.value)


def test_target_id_features_parse_as_llvm_writes_them():
    assert parse_target_id("gfx950:sramecc+:xnack-") == (get_target("gfx950"), {"sramecc": "+", "xnack": "-"})
    assert parse_target_id("gfx942:xnack+")[1] == {"xnack": "+"}
    assert parse_target_id("gfx942")[1] == {}


@pytest.mark.parametrize("text, refused", [("gfx942:xnack+", "xnack+"), ("gfx942:sramecc-", "sramecc-"),
                                           ("gfx950:sramecc-:xnack+", "sramecc-, xnack+")])
def test_a_build_for_features_isagen_does_not_write_is_refused(text, refused, capsys):
    # isagen writes sramecc+:xnack- code objects only: another ID is refused, not built as that one
    with pytest.raises(TargetError) as info:
        build_target(text)
    want = f"builds {text.split(':')[0]}:sramecc+:xnack- code objects only; {refused} is not supported"
    assert want in str(info.value)
    with pytest.raises(TargetError, match="is not supported"):
        isagen.build("axpy_f32", text)
    one_line_exit_2(capsys, ["gen", "--asm-only", "-o", "/nonexistent-never-written", str(bundled_specs_dir() /
                                                                                         "axpy_f32.yaml"),
                             "--target", text], "is not supported")


def test_the_production_features_are_accepted():
    for text in ("gfx942:sramecc+:xnack-", "gfx942:xnack-", "gfx950:sramecc+", "GFX942"):
        assert build_target(text).name == text.split(":")[0].lower()


# ---------------------------------------------------------------------------- launch_dims and the grid
GEMM = bundled_specs_dir() / "gemm_bf16.yaml"


@pytest.mark.parametrize("m", [-5, -1, 1.5, 256.0, "256", True, None, [256], float("nan")])
def test_launch_dims_refuses_what_is_not_a_size(m):
    with pytest.raises(LaunchError) as info:
        load_spec(GEMM).launch_dims("gfx942", {"m": m, "n": 256, "k": 256})
    assert f"size m={m!r} is not a size" in str(info.value)


def test_launch_dims_takes_numpy_integers():
    spec = load_spec(GEMM)
    assert spec.launch_dims("gfx942", {"m": np.int64(512), "n": 512, "k": 512}) == \
        spec.launch_dims("gfx942", {"m": 512, "n": 512, "k": 512})


def test_a_grid_beyond_the_dispatch_packet_is_refused():
    info = load_spec(bundled_specs_dir() / "relu_bf16.yaml").launch_info("gfx942")
    grid_of = type(info)(tensors=info.tensors, grid=("n", 1, 1), block=(256, 1, 1))
    assert grid_of.grid_for({"n": 2 ** 24 - 1})[0] == 2 ** 24 - 1          # 2**32 - 256 work-items
    with pytest.raises(LaunchError, match="more than a dispatch can address"):
        grid_of.grid_for({"n": 2 ** 24})


# ---------------------------------------------------------------------------- kernel calls
@pytest.fixture(scope="module")
def axpy():
    return isagen.build("axpy_f32", "gfx942")


def layouts(x):
    return {"sparse_coo": x.to_sparse(), "sparse_csr": x.reshape(2, -1).to_sparse_csr(),
            "nested": torch.nested.nested_tensor([x[:3], x[3:]]),
            "jagged": torch.nested.nested_tensor([x[:3], x[3:]], layout=torch.jagged)}


@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "nested", "jagged"])
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_sparse_and_nested_tensors_are_refused_by_name(axpy, kind):
    x, y = torch.randn(8), torch.randn(8)
    before = y.clone()
    with pytest.raises(LaunchError, match="tensor 'x' (has layout|is a nested tensor)"):
        axpy(layouts(x)[kind], y, alpha=1.0)
    with pytest.raises(LaunchError, match="tensor 'y' (has layout|is a nested tensor)"):
        axpy(x, layouts(y)[kind], alpha=1.0)
    assert torch.equal(y, before)


@pytest.mark.parametrize("p", [-0.5, -1e-9, 1.0000001, 2.0, float("nan"), float("inf"), -float("inf")])
def test_dropout_probability_outside_0_1_is_refused(p):
    kernel = isagen.build("dropout_add_layer_norm_bf16", "gfx942")
    tensors = [torch.zeros(2, 64, dtype=torch.bfloat16) for _ in kernel.tensors]
    before = [t.clone() for t in tensors]
    with pytest.raises(LaunchError, match=r"scalar 'p' must be in \[0.0, 1.0\]"):
        kernel.run(*tensors, p=p, backend="emu")
    assert all(torch.equal(a, b) for a, b in zip(tensors, before))
    # torch refuses the same probabilities
    with pytest.raises((ValueError, RuntimeError)):
        torch.nn.functional.dropout(torch.ones(4), p)


# ---------------------------------------------------------------------------- isagen run
@pytest.mark.parametrize("expr, words", [
    ("torch.zeros(7)", "gives shape (7,) for output 'y' of shape (1000,)"),
    ("torch.zeros(1000, 2)", "gives shape (1000, 2) for output 'y'"),
    ("'abc'", "gives str 'abc' for output 'y', not a tensor or a number"),
    ("None", "gives NoneType None for output 'y'"),
    ("{}", "gives dict {} for output 'y'"),
    ("x > 0", "gives a torch.bool tensor"),
    ("x * 1j", "gives a torch.complex128 tensor"),
    ("True", "gives bool True"),
    ("torch.abs", "gives builtin_function_or_method"),
    ("torch", "gives module"),
    ("(x, x)", "gives 2 value(s) for 1 output(s)"),
    ("()", "gives 0 value(s) for 1 output(s)"),
])
def test_a_reference_of_the_wrong_kind_is_one_line(tmp_path, capsys, expr, words):
    text = (bundled_specs_dir() / "axpy_f32.yaml").read_text()
    text = text.replace("reference: alpha * x + y", f"reference: \"{expr}\"").replace("n: 1048576", "n: 1000")
    (tmp_path / "k.yaml").write_text(text)
    one_line_exit_2(capsys, ["run", str(tmp_path / "k.yaml"), "--backend", "emu"], words)


def test_a_number_reference_broadcasts(tmp_path):
    text = (bundled_specs_dir() / "axpy_f32.yaml").read_text()
    (tmp_path / "k.yaml").write_text(text.replace("reference: alpha * x + y", "reference: \"0.0\"")
                                     .replace("n: 1048576", "n: 100"))
    report = run.run_spec(tmp_path / "k.yaml", backend="emu", scalars={"alpha": 0.0})
    # y = 0*x + y is y (random, not 0): the number broadcasts and the check runs (and fails)
    assert not report.ok and report.checks[0].numel == 100


@pytest.fixture
def no_allocation(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("random inputs were drawn before the sizes were checked")
    monkeypatch.setattr(run, "random_inputs", refuse)


@pytest.mark.parametrize("shape, words", [
    ("n=1099511627776", "n is too large: buffer offsets are 32-bit"),
    ("n=4294967296", "n is too large"),
    ("n=" + "9" * 30, "n is too large"),
])
def test_sizes_the_kernel_cannot_address_are_refused_before_allocation(capsys, no_allocation, shape, words):
    one_line_exit_2(capsys, ["run", "axpy_f32", "--backend", "emu", "--shape", shape], words)


def test_sizes_beyond_free_memory_are_refused_before_allocation(capsys, no_allocation, monkeypatch):
    monkeypatch.setattr(run, "_free_memory", lambda device: (64 << 20, "host memory"))
    # 2**22 f32 elements: x and y (16 MiB each), twice, plus the float64 reference and comparison of y
    one_line_exit_2(capsys, ["run", "axpy_f32", "--backend", "emu", "--shape", "n=4194304"],
                    "need about 0.25 GiB of host memory for the run, more than the 0.06 GiB free")


@pytest.mark.parametrize("seed", [str(2 ** 64), str(2 ** 200), "-1", "1e3", "x"])
def test_seed_outside_64_bits_is_a_usage_error(capsys, seed):
    one_line_exit_2(capsys, ["run", "axpy_f32", "--backend", "emu", "--seed", seed], "--seed")


@pytest.mark.parametrize("seed", [2 ** 64, -1, 1.5, True, "0"])
def test_run_spec_refuses_a_bad_seed(seed):
    with pytest.raises(LaunchError, match="expected an integer from 0 to 2\\*\\*64-1"):
        run.run_spec("axpy_f32", backend="emu", seed=seed)


def test_the_largest_seed_runs():
    assert run.run_spec("axpy_f32", backend="emu", shapes={"n": 64}, seed=2 ** 64 - 1).ok


@pytest.mark.parametrize("args, words", [
    (["--shape", "n=-5"], "a size cannot be negative"),
    (["--shape", "n=1.5"], "'1.5' is not a number"),
    (["--shape", "n"], "expected name=value"),
    (["--shape", "=5"], "expected name=value"),
    (["--shape", "n=5,m=3"], "unknown size(s) m"),
    (["--scalar", "alpha=x"], "'x' is not a number"),
    (["--iters", "-1"], "--iters"),
    (["--backend", "cuda"], "--backend"),
    (["--target", "gfx942:bogus"], "unknown feature 'bogus'"),
    (["--target", "gfx942:xnack+"], "xnack+ is not supported"),
    (["-D", "block=100"], "params.block"),
    (["-D", "bogus=1"], "unknown parameter 'bogus'"),
])
def test_more_bad_run_arguments(capsys, args, words):
    one_line_exit_2(capsys, ["run", "axpy_f32", "--backend", "emu", *args], words)


# ---------------------------------------------------------------------------- isagen demo
@pytest.mark.parametrize("n, words", [("-5", "-5 is not in the range x>=0"), ("x", "'x' is not a valid integer"),
                                      ("4294967296", "n is too large")])
def test_demo_refuses_bad_sizes(tmp_path, capsys, n, words):
    one_line_exit_2(capsys, ["demo", "-o", str(tmp_path), "-n", n], words)


def test_demo_on_hip_without_a_gpu_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpu, "rocm_gpu_available", lambda: (False, "no AMD GPU (test)"))
    monkeypatch.setenv("ISAGEN_BACKEND", "hip")
    one_line_exit_2(capsys, ["demo", "-o", str(tmp_path)], "the hip backend needs a supported AMD GPU: "
                                                           "no AMD GPU (test) (use --backend emu)")


def test_every_error_here_is_an_isagen_error():
    # the classes the tests above match are the API's: one base class for a caller to catch
    assert all(issubclass(c, IsagenError) for c in (LaunchError, SpecError, TargetError))


@pytest.mark.parametrize("argv, words", [
    (["run", "axpy_f32", "--backend", "emu", "--shape", "n=5,\nm"], "--shape '\\nm': expected name=value"),
    (["run", "axpy_f32", "--backend", "emu", "--shape", "n=\n"], "--shape 'n=\\n': '' is not a number"),
    (["run", "axpy_f32", "--backend", "emu", "--scalar", "alpha=\x1b[31m"], "'\\x1b[31m' is not a number"),
    (["gen", "--asm-only", "-o", "/nonexistent-never-written", "axpy_f32", "-D", "block\n"],
     "-D 'block\\n': expected name=value"),
])
def test_user_text_in_a_message_stays_one_line(capsys, argv, words):
    # found by tests/fuzz/test_fuzz_cli_args.py: a newline typed into an option came back verbatim
    one_line_exit_2(capsys, argv, words)
    with pytest.raises(SpecError) as info:
        run.parse_assignments(["n=\n5\n6"], "--shape", int)
    assert "\n" not in str(info.value)
