"""Property: ``-D name=value`` and ``--shape``/``--scalar`` text, whatever it is, either parses (and then
the spec is built, or the sizes are checked) or ends in one ``IsagenError`` line; from the command line,
exit code 0 or 2 with exactly one ``isagen: error:`` line.  The sizes are checked against what the
kernel can address and what memory holds without allocating anything."""

from __future__ import annotations

import contextlib
import functools
import io
import os

from fuzz_support import assert_one_line, examples
from hypothesis import given
from hypothesis import strategies as st

import isagen
from isagen.builders.spec import bundled_specs_dir, load_spec, parse_overrides
from isagen.cli import main as cli_main
from isagen.errors import IsagenError
from isagen.runtime import run

AXPY = bundled_specs_dir() / "axpy_f32.yaml"
NORM = bundled_specs_dir() / "rms_norm_bf16.yaml"
GEMM = bundled_specs_dir() / "gemm_bf16.yaml"

@functools.cache
def built(name: str):
    return isagen.build(name, "gfx942", use_cache=False)     # the fuzz run leaves the user's cache alone


names = st.one_of(st.sampled_from(["block", "vec", "unroll", "dtype", "op", "min_occupancy", "waves", "max_hidden",
                                   "block_m", "block_n", "block_k", "name", "x", "", " block", "1a"]),
                  st.text(max_size=10))
texts = st.one_of(st.sampled_from(["", "0", "-1", "1", "2", "3", "4", "64", "100", "128", "256", "1024", "2**8", "1e3",
                                   "0x100", "1_024", "true", "false", "yes", "null", "f32", "bf16", "fp8", "axpy",
                                   "nan", "inf", "[1]", "{a: 1}", "9" * 5000, "'256'", "256 ", "\x00", "=", "a=b"]),
                  st.integers().map(str), st.floats().map(repr), st.text(max_size=12))
defines = st.lists(st.builds(lambda n, sep, t: f"{n}{sep}{t}", names, st.sampled_from(["=", "=", "", "=="]), texts),
                   max_size=3)


@given(defines, st.sampled_from([AXPY, NORM, GEMM]))
def test_overrides_load_or_refuse(items, path):
    try:
        spec = load_spec(path, parse_overrides(items))
    except IsagenError as e:
        assert_one_line(e)
        return
    try:
        spec.validate(spec.targets[0])
    except IsagenError as e:
        assert_one_line(e)


@examples(15)
@given(defines)
def test_gen_with_overrides_exits_0_or_one_line_2(tmp_path_factory, items):
    out = tmp_path_factory.mktemp("gen")
    argv = ["gen", "--asm-only", "-o", str(out), "--target", "gfx942", str(AXPY)]
    for item in items:
        argv += ["-D", item]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli_main(argv)
    lines = stderr.getvalue().strip().splitlines()
    assert code in (0, 2), (code, stderr.getvalue())
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("isagen: error: "), stderr.getvalue()
        assert not [p for p in os.listdir(out) if p.endswith(".tmp")]       # nothing half-written
    else:
        assert lines == [] and os.listdir(out) == ["axpy_f32.gfx942.s"]


sizes_text = st.one_of(
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(["n", "m", "k", "rows", "hidden", "x", ""]),
              st.one_of(st.integers(-10, 10 ** 15).map(str), st.integers().map(str), texts)),
    st.text(max_size=16))


@given(st.lists(sizes_text, max_size=3), st.sampled_from(["axpy_f32", "rms_norm_bf16", "gemm_bf16"]))
def test_shape_text_parses_and_checks_or_refuses(items, name):
    kernel = built(name)
    try:
        shapes = run.parse_assignments(items, "--shape", run._int)
        sizes = {**{k: v for k, v in kernel.spec_shapes.items()}, **shapes}
        unknown = set(shapes) - set(kernel.launch.size_symbols)
        if unknown:
            return                          # run_spec refuses these by name (tests/runtime/test_bad_inputs.py)
        run.check_sizes(kernel, sizes)
    except IsagenError as e:
        assert_one_line(e)


@given(st.lists(st.builds(lambda n, v: f"{n}={v}", st.sampled_from(["alpha", "eps", "x", ""]), texts), max_size=3))
def test_scalar_text_parses_or_refuses(items):
    try:
        scalars = run.parse_assignments(items, "--scalar", run._number)
        run.random_scalars(built("axpy_f32"), scalars)
    except IsagenError as e:
        assert_one_line(e)


