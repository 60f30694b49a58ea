"""The occupancy floor of the memory-bound kernels (``isagen.prims.occupancy``): every generator with a
``min_occupancy`` parameter refuses a build that fits fewer waves per SIMD, with one message that names
the waves that fit, what binds them and the floor, plus that kernel's own advice; at the floor it
passes."""

from types import SimpleNamespace

import pytest

from isagen.builders.registry import get_generator, params_from
from isagen.prims.occupancy import limiting_resource, occupancy_floor
from isagen.targets import get_target

ADVICE = {"elementwise": "lower unroll or vec", "activation": "lower unroll", "gated_activation": "lower unroll",
          "norm": "raise waves_per_row or lower max_hidden", "rotary": "lower heads_per_step",
          "softmax": "raise waves_per_row or lower max_cols"}
# register-hungry settings, so that a floor above what fits stays within min_occupancy's range (<= 8)
HUNGRY = {"elementwise": {"unroll": 16}, "activation": {"unroll": 16}, "gated_activation": {"unroll": 16},
          "norm": {}, "rotary": {"heads_per_step": 8}, "softmax": {"max_cols": 16384}}


def built(name, target, **overrides):
    gen = get_generator(name)
    p = params_from({**gen.defaults(), **overrides}, name)
    return gen, p, gen.fn(p, get_target(target)).finish()


@pytest.mark.parametrize("name", sorted(ADVICE))
def test_each_kernel_refuses_below_its_floor_with_its_advice(name):
    gen, p, program = built(name, "gfx942", **HUNGRY[name])
    fits = program.occupancy()["waves_per_simd"]
    assert fits < get_target("gfx942").max_waves_per_simd
    assert gen.check(params_from({**p, "min_occupancy": fits}, name), "gfx942", program) == []
    (field, message), = gen.check(params_from({**p, "min_occupancy": fits + 1}, name), "gfx942", program)
    assert field == "min_occupancy"
    assert message.startswith(f"the kernel fits {fits} waves/SIMD (limited by ")
    assert f"below min_occupancy={fits + 1}; {ADVICE[name]}" in message
    assert limiting_resource(program) in message


def stub(limited_by, **fields):
    base = dict(vgprs=40, agprs=0, sgprs=30, lds_bytes=0, waves_per_workgroup=4,
                target=SimpleNamespace(max_waves_per_simd=8))
    base.update(fields)
    return SimpleNamespace(occupancy=lambda: {"waves_per_simd": 2, "limited_by": limited_by, "limits": {}}, **base)


@pytest.mark.parametrize("limited_by,figure", [("vgprs", "40 VGPRs"), ("sgprs", "30 SGPRs"),
                                               ("lds", "40960 bytes of LDS"), ("workgroup", "4 waves per workgroup"),
                                               ("hardware", "8 waves per SIMD at most")])
def test_the_message_names_the_binding_factor_in_its_units(limited_by, figure):
    program = stub(limited_by, lds_bytes=40960)
    (_, message), = occupancy_floor(program, 3, "lower unroll")
    assert message == (f"the kernel fits 2 waves/SIMD (limited by {limited_by}: {figure}), below "
                       f"min_occupancy=3; lower unroll")
    assert limiting_resource(stub("vgprs", agprs=16)) == "40 VGPRs + 16 AGPRs"
