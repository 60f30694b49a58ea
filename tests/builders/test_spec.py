"""Spec loading and validation: each kind of mistake is one line naming the file, the line and the field;
-D overrides parse per the declared type; the generator schema drives it all."""

import dataclasses
import math
import textwrap

import pytest

from isagen.builders.registry import GENERATORS, Param, Params, generator, get_generator, load_generators, params_from
from isagen.builders.spec import bundled_specs_dir, load_spec, load_specs, parse_overrides
from isagen.errors import IsagenError, LaunchError, SpecError

GOOD = """\
kernel: elementwise
name: my_axpy
description: test spec
targets: [gfx942, gfx950]
params:
  op: axpy
  dtype: f32
  block: 256
  vec: 4
shapes:
  n: 1000
reference: alpha * x + y
"""


def write(tmp_path, text, name="k.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing ``needle`` (computed from the text, not from isagen)."""
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(needle)


def error_of(path, overrides=()) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert msg.startswith(str(path)), msg
    return msg


# ---------------------------------------------------------------------------- a good spec
def test_good_spec_resolves_defaults_and_fields(tmp_path):
    spec = load_spec(write(tmp_path, GOOD))
    gen = get_generator("elementwise")
    assert spec.name == "my_axpy" and spec.kernel == "elementwise"
    assert spec.targets == ("gfx942", "gfx950")
    # every declared parameter is present: the file's values, the schema's defaults for the rest
    assert set(spec.params) == set(gen.params)
    assert spec.params["block"] == 256 and spec.params.vec == 4
    assert spec.params["unroll"] == gen.params["unroll"].default
    assert spec.shapes == {"n": 1000}
    assert spec.reference == "alpha * x + y"


def test_bundled_specs_all_load():
    specs = load_specs([bundled_specs_dir()])
    names = {s.name for s in specs}
    assert {"axpy_f32", "add_bf16"} <= names
    for s in specs:
        assert s.targets and s.description


# ---------------------------------------------------------------------------- each kind of error
def test_malformed_yaml_names_file_and_line(tmp_path):
    text = GOOD.replace("  vec: 4", "  vec: [4")
    msg = error_of(write(tmp_path, text))
    assert "malformed YAML" in msg
    # the parser notices at the line after the unclosed bracket or on it; both are near the mistake
    line = int(msg.split(":")[1])
    assert line in (line_of(text, "vec: [4"), line_of(text, "vec: [4") + 1)


def test_duplicate_key_is_reported(tmp_path):
    text = GOOD.replace("  vec: 4", "  vec: 4\n  vec: 8")
    msg = error_of(write(tmp_path, text))
    assert "duplicate key 'vec'" in msg and f":{line_of(text, 'vec: 8')}:" in msg


def test_unknown_top_level_field_suggests(tmp_path):
    text = GOOD.replace("params:", "parms:")
    msg = error_of(write(tmp_path, text))
    assert f":{line_of(text, 'parms:')}: parms: unknown field" in msg
    assert "did you mean 'params'" in msg


def test_missing_required_field(tmp_path):
    text = "\n".join(l for l in GOOD.splitlines() if not l.startswith("targets"))
    msg = error_of(write(tmp_path, text))
    assert "missing required field 'targets'" in msg


def test_unknown_kernel(tmp_path):
    text = GOOD.replace("kernel: elementwise", "kernel: elementwize")
    msg = error_of(write(tmp_path, text))
    assert f":{line_of(text, 'kernel:')}: kernel: unknown kernel generator 'elementwize'" in msg
    assert "did you mean 'elementwise'" in msg


def test_unknown_parameter(tmp_path):
    text = GOOD.replace("  vec: 4", "  vecs: 4")
    msg = error_of(write(tmp_path, text))
    assert f":{line_of(text, 'vecs:')}: params.vecs: unknown parameter 'vecs'" in msg
    assert "did you mean 'vec'" in msg


@pytest.mark.parametrize("value, words", [("'256'", "expected an integer"), ("2.5", "expected an integer"),
                                          ("true", "expected an integer")])
def test_wrong_type(tmp_path, value, words):
    text = GOOD.replace("block: 256", f"block: {value}")
    msg = error_of(write(tmp_path, text))
    assert f":{line_of(text, 'block:')}: params.block: {words}" in msg


def test_non_power_of_two_block(tmp_path):
    text = GOOD.replace("block: 256", "block: 100")
    msg = error_of(write(tmp_path, text))
    assert f":{line_of(text, 'block:')}: params.block: 100 is not a power of two" in msg


def test_out_of_range(tmp_path):
    text = GOOD.replace("block: 256", "block: 2048")
    msg = error_of(write(tmp_path, text))
    assert "params.block: 2048 is above the maximum 1024" in msg


def test_unsupported_dtype(tmp_path):
    text = GOOD.replace("dtype: f32", "dtype: f64")
    msg = error_of(write(tmp_path, text))
    assert f":{line_of(text, 'dtype:')}: params.dtype: 'f64' is not one of 'f32', 'bf16', 'f16'" in msg


def test_unknown_target_in_spec(tmp_path):
    text = GOOD.replace("[gfx942, gfx950]", "[gfx942, gfx90a]")
    msg = error_of(write(tmp_path, text))
    assert f":{line_of(text, 'targets:')}: targets[1]: unknown target 'gfx90a'" in msg


def test_target_the_spec_does_not_list(tmp_path):
    spec = load_spec(write(tmp_path, GOOD.replace("[gfx942, gfx950]", "[gfx942]")))
    with pytest.raises(SpecError) as info:
        spec.select_targets("gfx950")
    msg = str(info.value)
    assert msg.startswith(str(spec.path)) and "targets" in msg and "gfx950 is not one of them" in msg
    with pytest.raises(IsagenError, match="unsupported target 'gfx1100'"):
        spec.select_targets("gfx1100")


def test_bad_name_and_shapes_and_reference(tmp_path):
    msg = error_of(write(tmp_path, GOOD.replace("name: my_axpy", "name: my-axpy")))
    assert "name: must be a kernel symbol" in msg
    msg = error_of(write(tmp_path, GOOD.replace("  n: 1000", "  m: 1000")))
    assert "shapes.m: unknown shape 'm'" in msg and "(it takes: n)" in msg
    msg = error_of(write(tmp_path, GOOD.replace("  n: 1000", "  n: -3")))
    assert "shapes.n: expected a size" in msg
    msg = error_of(write(tmp_path, GOOD.replace("alpha * x + y", "alpha * (x + y")))
    assert f":{line_of(GOOD, 'reference:')}: reference: not a valid expression" in msg


def test_not_a_mapping_and_empty(tmp_path):
    assert "a spec is a mapping" in error_of(write(tmp_path, "- just\n- a list\n"))
    assert "the spec is empty" in error_of(write(tmp_path, "# nothing\n"))
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "missing.yaml")


def test_generator_rejects_impossible_combination_naming_the_field(tmp_path):
    # vec=1 of a 2-byte type is 2 bytes per lane: no buffer_load moves that (a generator-level rule)
    text = GOOD.replace("dtype: f32", "dtype: bf16").replace("vec: 4", "vec: 1")
    spec = load_spec(write(tmp_path, text))
    with pytest.raises(SpecError) as info:
        spec.build("gfx942")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{spec.path}:{line_of(text, 'vec:')}: params.vec: vec=1 with bf16 is 2 bytes per lane")


# ---------------------------------------------------------------------------- -D overrides
def test_overrides_parse_per_declared_type(tmp_path):
    path = write(tmp_path, GOOD)
    spec = load_spec(path, ["block=0x80", "dtype=bf16", "vec=8", "unroll=3"])
    assert spec.params["block"] == 128 and spec.params["dtype"] == "bf16"
    assert spec.params["vec"] == 8 and spec.params["unroll"] == 3
    assert spec.build("gfx942").workgroup_size == (128, 1, 1)


@pytest.mark.parametrize("item, words", [
    ("block=abc", "-D block=abc: params.block: expected an integer, got 'abc'"),
    ("block=96", "-D block=96: params.block: 96 is not a power of two"),
    ("blok=128", "-D blok=128: params.blok: unknown parameter 'blok'"),
    ("dtype=f8", "-D dtype=f8: params.dtype: 'f8' is not one of"),
])
def test_bad_overrides(tmp_path, item, words):
    path = write(tmp_path, GOOD)
    msg = error_of(path, [item])
    assert words in msg


def test_malformed_override():
    with pytest.raises(SpecError, match="expected name=value"):
        parse_overrides(["block"])
    with pytest.raises(SpecError, match="expected name=value"):
        parse_overrides(["=3"])


def test_rejection_of_an_override_names_the_override(tmp_path):
    spec = load_spec(write(tmp_path, GOOD), ["unroll=16", "min_occupancy=4"])
    with pytest.raises(SpecError) as info:
        spec.build("gfx942")
    msg = str(info.value)
    assert "-D min_occupancy=4: params.min_occupancy" in msg and "--force" in msg
    forced = spec.build("gfx942", force=True)
    assert forced.rejected and "min_occupancy" in forced.rejected
    assert forced.occupancy()["waves_per_simd"] < 4


# ---------------------------------------------------------------------------- the schema itself
def test_param_parse_and_problem():
    p = Param("int", 64, "x", pow2=True, min=16, max=256)
    assert p.parse(" 0x40 ") == 64 and p.problem(64) is None
    assert "not a power of two" in p.problem(48)
    assert "below the minimum" in p.problem(8)
    with pytest.raises(ValueError):
        p.parse("4.0")
    b = Param("bool", False)
    assert b.parse("yes") is True and b.parse("0") is False
    f = Param("float", 1.0, min=0.0)
    assert f.parse("2.5") == 2.5 and f.problem(3) is None and f.coerce(3) == 3.0
    assert "expected a number" in f.problem("x")
    with pytest.raises(ValueError):
        Param("int", 3, pow2=True)          # a default must satisfy its own schema
    with pytest.raises(ValueError):
        Param("complex", 0)


def test_registration_rejects_conflicts(monkeypatch):
    monkeypatch.setattr("isagen.builders.registry.GENERATORS", dict(GENERATORS))
    from isagen.builders import registry

    @generator("dummy_for_test", params={"a": Param("int", 1)})
    def dummy(p, target):
        raise AssertionError
    assert registry.GENERATORS["dummy_for_test"].params["a"].default == 1
    with pytest.raises(ValueError):
        generator("bad_param_name", params={"name": Param("int", 1)})


def test_generator_launch_contract_matches_declared_sizes_and_grid():
    gens = load_generators()
    for spec in load_specs([bundled_specs_dir()]):
        gen = gens[spec.kernel]
        for t in spec.targets:
            info = spec.launch_info(t)
            # a contract may depend on the parameters (attention's varlen takes THD sizes): the spec's uses
            # declared sizes only; tests/kernels/test_attention_build.py checks its modes cover them all
            # (quant_fp8: hidden for the row ops, d for SiLU-and-mul's [rows, 2, d]; gemm_fp8: kb, nb for block
            # scaling's scale shapes only; gemm_mx: k for MXFP8, kp = K/2 bytes for MXFP4's packed rows)
            assert set(info.size_symbols) <= set(gen.shapes), spec.name
            if spec.kernel not in ("attention", "attention_bwd", "attention_bwd_prep", "quant_fp8", "gemm_fp8",
                                   "gemm_mx"):
                assert sorted(info.size_symbols) == sorted(gen.shapes), spec.name
    spec = next(s for s in load_specs([bundled_specs_dir()]) if s.name == "axpy_f32")
    p = spec.params
    per_wg = p.block * p.vec * p.unroll
    for n in (0, 1, per_wg - 1, per_wg, per_wg + 1, 10 ** 6 + 3):
        launch = spec.launch_dims("gfx942", {"n": n})
        assert launch.grid == (math.ceil(n / per_wg), 1, 1)
        assert launch.block == (p.block, 1, 1)
    with pytest.raises(LaunchError, match="n is too large"):
        spec.launch_dims("gfx942", {"n": 2 ** 30})     # 4 GiB of f32: past 32-bit buffer offsets


def test_params_object():
    p = params_from({"a": 1, "b": True}, "k")
    assert p.a == 1 and p.name == "k" and p.describe() == "a=1 b=true"
    with pytest.raises(AttributeError):
        p.c  # noqa: B018  (the attribute read is the test)


def test_generator_params_are_a_frozen_dataclass_of_the_declared_fields(tmp_path):
    gen = get_generator("elementwise")
    spec = load_spec(write(tmp_path, GOOD), ["block=128"])
    p = spec.params
    assert isinstance(p, Params) and isinstance(p, gen.params_type) and dataclasses.is_dataclass(p)
    assert type(p).__name__ == "ElementwiseParams"
    declared = {"int": int, "float": float, "bool": bool, "str": str}
    fields = {f.name: f.type for f in dataclasses.fields(p)}
    assert fields == {"name": str, **{k: declared[v.type] for k, v in gen.params.items()}}
    assert list(p) == list(gen.params) and dict(p)["block"] == p.block == 128 and "name" not in p
    assert p == gen.make_params(dict(p), p.name) and hash(p) == hash(gen.make_params(dict(p), p.name))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.block = 64
    with pytest.raises(AttributeError, match="no parameter 'blok'"):
        p.blok  # noqa: B018
