"""``isagen.objects.elf_parts.packb`` (isagen's own MessagePack writer for the metadata note) against
the msgpack package's ``packb``: the same bytes for bundled kernels' metadata documents on both
targets and for generated documents (every integer, string, binary, array and map size boundary
of the format), the same exception types for what neither can write."""

from __future__ import annotations

import math

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isagen.builders.spec import bundled_specs_dir, load_spec
from isagen.objects.elf_parts import _key_order, packb
from isagen.objects.emit import metadata_document


@pytest.mark.parametrize("spec", ["gemm_bf16", "attention_bf16", "softmax_bf16", "gemm_fp8_blockscale"])
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_bundled_metadata_documents(spec, target):
    s = load_spec(str(bundled_specs_dir() / f"{spec}.yaml"), {})
    if target not in s.targets:
        pytest.skip(f"{spec} does not list {target}")
    program = s.build(target)
    doc = _key_order(metadata_document(program, program.target.target_id))
    assert packb(doc) == msgpack.packb(doc)
    assert msgpack.unpackb(packb(doc), strict_map_key=False) == doc


EDGES = [0, 1, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0xFFFFFFFF, 0x100000000, (1 << 64) - 1,
         -1, -0x20, -0x21, -0x80, -0x81, -0x8000, -0x8001, -0x80000000, -0x80000001, -(1 << 63)]
SIZES = [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536]


@pytest.mark.parametrize("n", SIZES)
def test_size_boundaries(n):
    for value in ("x" * n, "é" * (n // 2) + "x" * (n % 2), b"\0" * n, bytearray(b"b" * n), list(range(n)),
                  tuple([None] * n), {i: i for i in range(n)}):
        assert packb(value) == msgpack.packb(value), (type(value), n)


def test_scalars():
    for value in [*EDGES, True, False, None, 0.0, -0.0, 1.5, 1e300, math.inf, -math.inf, 2 ** 53 + 1.0]:
        assert packb(value) == msgpack.packb(value), value
    nan = packb(math.nan)
    assert nan[:1] == b"\xcb" and math.isnan(msgpack.unpackb(nan))


def test_what_neither_writes():
    for bad in (1 << 64, -(1 << 63) - 1, object(), {1, 2}, 1j):
        with pytest.raises(Exception) as want:
            msgpack.packb(bad)
        with pytest.raises(want.type):
            packb(bad)


documents = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)
    | st.sampled_from(EDGES) | st.floats(allow_nan=False) | st.text(max_size=40) | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=20) | st.dictionaries(st.text(max_size=10), children, max_size=20)
    | st.tuples(children, children),
    max_leaves=60)


@settings(max_examples=300, deadline=None)
@given(documents)
def test_generated_documents(doc):
    assert packb(doc) == msgpack.packb(doc)
