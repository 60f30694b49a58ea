"""Hand-written CUDA kernels of the cuda emulator engine (CuPy ``RawKernel``s), for the instructions whose
array code costs the most there: one kernel launch instead of the dozens of CuPy operations (and their
temporaries) the numpy-interface handler makes.

Each kernel computes exactly what the array code computes, with the same float64 operations in the same
order, so the bits are the CPU engine's; float32 values are converted by integer code (xp._CONV_SRC),
since CuPy compiles with ``-ftz=true`` and a float32 step would flush subnormals.

* :func:`mfma_f32` -- the float MFMAs with 8/16-bit inputs and f32 results of the gfx9 layout (what
  native.py runs on the CPU): one thread per (wave, D word, lane) decodes its row of A and column of B
  exactly into float64, sums the products in k order from 0 (``__dmul_rn``/``__dadd_rn``: the order of
  ``xp.matmul_k_order``, of the numpy path and of the native kernel), adds C in float64 and rounds once
  to float32.
"""

from __future__ import annotations

from functools import cache

import numpy

from isagen.runtime.emu import xp as X
from isagen.runtime.emu.arena import ARENA_BASE

_MFMA_SRC = X._CONV_SRC + r"""
extern "C" __global__ void isagen_mfma_f32(
    const unsigned int* A, long long a_rs, long long a_ws,
    const unsigned int* B, long long b_rs, long long b_ws,
    const unsigned int* C, long long c_rs, long long c_ws, long long c_ls,
    unsigned int* D, long long d_rs, long long d_ws,
    const int* a_tab, const int* b_tab, const int* d_src,
    const double* lut_a, const double* lut_b,
    int W, int M, int N, int K, int nout, int ebits, int bf16, const long long* widx)
{
    long long tg = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tg >= (long long)W * nout) return;
    int t = (int)(tg % nout);
    long long w = widx ? widx[tg / nout] : tg / nout;     /* W rows: the waves widx names, or 0..W-1 */
    int word = t >> 6, lane = t & 63;
    int bij = d_src[t];
    int bl = bij / (M * N), r = bij % (M * N), i = r / N, j = r % N;
    unsigned int mask = (1u << ebits) - 1u;
    const int* ta = a_tab + (bl * M + i) * K;
    const int* tb = b_tab + bl * K * N + j;
    const unsigned int* Aw = A + w * a_ws;
    const unsigned int* Bw = B + w * b_ws;
    double acc = 0.0;
    for (int k = 0; k < K; ++k) {
        int ea = ta[k], eb = tb[k * N];
        unsigned int ra = (Aw[(ea >> 16) * a_rs + ((ea >> 8) & 255)] >> ((ea & 255) * ebits)) & mask;
        unsigned int rb = (Bw[(eb >> 16) * b_rs + ((eb >> 8) & 255)] >> ((eb & 255) * ebits)) & mask;
        double va, vb;
        if (bf16) { va = isagen_f32_bits_to_f64(ra << 16); vb = isagen_f32_bits_to_f64(rb << 16); }
        else { va = lut_a[ra]; vb = lut_b[rb]; }
        acc = __dadd_rn(acc, __dmul_rn(va, vb));
    }
    unsigned int c = C[word * c_rs + w * c_ws + lane * c_ls];
    D[word * d_rs + w * d_ws + lane] = isagen_f64_to_f32_bits(__dadd_rn(acc, isagen_f32_bits_to_f64(c)));
}
"""


@cache
def _mfma_kernel():
    cp = X.cupy_module()
    return cp.RawKernel(_MFMA_SRC, "isagen_mfma_f32")


@cache
def _mfma_tables(layout, name: str, cbsz: int, abid: int, blgp: int, per: int):
    """Device tables of one MFMA's layout (``layout``: mfma.layout, passed in by its callers, which import
    this module): A's and B's elements as ``word << 16 | lane << 8 | sub``, D's flat (b, i, j) product
    per word/lane."""
    cp = X.cupy_module()
    lay = layout(name, cbsz, abid, blgp)

    def pack(idx):
        idx = numpy.asarray(X.to_host(idx), numpy.int64)
        word, rest = numpy.divmod(idx, 64 * per)
        lane, sub = numpy.divmod(rest, per)
        return cp.asarray((word << 16 | lane << 8 | sub).astype(numpy.int32).ravel())

    d_src = cp.asarray(numpy.asarray(X.to_host(lay.d_src), numpy.int32))
    return pack(lay.a_idx), pack(lay.b_idx), d_src


@cache
def _lut64(kind: str, target: str):
    """float64 value of every raw code of an f16 / fp8 / bf8 kind, on the device (None for bf16: decoded
    from its bits)."""
    if kind == "bf16":
        return None
    if kind == "f16":
        lut = numpy.arange(65536, dtype=numpy.uint32).astype(numpy.uint16).view(numpy.float16).astype(numpy.float64)
    else:
        from isagen.runtime.emu import numerics as nx
        lut = numpy.asarray(X.to_host(nx.fp8_table(nx.fp8_format(target, kind))), numpy.float32).astype(numpy.float64)
    return X.cupy_module().asarray(lut)


def _words(a, what: str):
    """Strides of a uint32 [regs, W, 64] CuPy array in words: (reg, wave, lane)."""
    st = tuple(s // 4 for s in a.strides)
    if any(s % 4 for s in a.strides):
        raise X.EngineError(f"emulator bug: MFMA operand {what} is not word-aligned")
    return st


def mfma_f32(s, target: str, a, b, c, a_kind: str, b_kind: str, cbsz: int, abid: int, blgp: int, out, layout):
    """One float MFMA (8/16-bit inputs, f32 result, gfx9 layout; validated by ``mfma.mfma``) for every wave
    of ``a``/``b`` (uint32 [regs, W, 64] on the device); ``c`` broadcastable to [c_regs, W, 64]; ``out``
    None or a uint32 [c_regs, W, 64] view (it may be C itself, not A or B).  Returns D."""
    cp = X.cupy_module()
    W = a.shape[1]
    bits = s.in_bits
    per = 32 // bits
    a = cp.asarray(a, dtype=cp.uint32)
    b = cp.asarray(b, dtype=cp.uint32)
    if a.strides[2] != 4:
        a = cp.ascontiguousarray(a)
    if b.strides[2] != 4:
        b = cp.ascontiguousarray(b)
    c32 = cp.broadcast_to(cp.asarray(c, dtype=cp.uint32), (s.c_regs, W, 64))
    if out is None:
        out = cp.empty((s.c_regs, W, 64), cp.uint32)
    elif out.strides[2] != 4:
        res = mfma_f32(s, target, a, b, c32, a_kind, b_kind, cbsz, abid, blgp, None, layout)
        out[...] = res
        return out
    if c32.strides[2] not in (0, 4) or (c32.data.ptr != out.data.ptr or c32.strides != out.strides) \
            and _overlap(c32, out):
        c32 = cp.ascontiguousarray(c32)      # C partly overlapping D: read it before D is written
    ta, tb, d_src = _mfma_tables(layout, s.name, cbsz, abid, blgp, per)
    bf16 = a_kind == b_kind == "bf16"
    lut_a = _lut64(a_kind, target) if not bf16 else None
    lut_b = _lut64(b_kind, target) if not bf16 else None
    if lut_a is None:
        lut_a = lut_b = d_src          # unused (bf16): any device pointer
    ar, aw, _ = _words(a, "A")
    br, bw, _ = _words(b, "B")
    cr, cw, cl = _words(c32, "C")
    dr, dw, _ = _words(out, "D")
    nout = s.c_regs * 64
    total = W * nout
    threads = 256
    i64, i32 = numpy.int64, numpy.int32
    _mfma_kernel()(((total + threads - 1) // threads,), (threads,),
                   (a, i64(ar), i64(aw), b, i64(br), i64(bw), c32, i64(cr), i64(cw), i64(cl),
                    out, i64(dr), i64(dw), ta, tb, d_src, lut_a, lut_b,
                    i32(W), i32(s.m), i32(s.n), i32(s.k), i32(nout), i32(bits), i32(int(bf16)), None))
    return out


def mfma_rows(st, ws, s, target: str, kinds: tuple, ai: int, bi: int, ci: int | None, const, di: int,
              layout) -> None:
    """One float MFMA (as :func:`mfma_f32`) for the waves ``ws`` of batch ``st``, in place in its register
    file: A at V[ai..], B at V[bi..], C at V[ci..] (or the constant ``const`` [c_regs, 1, 1] when ``ci`` is
    None), D to V[di..] (not overlapping A or B; it may be C).  No gathered copies of the operands for a
    group of waves that branched apart.  ``kinds``: (a_kind, b_kind, cbsz, abid, blgp) as
    ``mfma._check_modifiers`` gives them; ``layout``: mfma.layout."""
    cp = X.cupy_module()
    a_kind, b_kind, cbsz, abid, blgp = kinds
    idx, n = _rows(st, ws)
    V = st.V
    W = V.shape[1]
    c32 = V[ci:ci + s.c_regs] if ci is not None else cp.broadcast_to(cp.asarray(const, dtype=cp.uint32),
                                                                        (s.c_regs, W, 64))
    out = V[di:di + s.c_regs]
    if ci is not None and ci != di and _overlap(c32, out):
        c32 = cp.ascontiguousarray(c32)          # C partly overlapping D: read it before D is written
    bits = s.in_bits
    ta, tb, d_src = _mfma_tables(layout, s.name, cbsz, abid, blgp, 32 // bits)
    bf16 = a_kind == b_kind == "bf16"
    lut_a = _lut64(a_kind, target) if not bf16 else d_src
    lut_b = _lut64(b_kind, target) if not bf16 else d_src
    vr = V.strides[0] // 4
    cr, cw, cl = _words(c32, "C")
    nout = s.c_regs * 64
    total = n * nout
    threads = 256
    i64, i32 = numpy.int64, numpy.int32
    a = V[ai:ai + 1]
    _mfma_kernel()(((total + threads - 1) // threads,), (threads,),
                   (a, i64(vr), i64(64), V[bi:bi + 1], i64(vr), i64(64), c32, i64(cr), i64(cw), i64(cl),
                    out, i64(vr), i64(64), ta, tb, d_src, lut_a, lut_b,
                    i32(n), i32(s.m), i32(s.n), i32(s.k), i32(nout), i32(bits), i32(int(bf16)), idx))


_MX_SRC = X._CONV_SRC + r"""
/* code e (0..31) of a lane's f8f6f4 operand: bits [bits*e + bits - 1 : bits*e] of the little-endian string
   of its registers R[0], R[rs], ... (fp8/bf8: byte e; fp6/bf6: crossing registers; fp4: nibble e) */
__device__ __forceinline__ unsigned int isagen_mx_code(const unsigned int* R, long long rs, int lane, int e, int bits) {
    int off = e * bits, reg = off >> 5, sh = off & 31;
    unsigned int v = R[reg * rs + lane] >> sh;
    if (sh + bits > 32) v |= R[(reg + 1) * rs + lane] << (32 - sh);
    return v & ((1u << bits) - 1u);
}
/* an E8M0 scale: 2^(e - 127), e = 255 NaN (mfma._E8M0) */
__device__ __forceinline__ double isagen_e8m0(unsigned int e) {
    return e == 255u ? __longlong_as_double(0x7ff8000000000000LL) : ldexp(1.0, (int)e - 127);
}

/* The f8f6f4 MFMAs (v_mfma_f32_*_f8f6f4 and the block-scaled v_mfma_scale_f32_*_f8f6f4; f32 result), one
   thread per (row of waves, D word, lane) as isagen_mfma_f32: A's row and B's column decoded exactly by
   the formats' tables, each multiplied by its E8M0 block scale (SA/SB not NULL: row r's scale register,
   lane kb*M + i for A's row i, kb*N + j for B's column j, byte sa_sh/8), the products summed in k order
   from 0, C added in float64 and one rounding to f32: the array path's operations in its order. */
extern "C" __global__ void isagen_mfma_mx(
    const unsigned int* A, long long a_rs, long long a_ws, int a_bits,
    const unsigned int* B, long long b_rs, long long b_ws, int b_bits,
    const unsigned int* C, long long c_rs, long long c_ws, long long c_ls,
    unsigned int* D, long long d_rs, long long d_ws,
    const int* a_tab, const int* b_tab, const int* d_src, const double* lut_a, const double* lut_b,
    const unsigned int* SA, long long sa_rs, long long sa_ls, int sa_sh,
    const unsigned int* SB, long long sb_rs, long long sb_ls, int sb_sh,
    int n, int M, int N, int K, int nout, const long long* widx)
{
    long long tg = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tg >= (long long)n * nout) return;
    int t = (int)(tg % nout);
    long long r = tg / nout;
    long long w = widx ? widx[r] : r;
    int word = t >> 6, lane = t & 63;
    int bij = d_src[t];
    int bl = bij / (M * N), rem = bij % (M * N), i = rem / N, j = rem % N;
    const int* ta = a_tab + (bl * M + i) * K;
    const int* tb = b_tab + bl * K * N + j;
    const unsigned int* Aw = A + w * a_ws;
    const unsigned int* Bw = B + w * b_ws;
    double acc = 0.0;
    for (int k = 0; k < K; ++k) {
        int ea = ta[k], eb = tb[k * N];       /* word << 16 | lane << 8 | sub: element word*4 + sub */
        double va = lut_a[isagen_mx_code(Aw, a_rs, (ea >> 8) & 255, ((ea >> 16) << 2) | (ea & 255), a_bits)];
        double vb = lut_b[isagen_mx_code(Bw, b_rs, (eb >> 8) & 255, ((eb >> 16) << 2) | (eb & 255), b_bits)];
        if (SA) {
            int kb = k >> 5;
            va = __dmul_rn(va, isagen_e8m0((SA[r * sa_rs + (kb * M + i) * sa_ls] >> sa_sh) & 0xFFu));
            vb = __dmul_rn(vb, isagen_e8m0((SB[r * sb_rs + (kb * N + j) * sb_ls] >> sb_sh) & 0xFFu));
        }
        acc = __dadd_rn(acc, __dmul_rn(va, vb));
    }
    unsigned int c = C[word * c_rs + w * c_ws + lane * c_ls];
    D[word * d_rs + w * d_ws + lane] = isagen_f64_to_f32_bits(__dadd_rn(acc, isagen_f32_bits_to_f64(c)));
}
"""


@cache
def _mx_kernel():
    return X.cupy_module().RawKernel(_MX_SRC, "isagen_mfma_mx")


@cache
def _mx_lut(kind: str, target: str, decode_table):
    """float64 value of every code of an f8f6f4 format on the device (``decode_table``: mfma._decode_table)."""
    if kind in ("fp8", "bf8"):
        return _lut64(kind, target)
    return X.cupy_module().asarray(numpy.asarray(X.to_host(decode_table(kind, target)), numpy.float64))


def mfma_mx(s, target: str, kinds: tuple, bits: tuple, a, b, c, out, scales, idx, n: int, layout,
            decode_table):
    """One f8f6f4 MFMA (``s``: mfma.MfmaSpec with the f8f6f4 layout and an f32 result; validated) for ``n``
    rows of waves (see isagen_mfma_mx): ``a``/``b``/``out`` uint32 [regs, W, 64] CuPy arrays (``out`` a
    view not overlapping A or B, or None for a new array), ``c`` broadcastable to [c_regs, W, 64]; row r
    is wave ``idx[r]`` of them (idx a device int64 array) or wave r (idx None, n = W).  ``kinds``:
    (a_kind, b_kind, cbsz, abid, blgp) as ``mfma._check_modifiers`` gives them; ``bits``: the A and B
    element widths; ``scales``: None, or (scale_a, scale_b, opsel_a, opsel_b) with the scale registers
    broadcastable to [n, 64] (row r's).  Returns D."""
    cp = X.cupy_module()
    a_kind, b_kind, cbsz, abid, blgp = kinds
    a = cp.asarray(a, dtype=cp.uint32)
    b = cp.asarray(b, dtype=cp.uint32)
    if a.strides[2] != 4:
        a = cp.ascontiguousarray(a)
    if b.strides[2] != 4:
        b = cp.ascontiguousarray(b)
    W = a.shape[1]
    c32 = cp.broadcast_to(cp.asarray(c, dtype=cp.uint32), (s.c_regs, W, 64))
    if out is None:
        out = cp.empty((s.c_regs, W, 64), cp.uint32)
    elif out.strides[2] != 4:
        raise X.EngineError("emulator bug: an MFMA destination whose lanes are not consecutive words")
    if c32.strides[2] not in (0, 4) or (c32.data.ptr != out.data.ptr or c32.strides != out.strides) \
            and _overlap(c32, out):
        c32 = cp.ascontiguousarray(c32)      # C partly overlapping D: read it before D is written
    ta, tb, d_src = _mfma_tables(layout, s.name, cbsz, abid, blgp, 4)
    lut_a, lut_b = _mx_lut(a_kind, target, decode_table), _mx_lut(b_kind, target, decode_table)
    i64, i32 = numpy.int64, numpy.int32
    if scales is None:
        sa = sb = None
        sa_st = sb_st = (0, 0)
        sh_a = sh_b = 0
    else:
        sa, sb = (cp.broadcast_to(cp.asarray(x, dtype=cp.uint32), (n, 64)) for x in scales[:2])
        sa_st, sb_st = _words(sa[None], "scale A")[1:], _words(sb[None], "scale B")[1:]
        sh_a, sh_b = 8 * int(scales[2]), 8 * int(scales[3])
    ar, aw, _ = _words(a, "A")
    br, bw, _ = _words(b, "B")
    cr, cw, cl = _words(c32, "C")
    dr, dw, _ = _words(out, "D")
    nout = s.c_regs * 64
    threads = 256
    _mx_kernel()((((n * nout) + threads - 1) // threads,), (threads,),
                 (a, i64(ar), i64(aw), i32(bits[0]), b, i64(br), i64(bw), i32(bits[1]),
                  c32, i64(cr), i64(cw), i64(cl), out, i64(dr), i64(dw), ta, tb, d_src, lut_a, lut_b,
                  sa, i64(sa_st[0]), i64(sa_st[1]), i32(sh_a), sb, i64(sb_st[0]), i64(sb_st[1]), i32(sh_b),
                  i32(n), i32(s.m), i32(s.n), i32(s.k), i32(nout), idx))
    return out


def _overlap(x, y) -> bool:
    """Whether the memory spans of two CuPy arrays intersect."""
    def span(a):
        lo = hi = a.data.ptr
        for n, st in zip(a.shape, a.strides):
            if n > 1:
                if st > 0:
                    hi += (n - 1) * st
                else:
                    lo += (n - 1) * st
        return lo, hi + a.itemsize
    (l1, h1), (l2, h2) = span(x), span(y)
    return l1 < h2 and l2 < h1


def _clear():
    _mfma_tables.cache_clear()
    _lut64.cache_clear()
    _mx_lut.cache_clear()


X.register_cache(_clear)


# ----------------------------------------------------------------------------- LDS read2, vector memory loads

_MEM_SRC = r"""
/* The thread of (row, lane) of the n rows of waves at the PC (one thread per row and lane): t, r (row),
   lane, w (the wave: widx[r], or r when widx is NULL) and wl (w's lane in [W, 64] arrays); threads past
   the last row return. */
#define ISAGEN_ROW_LANE \
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; \
    if (t >= (long long)n * 64) return; \
    int r = (int)(t >> 6), lane = (int)(t & 63); \
    long long w = widx ? widx[r] : r; \
    long long wl = w * 64 + lane; \
    (void)r; (void)wl;

__device__ __forceinline__ unsigned int isagen_le32(const unsigned char* p) {
    return (unsigned int)p[0] | ((unsigned int)p[1] << 8) | ((unsigned int)p[2] << 16) | ((unsigned int)p[3] << 24);
}

/* [a, a + len) inside one live allocation (starts sorted; ends[i] the end of the one at starts[i]) */
__device__ bool isagen_in_alloc(unsigned long long a, unsigned long long len, const unsigned long long* starts,
                                const unsigned long long* ends, int nalloc) {
    int lo = 0, hi = nalloc;                    /* lo: the first start > a */
    while (lo < hi) { int m = (lo + hi) >> 1; if (starts[m] <= a) lo = m + 1; else hi = m; }
    int i = lo - 1;
    return i >= 0 && a >= starts[i] && a + len <= ends[i];
}

/* ds_read2* (b32/b64, st64 or not; npair 2) and ds_read_b32..b128, _u8/_i8/_u16/_i16 and their
   _d16/_d16_hi forms (npair 1): per (row, lane) of the waves at the PC.  Lanes in EXEC read two (one)
   elements of `size` bytes at V[ai] + o0 and V[ai] + o1 of their workgroup's LDS (0 where the element
   is not inside the allocation) into V[di ..] and V[di + size/4 ..].  Sizes 1 and 2: the bytes little
   endian, sign-extended when sgn, then d16 0: the whole of V[di]; 1: its low half (the high half kept);
   2: its high half (the low half kept).  cnt[0] += lanes-elements out of range, cnt[1] += in-range
   elements. */
extern "C" __global__ void isagen_ds_read2(
    unsigned int* V, long long rs, const long long* widx, int n,
    int ai, int di, long long o0, long long o1, int size, int npair,
    const bool* EXEC, const unsigned char* lds, long long L, const long long* wg, long long lds_bytes,
    unsigned long long* cnt, int sgn, int d16)
{
    ISAGEN_ROW_LANE
    if (!EXEC[wl]) return;
    long long base = (long long)V[ai * rs + wl];
    const unsigned char* l = lds + wg[w] * L;
    int ndw = size >> 2;
    unsigned long long bad = 0, good = 0;
    for (int p = 0; p < npair; ++p) {
        long long a = base + (p ? o1 : o0);
        bool ok = a >= 0 && a + size <= lds_bytes;
        if (ok) ++good; else ++bad;
        if (size < 4) {
            unsigned int v = 0u;
            if (ok) v = size == 1 ? (unsigned int)l[a] : ((unsigned int)l[a] | ((unsigned int)l[a + 1] << 8));
            if (sgn) v = size == 1 ? (unsigned int)(int)(signed char)v : (unsigned int)(int)(short)v;
            unsigned int* d = V + (long long)di * rs + wl;
            if (d16 == 1) v = (*d & 0xFFFF0000u) | (v & 0xFFFFu);
            else if (d16 == 2) v = (*d & 0xFFFFu) | ((v & 0xFFFFu) << 16);
            *d = v;
            continue;
        }
        for (int k = 0; k < ndw; ++k)
            V[(di + p * ndw + k) * rs + wl] = ok ? isagen_le32(l + a + 4 * k) : 0u;
    }
    if (bad) atomicAdd(cnt, bad);
    atomicAdd(cnt + 1, good);
}

/* ds_write_b8/b16/d16_hi (size 1, 2; shift 16 for d16_hi), ds_write_b32..b128 (npair 1) and
   ds_write2*_b32/b64 (npair 2): per (row, lane) of the waves at the PC in EXEC, element p of `size` bytes
   (V[d0 ..], V[d1 ..] for p = 1; sizes 1 and 2: the low bytes of V[d0] >> shift) to the lane's
   workgroup's LDS at V[ai] + o0 (o1), where it lies inside the allocation.  cnt[0] += lane-elements
   out of range, cnt[1] += in-range elements.  Lanes writing the same bytes: one of them wins (as the
   array path's scatter on CuPy). */
extern "C" __global__ void isagen_ds_write(
    const unsigned int* V, long long rs, const long long* widx, int n,
    int ai, int d0, int d1, long long o0, long long o1, int size, int npair, int shift,
    const bool* EXEC, unsigned char* lds, long long L, const long long* wg, long long lds_bytes,
    unsigned long long* cnt)
{
    ISAGEN_ROW_LANE
    if (!EXEC[wl]) return;
    long long base = (long long)V[ai * rs + wl];
    unsigned char* l = lds + wg[w] * L;
    unsigned long long bad = 0, good = 0;
    for (int p = 0; p < npair; ++p) {
        long long a = base + (p ? o1 : o0);
        if (!(a >= 0 && a + size <= lds_bytes)) { ++bad; continue; }
        ++good;
        const unsigned int* src = V + (long long)(p ? d1 : d0) * rs + wl;
        for (int b = 0; b < size; ++b) {
            unsigned int v = size < 4 ? src[0] >> shift : src[(long long)(b >> 2) * rs];
            l[a + b] = (unsigned char)(v >> (8 * (b & 3)));
        }
    }
    if (bad) atomicAdd(cnt, bad);
    atomicAdd(cnt + 1, good);
}

/* Vector memory loads of >= 4 bytes per lane (global_load_dword*, buffer_load_dword*): per (row, lane)
   in EXEC, the address addr[row, lane] (bytes).  comp == 0: the access is one piece, read when
   [addr, addr + size) lies in one live allocation.  comp == 1: dword c is read when inr[row, lane, c]
   (the buffer's range check) and [addr + 4c, addr + 4c + 4) lies in one allocation.  Dwords not read
   are 0.  cnt[0] += pieces failing the allocation check, cnt[1] += bytes read. */
extern "C" __global__ void isagen_vmem_load(
    unsigned int* V, long long rs, const long long* widx, int n, int di, int size,
    const unsigned long long* addr, long long addr_rs, const bool* inr, int comp,
    const bool* EXEC, const unsigned char* arena, unsigned long long arena_base,
    const unsigned long long* starts, const unsigned long long* ends, int nalloc, unsigned long long* cnt)
{
    ISAGEN_ROW_LANE
    if (!EXEC[wl]) return;
    unsigned long long a0 = addr[r * addr_rs + lane];
    int ndw = size >> 2;
    unsigned long long bad = 0, got = 0;
    bool whole = comp ? false : isagen_in_alloc(a0, (unsigned long long)size, starts, ends, nalloc);
    if (!comp && !whole) bad = 1;
    for (int c = 0; c < ndw; ++c) {
        bool ok = whole;
        if (comp && inr[(r * 64 + lane) * (long long)ndw + c]) {
            ok = isagen_in_alloc(a0 + 4ull * c, 4ull, starts, ends, nalloc);
            if (!ok) ++bad;
        }
        unsigned int v = 0u;
        if (ok) { v = isagen_le32(arena + (a0 + 4ull * c - arena_base)); got += 4; }
        V[(di + c) * rs + wl] = v;
    }
    if (bad) atomicAdd(cnt, bad);
    if (got) atomicAdd(cnt + 1, got);
}

/* LDS DMA (buffer_load_* lds, global_load_lds_*): per (row, lane) in EXEC, `size` bytes of global memory
   at addr (0 where the buffer's range check inr[row, lane, c] fails for the dword or the access is not
   inside one allocation) to LDS at M0[17:0] + add_off + stride * lane of the lane's workgroup, where that lies
   inside the allocation.  cnt[0] += accesses out of every allocation, cnt[1] += LDS accesses out of
   range, cnt[2] += bytes read from memory, cnt[3] += bytes written to LDS. */
extern "C" __global__ void isagen_lds_dma(
    const long long* widx, int n, int size, const unsigned long long* addr, const bool* inr, int ninr,
    const unsigned int* S, long long Wn, long long add_off, long long stride,
    const bool* EXEC, const unsigned char* arena, unsigned long long arena_base,
    const unsigned long long* starts, const unsigned long long* ends, int nalloc,
    unsigned char* lds, long long L, const long long* wg, long long lds_bytes, unsigned long long* cnt)
{
    ISAGEN_ROW_LANE
    if (!EXEC[w * 64 + lane]) return;
    unsigned long long a = addr[(long long)r * 64 + lane];
    const bool* ir = inr + ((long long)r * 64 + lane) * ninr;
    bool act = ninr == 0;
    for (int c = 0; c < ninr; ++c) act = act || ir[c];
    bool okg = act && isagen_in_alloc(a, (unsigned long long)size, starts, ends, nalloc);
    if (act && !okg) atomicAdd(cnt, 1ull);
    if (okg) atomicAdd(cnt + 2, (unsigned long long)size);
    long long la = (long long)(S[124 * Wn + w] & 0x3FFFFu) + add_off + stride * lane;     /* M0[17:0] */
    if (!(la >= 0 && la + size <= lds_bytes)) { atomicAdd(cnt + 1, 1ull); return; }
    unsigned char* dst = lds + wg[w] * L + la;
    for (int b = 0; b < size; ++b) {
        int c = b >> 2;
        bool ok = okg && (ninr == 0 || size < 4 || ir[c < ninr ? c : ninr - 1]);
        dst[b] = ok ? arena[a + b - arena_base] : (unsigned char)0;
    }
    atomicAdd(cnt + 3, (unsigned long long)size);
}

/* The address and per-dword range check of a MUBUF access (ops_mem._buffer_address computes the same
   with arrays) for (row, lane): resource S[rs..rs+3], index V[vi] (idxen), offset V[vi + idxen] (offen),
   soffset S[soff_code] or soff_const.  cnt[4] += waves whose resource asks for swizzling. */
extern "C" __global__ void isagen_buffer_addr(
    const unsigned int* S, long long W, const unsigned int* V, long long rsv, const long long* widx, int n,
    int rs, int vi, int offen, int idxen, unsigned long long inst_off, int soff_code, unsigned int soff_const,
    int size, int ncomp, unsigned long long* addr, bool* inr, unsigned long long* cnt)
{
    ISAGEN_ROW_LANE
    unsigned int w0 = S[rs * W + w], w1 = S[(rs + 1) * W + w], w2 = S[(rs + 2) * W + w], w3 = S[(rs + 3) * W + w];
    unsigned long long base = (unsigned long long)w0 | ((unsigned long long)(w1 & 0xFFFFu) << 32);
    unsigned long long stride = (w1 >> 16) & 0x3FFFu, num = w2;
    if (((w1 >> 31) & 1u) && lane == 0) atomicAdd(cnt + 4, 1ull);
    unsigned long long index = idxen ? (unsigned long long)V[vi * rsv + wl] : 0ull;
    if ((w3 >> 23) & 1u) index += (unsigned long long)lane;
    unsigned long long voff = offen ? (unsigned long long)V[(vi + (idxen ? 1 : 0)) * rsv + wl] : 0ull;
    unsigned long long offset = voff + inst_off;
    unsigned long long so = soff_code >= 0 ? (unsigned long long)S[soff_code * W + w] : (unsigned long long)soff_const;
    addr[t] = base + so + offset + index * stride;
    unsigned long long byte_off = idxen ? offset : offset + index * stride;
    bool raw = stride == 0 || !idxen;
    unsigned long long piece = size < 4 ? (unsigned long long)size : 4ull;
    for (int c = 0; c < ncomp; ++c)
        inr[t * ncomp + c] = raw ? (byte_off + 4ull * c + piece <= num) : (index < num);
}
"""


@cache
def _mem_kernels():
    cp = X.cupy_module()
    m = cp.RawModule(code=_MEM_SRC)
    return (m.get_function("isagen_ds_read2"), m.get_function("isagen_vmem_load"), m.get_function("isagen_lds_dma"),
            m.get_function("isagen_buffer_addr"), m.get_function("isagen_ds_write"))


def _rows(st, ws):
    """(index array or None, row count) of the waves ``ws`` of batch ``st``."""
    if isinstance(ws, slice):
        if ws != slice(None):
            raise X.EngineError("emulator bug: a partial wave slice reached a cuda fast path")
        return None, st.W
    c = st.__dict__.get("_cuda_ws")
    if c is not None and c[0] is ws:      # the same group of waves as the last call: its device copy
        return c[1], c[2]
    cp = X.cupy_module()
    idx = cp.ascontiguousarray(cp.asarray(ws), dtype=cp.int64)
    st._cuda_ws = (ws, idx, int(idx.shape[0]))
    return idx, int(idx.shape[0])


def _launch(fn, n, args):
    threads = 256
    fn(((n * 64 + threads - 1) // threads,), (threads,), args)


def ds_read2(st, ws, ai: int, di: int, o0: int, o1: int, size: int, npair: int = 2, sgn: bool = False,
             d16: str | None = None) -> int:
    """ds_read2* (``npair`` 2) or a ds_read of ``size`` bytes (1, at ``o0``; sizes 1 and 2 sign-extended
    when ``sgn``, into the low or high half of the destination for ``d16`` "lo" / "hi") for the waves
    ``ws`` (see isagen_ds_read2): writes the destinations and returns the number of active lane-elements
    out of the LDS allocation (0: nothing to report); adds the bytes read to the launch's LDS
    statistics."""
    cp = X.cupy_module()
    idx, n = _rows(st, ws)
    cnt = cp.zeros(2, cp.uint64)
    V = st.V
    i64 = numpy.int64
    _launch(_mem_kernels()[0], n, (V, i64(V.strides[0] // 4), idx, numpy.int32(n), numpy.int32(ai), numpy.int32(di),
                                   i64(o0), i64(o1), numpy.int32(size), numpy.int32(npair), st.EXEC, st.lds,
                                   i64(st.lds.shape[1]), cp.ascontiguousarray(st.wg_x, dtype=cp.int64),
                                   i64(st.lds_bytes), cnt, numpy.int32(int(sgn)),
                                   numpy.int32({None: 0, "lo": 1, "hi": 2}[d16])))
    bad, good = (int(v) for v in cnt.get())
    st.run.lds_bytes_read += size * good
    return bad


def ds_write(st, ws, ai: int, d0: int, d1: int, o0: int, o1: int, size: int, npair: int = 1, shift: int = 0) -> int:
    """ds_write2* (``npair`` 2: data V[d0..], V[d1..] at offsets o0, o1) or a ds_write of ``size`` bytes
    (1, V[d0..] at ``o0``; sizes 1 and 2 the low bytes of V[d0] >> ``shift``) for the waves ``ws`` (see
    isagen_ds_write): writes the LDS and returns the number of active lane-elements out of the allocation
    (0: nothing to report); adds the bytes written to the launch's LDS statistics."""
    cp = X.cupy_module()
    idx, n = _rows(st, ws)
    cnt = cp.zeros(2, cp.uint64)
    V = st.V
    i64, i32 = numpy.int64, numpy.int32
    _launch(_mem_kernels()[4], n, (V, i64(V.strides[0] // 4), idx, i32(n), i32(ai), i32(d0), i32(d1), i64(o0),
                                   i64(o1), i32(size), i32(npair), i32(shift), st.EXEC, st.lds,
                                   i64(st.lds.shape[1]), cp.ascontiguousarray(st.wg_x, dtype=cp.int64),
                                   i64(st.lds_bytes), cnt))
    bad, good = (int(v) for v in cnt.get())
    st.run.lds_bytes_written += size * good
    return bad


def vmem_load(st, ws, di: int, size: int, addr, inrange, cnt=None) -> tuple[int, int, int]:
    """A vector memory load of ``size`` >= 4 bytes per lane (see isagen_vmem_load) for the waves ``ws``
    at the byte addresses ``addr`` [n, 64]; ``inrange`` None or the buffer's per-dword range check
    [n, 64, size/4].  Writes the destinations; returns (pieces out of every allocation, bytes read,
    swizzled resources: ``cnt[4]`` of :func:`buffer_addr`'s counters when given)."""
    cp = X.cupy_module()
    idx, n = _rows(st, ws)
    mem = st.run.memory
    if cnt is None:
        cnt = cp.zeros(5, cp.uint64)
    V = st.V
    a = cp.ascontiguousarray(cp.broadcast_to(cp.asarray(addr, dtype=cp.uint64), (n, 64)))
    comp = inrange is not None
    inr = cp.ascontiguousarray(cp.broadcast_to(inrange, (n, 64, size // 4)), dtype=cp.bool_) if comp else cnt
    i32 = numpy.int32
    _launch(_mem_kernels()[1], n, (V, numpy.int64(V.strides[0] // 4), idx, i32(n), i32(di), i32(size),
                                   a, numpy.int64(64), inr, i32(int(comp)), st.EXEC, mem.arena,
                                   numpy.uint64(_arena_base()), cp.asarray(mem._starts_x, dtype=cp.uint64),
                                   cp.asarray(mem._ends_x, dtype=cp.uint64), i32(len(mem._starts)), cnt))
    c = cnt.get()
    return int(c[0]), int(c[1]), int(c[4])


def lds_dma(st, ws, size: int, addr, inrange, add_off: int, stride: int, cnt=None) -> tuple:
    """An LDS DMA load (see isagen_lds_dma) for the waves ``ws``: ``addr`` [n, 64] byte addresses,
    ``inrange`` None or the buffer's per-dword range check [n, 64, c]; the LDS base is each wave's M0.
    Returns (accesses out of every allocation, LDS accesses out of range, bytes read, bytes written to
    LDS, swizzled resources as in :func:`vmem_load`)."""
    cp = X.cupy_module()
    idx, n = _rows(st, ws)
    mem = st.run.memory
    if cnt is None:
        cnt = cp.zeros(5, cp.uint64)
    a = cp.ascontiguousarray(cp.broadcast_to(cp.asarray(addr, dtype=cp.uint64), (n, 64)))
    if inrange is None:
        inr, ninr = cnt, 0
    else:
        inr = cp.ascontiguousarray(inrange, dtype=cp.bool_)
        inr = cp.ascontiguousarray(cp.broadcast_to(inr, (n, 64, inr.shape[-1])))
        ninr = int(inr.shape[-1])
    i32, i64 = numpy.int32, numpy.int64
    _launch(_mem_kernels()[2], n, (idx, i32(n), i32(size), a, inr, i32(ninr),
                                   st.S, i64(st.S.shape[1]), i64(add_off), i64(stride),
                                   st.EXEC, mem.arena, numpy.uint64(_arena_base()),
                                   cp.asarray(mem._starts_x, dtype=cp.uint64), cp.asarray(mem._ends_x, dtype=cp.uint64),
                                   i32(len(mem._starts)), st.lds, i64(st.lds.shape[1]),
                                   cp.ascontiguousarray(st.wg_x, dtype=cp.int64), i64(st.lds_bytes), cnt))
    return tuple(int(v) for v in cnt.get())


def buffer_addr(st, ws, desc: tuple, size: int):
    """(addr [n, 64] uint64, inrange [n, 64, ncomp] bool, counters) of a MUBUF access of the waves ``ws``
    in one kernel; ``desc`` = (rs, vi, offen, idxen, inst_off, soff_code, soff_const) (see
    ops_mem._buffer_address); counters[4] counts swizzled resources (pass ``counters`` to the load)."""
    cp = X.cupy_module()
    rs, vi, offen, idxen, inst_off, soff_code, soff_const = desc
    idx, n = _rows(st, ws)
    ncomp = max(size // 4, 1)
    addr = cp.empty((n, 64), cp.uint64)
    inr = cp.empty((n, 64, ncomp), cp.bool_)
    cnt = cp.zeros(5, cp.uint64)
    i32, i64 = numpy.int32, numpy.int64
    _launch(_mem_kernels()[3], n, (st.S, i64(st.S.shape[1]), st.V, i64(st.V.strides[0] // 4), idx, i32(n),
                                   i32(rs), i32(-1 if vi is None else vi), i32(int(offen)), i32(int(idxen)),
                                   numpy.uint64(inst_off), i32(soff_code), numpy.uint32(soff_const), i32(size),
                                   i32(ncomp), addr, inr, cnt))
    return addr, inr, cnt


def _arena_base() -> int:
    return ARENA_BASE
