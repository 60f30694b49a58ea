"""The elementwise kernels, run in the emulator, against numpy/torch math: every bundled spec on every
target over lengths with tails, every op and dtype, bf16/f16 rounding edge cases, and nothing written
past the end of a tensor."""

import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch

from isagen.builders.spec import bundled_specs_dir, load_specs, parse_spec
from isagen.kernels.elementwise import ELEMENT_BYTES, OPS
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.runtime.emu import Device

LENGTHS = (1, 63, 64, 1000, 4097)
PAD = 37                 # sentinel elements after each output tensor: the kernel must not touch them
SPECS = [s for s in load_specs([bundled_specs_dir()]) if s.kernel == "elementwise"]
NP_BITS = {"f32": np.uint32, "bf16": np.uint16, "f16": np.uint16}
RUN_TARGETS = ("gfx942", "gfx950")


@pytest.fixture(scope="module")
def built():
    """(spec name or variant, target) -> (spec, code object), assembled once."""
    cache = {}

    def get(spec, target):
        key = (spec.name, target)
        if key not in cache:
            program = spec.build(target)
            cache[key] = assemble(render_assembly(program), target, name=spec.name)
        return cache[key]
    return get


# ---------------------------------------------------------------------------- references
def to_bits(values: torch.Tensor, dtype: str) -> np.ndarray:
    t = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    v = values.to(t)
    return v.view({"f32": torch.int32, "bf16": torch.int16, "f16": torch.int16}[dtype]).numpy().view(NP_BITS[dtype])


def from_bits(bits: np.ndarray, dtype: str) -> torch.Tensor:
    t = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    signed = {"f32": np.int32, "bf16": np.int16, "f16": np.int16}[dtype]
    return torch.from_numpy(bits.view(signed).copy()).view(t)


def round_to_f32(q: Fraction) -> np.float32:
    """The float32 nearest to the exact rational q (ties to even): an exactly rounded FMA reference."""
    f = np.float32(float(q))
    cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - q), int(np.float32(c).view(np.uint32)) & 1))


def reference(op: str, dtype: str, inputs: dict, alpha: float) -> np.ndarray:
    """Expected output bits: fp32 math rounded once to the element type (as documented)."""
    vals = {k: from_bits(v, dtype) for k, v in inputs.items()}
    a32 = np.float32(alpha)
    if dtype == "f32" and op == "axpy":       # one rounding of alpha*x + y, computed exactly
        x, y = vals["x"].numpy(), vals["y"].numpy()
        out = [round_to_f32(Fraction(float(a32)) * Fraction(float(xi)) + Fraction(float(yi))) for xi, yi in zip(x, y)]
        return np.array(out, np.float32).view(np.uint32)
    f = {k: v.float() for k, v in vals.items()}
    alpha_t = torch.tensor(float(a32), dtype=torch.float32)
    if op == "axpy":
        # fp32 fma, then one rounding to bf16/f16 (fp32 fma is exact enough: f64 holds alpha*x exactly)
        r = (alpha_t.double() * f["x"].double() + f["y"].double()).float()
    elif op == "scale":
        r = alpha_t * f["x"]
    elif op == "add":
        r = f["x"] + f["y"]
    else:
        r = f["x"] * f["y"]
    return to_bits(r, dtype)


# ---------------------------------------------------------------------------- running
def run(spec, target, co, inputs: dict, alpha: float, n: int) -> np.ndarray:
    """Launch with the spec's launch contract; returns the output's bits including the PAD sentinels."""
    p = spec.params
    op = OPS[p.op]
    bits = NP_BITS[p.dtype]
    sentinel = bits(0x7E57 if bits == np.uint16 else 0x7E577E57)
    dev = Device(target)
    mod = dev.load_module(co)
    bufs = {}
    for name in list(op.inputs) + [op.output]:
        if name in bufs:
            continue
        data = inputs[name] if name in inputs else np.zeros(n, bits)
        bufs[name] = dev.to_device(np.concatenate([data, np.full(PAD, sentinel, bits)]))
    launch = spec.launch_dims(target, {"n": n})
    program_args = spec.build(target).args
    values = []
    for a in program_args:
        if a.kind == "pointer":
            values.append(bufs[a.name])
        elif a.name == "alpha":
            values.append(np.float32(alpha))
        else:
            assert a.name == "n"
            values.append(np.uint32(n))
    mod.launch(spec.name, grid=launch.grid, block=launch.block, args=values)
    out = dev.from_device(bufs[op.output], (n + PAD,), bits)
    assert (out[n:] == sentinel).all(), "the kernel wrote past the end of the tensor"
    return out[:n]


def random_inputs(op_name, dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    return {t: to_bits(torch.randn(n, generator=g) * 3, dtype) for t in OPS[op_name].inputs}


def assert_same(got: np.ndarray, want: np.ndarray, dtype: str, what: str):
    g, w = from_bits(got, dtype).float(), from_bits(want, dtype).float()
    nan_g, nan_w = torch.isnan(g), torch.isnan(w)
    assert torch.equal(nan_g, nan_w), f"{what}: NaN positions differ"
    keep = ~nan_w
    bad = np.nonzero((got != want) & keep.numpy())[0]
    assert bad.size == 0, (f"{what}: {bad.size} elements differ, first at {bad[0]}: got {g[bad[0]].item()!r} "
                           f"want {w[bad[0]].item()!r}")


# ---------------------------------------------------------------------------- tests
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_bundled_specs_over_lengths_with_tails(built, spec, target):
    assert target in spec.targets
    co = built(spec, target)
    for n in LENGTHS:
        inputs = random_inputs(spec.params.op, spec.params.dtype, n, seed=n)
        got = run(spec, target, co, inputs, alpha=-1.75, n=n)
        assert_same(got, reference(spec.params.op, spec.params.dtype, inputs, -1.75), spec.params.dtype,
                    f"{spec.name} {target} n={n}")


def variant(op, dtype, vec, unroll=2, block=64):
    text = (f"kernel: elementwise\nname: run_{op}_{dtype}\ntargets: [gfx942, gfx950]\n"
            f"params: {{op: {op}, dtype: {dtype}, vec: {vec}, unroll: {unroll}, block: {block}}}\n")
    return parse_spec(text, f"<{op}/{dtype}>")


@pytest.mark.parametrize("target", RUN_TARGETS)
def test_every_op_and_dtype(built, target):
    for op, dtype in itertools.product(OPS, ELEMENT_BYTES):
        spec = variant(op, dtype, vec=8 // ELEMENT_BYTES[dtype])       # 8 bytes per lane: dwordx2
        n = 64 * spec.params.vec * 2 * 2 + 3                           # two workgroups and an odd tail
        inputs = random_inputs(op, dtype, n, seed=7)
        got = run(spec, target, built(spec, target), inputs, alpha=0.37, n=n)
        assert_same(got, reference(op, dtype, inputs, 0.37), dtype, f"{op} {dtype} {target}")


def _bf16(values):
    return to_bits(torch.tensor(values, dtype=torch.float32), "bf16")


@pytest.mark.parametrize("target", RUN_TARGETS)
def test_bf16_rounding_edge_cases(built, target):
    spec = next(s for s in SPECS if s.params.dtype == "bf16" and s.params.op == "add")
    one, eps = 1.0, 2.0 ** -8                    # 1 + 2^-8 lies exactly halfway between two bf16
    big = float(torch.finfo(torch.bfloat16).max)
    tiny = float(torch.finfo(torch.bfloat16).tiny)
    pairs = [
        (one, eps),                              # tie -> even (down to 1.0)
        (1.0 + 2 ** -7, eps),                    # tie -> even (up)
        (-1.0, -eps),                            # negative tie
        (one, eps * 1.5),                        # above the tie -> up
        (big, big),                              # overflow -> inf
        (float("inf"), 1.0), (float("-inf"), -1.0),
        (float("inf"), float("-inf")),           # NaN
        (float("nan"), 1.0),
        (tiny, tiny / 4), (tiny / 8, tiny / 16), # subnormal sums
        (0.0, -0.0), (-0.0, -0.0),               # signed zeros
        (3.0, -3.0),
    ]
    x = _bf16([a for a, _ in pairs])
    y = _bf16([b for _, b in pairs])
    got = run(spec, target, built(spec, target), {"x": x, "y": y}, alpha=0.0, n=len(pairs))
    assert_same(got, reference("add", "bf16", {"x": x, "y": y}, 0.0), "bf16", f"bf16 edges {target}")
    # and the tie cases against hand-derived bf16 bit patterns (independent of torch)
    assert got[0] == 0x3F80 and got[1] == 0x3F82 and got[2] == 0xBF80 and got[3] == 0x3F81
    assert got[4] == 0x7F80 and got[5] == 0x7F80 and got[6] == 0xFF80
    assert got[11] == 0x0000 and got[12] == 0x8000


def test_f16_rounding_and_specials(built):
    spec = next(s for s in SPECS if s.params.dtype == "f16")
    vals = torch.tensor([1.0, 2049.0 / 2048, -65504.0, 6e-8, float("inf"), float("nan"), 0.0, -0.0, 1000.0],
                        dtype=torch.float32)
    x = to_bits(vals, "f16")
    for target in RUN_TARGETS:
        for alpha in (3.0, 0.5, -1.0):
            got = run(spec, target, built(spec, target), {"x": x}, alpha=alpha, n=len(vals))
            assert_same(got, reference(spec.params.op, "f16", {"x": x}, alpha), "f16", f"f16 {target} alpha={alpha}")
