"""One argument list → metadata and host packing that agree."""

import struct

import numpy as np
import pytest

from isagen.builders.kernarg import KernArgs
from isagen.errors import LaunchError, SpecError


def layout():
    k = KernArgs()
    k.pointer("x", "bf16", access="read_only")
    k.value("n", "i32")
    k.pointer("y", "f32", access="write_only")
    k.value("alpha", "f32")
    k.value("seed", "u64")
    return k


def test_natural_alignment_matches_a_c_struct():
    # struct { void* x; int n; /* pad */ void* y; float alpha; /* pad */ uint64_t seed; }
    md = {a[".name"]: a for a in layout().metadata()}
    assert [md[n][".offset"] for n in ("x", "n", "y", "alpha", "seed")] == [0, 8, 16, 24, 32]
    assert layout().segment_size == 40
    assert md["x"][".value_kind"] == "global_buffer" and md["x"][".actual_access"] == "read_only"
    assert md["n"][".value_kind"] == "by_value" and md["n"][".size"] == 4


def test_pack_puts_values_where_metadata_says():
    k = layout()
    blob = k.pack(x=0x1000, n=-5, y=0x2000, alpha=1.5, seed=2**63 + 7)
    md = {a[".name"]: a for a in k.metadata()}
    assert struct.unpack_from("<Q", blob, md["x"][".offset"])[0] == 0x1000
    assert struct.unpack_from("<i", blob, md["n"][".offset"])[0] == -5
    assert struct.unpack_from("<Q", blob, md["y"][".offset"])[0] == 0x2000
    assert struct.unpack_from("<f", blob, md["alpha"][".offset"])[0] == 1.5
    assert struct.unpack_from("<Q", blob, md["seed"][".offset"])[0] == 2**63 + 7
    assert blob[12:16] == b"\0" * 4          # padding is zeroed
    assert k.pack(0x1000, np.int32(-5), 0x2000, np.float32(1.5), 2**63 + 7) == blob


def test_pack_errors_name_the_argument():
    k = layout()
    with pytest.raises(LaunchError, match="missing kernel argument\\(s\\): seed"):
        k.pack(x=1, n=1, y=1, alpha=1.0)
    with pytest.raises(LaunchError, match="'n' = 4294967296 does not fit in i32"):
        k.pack(x=1, n=2**32, y=1, alpha=1.0, seed=0)
    with pytest.raises(LaunchError, match="argument 'n' is i32; got 1.5"):
        k.pack(x=1, n=1.5, y=1, alpha=1.0, seed=0)
    with pytest.raises(LaunchError, match=r"'alpha' = 3.5e\+38 does not fit in f32"):     # f32 max is 3.4028235e38
        k.pack(x=1, n=1, y=1, alpha=3.5e38, seed=0)
    assert struct.unpack_from("<f", k.pack(x=1, n=1, y=1, alpha=float("-inf"), seed=0), k["alpha"].offset)[0] \
        == float("-inf")                         # infinities and NaN are f32 values: passed through
    with pytest.raises(LaunchError, match="argument 'x' is a pointer"):
        k.pack(x="nope", n=1, y=1, alpha=1.0, seed=0)
    with pytest.raises(LaunchError, match="unknown kernel argument"):
        k.pack(x=1, n=1, y=1, alpha=1.0, seed=0, beta=2)


def test_declaration_errors():
    k = KernArgs()
    k.pointer("x", "f32")
    with pytest.raises(SpecError, match="'x' declared twice"):
        k.value("x", "i32")
    with pytest.raises(SpecError, match="unknown element type 'f128'"):
        k.pointer("z", "f128")
