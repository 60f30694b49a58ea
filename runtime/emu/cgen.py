"""The emulator's native block engine: straight-line runs of VALU, SALU and DS instructions inside a
basic block, generated as C, compiled once per kernel with the host C compiler and loaded through
ctypes; one call runs a whole run for every wave of the group.

The per-instruction numpy handlers (ops_*.py) stay the one semantics: every instruction this module
emits C for is checked against its numpy handler bit for bit on random registers, EXEC masks, SCC and
VCC (``tests/runtime/emu/test_emu_cgen.py``), and anything it does not cover ends a C run and runs
through its handler as before, so coverage can grow one instruction at a time.

Order of execution.  A run executes workgroup by workgroup (workgroups share nothing; a workgroup's
registers and LDS stay in the caches for the whole run).  Inside one it is cut into segments: a segment
of non-LDS instructions runs wave by wave (each wave executes all of them, lane loops the compiler
vectorizes, EXEC-masked writes): VALU and SALU instructions read and write only their own wave's
registers, so this gives exactly what the numpy path's instruction-by-instruction order over all waves
gives.  An LDS instruction is a segment of its own that runs over all the workgroup's waves before the
next one starts (its waves share its LDS), in the numpy path's order (wave by wave, lane by lane;
read2/write2 element 0 for all waves, then element 1).  An LDS access past the workgroup's allocation
by an active lane stops the run before that instruction (the workgroups before it have finished the
run, the ones after it have not started); the numpy handlers then bring the later workgroups up to that
instruction and run the rest for all of them, in their order, and report it exactly as they always do.

When.  Only with the sanitizer off (its checks follow the instruction order across waves) and on the
CPU engine.  Compiling a kernel's runs costs seconds of CPU the first time (~10 s for a Triton GEMM's
~700 instructions; cached after, by a hash of the source, next to the native MFMA kernel's cache), so
a program goes native once a batch has executed ``THRESHOLD`` wave-instructions (a GEMM at 1024^3 does
early in its first launch; a unit test's kernel never does), and the compiler runs in the background
while the launch goes on with the numpy handlers -- the executor asks :meth:`Plan.maybe_build` every
32 blocks, which loads the library once it is there.  ``ISAGEN_EMU_CGEN=0`` turns the engine off,
``=force`` builds (and waits) at a program's first block, so small kernels run through it too (the
emulator tests were run that way).  No C compiler or a failed build leaves the numpy path in use;
``why_not()`` says why.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from isagen.runtime.emu import native
from isagen.runtime.emu.access import CompileError
from isagen.runtime.emu.steps import CompiledStep
from isagen.runtime.emu.wave import ALL

ENV = "ISAGEN_EMU_CGEN"
THRESHOLD = 200_000        # wave-instructions of one batch before a program goes native
FLAGS = ["-O2", "-march=native", "-fPIC", "-shared", "-pthread", "-fno-fast-math", "-std=gnu99", "-w"]

_why = ""


def mode() -> str:
    """'off', 'auto' (the default) or 'force', from ``ISAGEN_EMU_CGEN``."""
    v = os.environ.get(ENV, "1").strip().lower()
    if v in ("0", "off", "false", "no"):
        return "off"
    if v in ("force", "always", "2"):
        return "force"
    return "auto"


def why_not() -> str:
    return _why


class NotCovered(Exception):
    """The instruction has no C form (it runs through its numpy handler)."""


# ============================================================================ operands

_HDR = r"""
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>
#define U32 uint32_t
#define U64 uint64_t
typedef int64_t I64;

static inline void sync_exec(U32 *S, uint8_t *EX, I64 W, I64 w) {
    const U64 m = (U64)S[126 * W + w] | ((U64)S[127 * W + w] << 32);
    uint8_t *e = EX + w * 64;
    for (int l = 0; l < 64; l++) e[l] = (uint8_t)((m >> l) & 1);
}

static inline U32 perm_b32(U32 a, U32 b, U32 sel) {
    const U64 d = ((U64)a << 32) | b;
    U32 out = 0;
    for (int i = 0; i < 4; i++) {
        const U32 s = (sel >> (8 * i)) & 0xFF;
        U32 v;
        if (s < 8) v = (U32)(d >> (8 * s)) & 0xFF;
        else if (s < 12) v = ((d >> (8 * (2 * (s - 8) + 1) + 7)) & 1) ? 0xFF : 0;
        else if (s == 12) v = 0;
        else v = 0xFF;
        out |= v << (8 * i);
    }
    return out;
}

/* v_perm_b32 with one selector for the wave: per result byte, (d >> sh) & m, times mul, or c */
typedef struct { unsigned sh[4]; U32 m[4], mul[4], c[4]; } perm_t;
static inline perm_t perm_prep(U32 sel) {
    perm_t p;
    for (int i = 0; i < 4; i++) {
        const U32 s = (sel >> (8 * i)) & 0xFF;
        if (s < 8) { p.sh[i] = 8 * s; p.m[i] = 0xFF; p.mul[i] = 1; p.c[i] = 0; }
        else if (s < 12) { p.sh[i] = 8 * (2 * (s - 8) + 1) + 7; p.m[i] = 1; p.mul[i] = 0xFF; p.c[i] = 0; }
        else { p.sh[i] = 0; p.m[i] = 0; p.mul[i] = 0; p.c[i] = s == 12 ? 0 : 0xFF; }
    }
    return p;
}
static inline U32 perm_u(U64 d, const perm_t *p) {
    U32 out = 0;
    for (int i = 0; i < 4; i++)
        out |= ((((U32)(d >> p->sh[i]) & p->m[i]) * p->mul[i]) | p->c[i]) << (8 * i);
    return out;
}

static inline U32 bfe_u32(U32 a, U32 o, U32 w) {
    o &= 31; w &= 31;
    return (U32)(((U64)a >> o) & ((1ull << w) - 1));
}

static inline U32 bfe_i32(U32 a, U32 o, U32 w) {
    o &= 31; w &= 31;
    U64 v = ((U64)a >> o) & ((1ull << w) - 1);
    if (w == 0) return 0;
    const unsigned sh = (64 - w) & 63;
    return (U32)(U64)((int64_t)(v << sh) >> sh);
}

static inline I64 sx(U32 x) { return (I64)(int32_t)x; }

#define NCOUNT 8

/* global memory (gm: allocations, starts[gm[0]] and ends at gm[3], gm[4]; the arena at gm[1] holds
   address gm[2] at its byte 0): whether [a, a + n) lies inside one allocation (device.Memory.check:
   the allocation with the largest start <= a; *last caches the one found before, exact because
   allocations do not overlap) */
static inline int in_alloc(const I64 *gm, U64 a, U64 n, I64 *last)
{
    const U64 *st = (const U64 *)(intptr_t)gm[3], *en = (const U64 *)(intptr_t)gm[4];
    I64 i = *last;
    if (i >= 0 && a >= st[i] && a + n <= en[i]) return 1;
    I64 lo = 0, hi = gm[0] - 1;
    i = 0;
    while (lo <= hi) { const I64 m = (lo + hi) >> 1; if (st[m] <= a) { i = m; lo = m + 1; } else hi = m - 1; }
    if (a >= st[i] && a + n <= en[i]) { *last = i; return 1; }
    return 0;
}

/* native.py's mfma_wave: one MFMA (its record) for one wave */
typedef void (*mfn_t)(const I64 *rec, I64 w);
typedef I64 (*runfn_t)(I64 W, const I64 *ws, I64 nws, U32 *V, U32 *S, U32 *SCC, uint8_t *EX, uint8_t *lds, I64 L,
                       I64 lds_bytes, const I64 *wg, I64 *counts, const I64 *recs, mfn_t mf, const I64 *gm);

/* One run over chunks of workgroups (bounds[c] .. bounds[c+1] in ws, each a whole number of
   workgroups) on up to `threads` threads: workgroups share nothing, so any order of chunks gives the
   same registers and LDS.  Per chunk res[2c] = the step the run stopped before (-1: finished) and
   res[2c+1] = where in ws the stopped workgroup starts; counts[0..1] += the LDS bytes read/written,
   counts[4 + d] += the global bytes loaded by loads of d + 1 dwords. */
typedef struct {
    runfn_t f; I64 W; const I64 *ws; U32 *V, *S, *SCC; uint8_t *EX, *lds; I64 L, lds_bytes; const I64 *wg;
    const I64 *recs; mfn_t mf; const I64 *gm; const I64 *bounds; I64 nchunks; I64 *res; I64 next, done, refs, by_wg;
    I64 sums[NCOUNT];
} pjob_t;

static void pwork(pjob_t *j)
{
    for (;;) {
        const I64 c = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (c >= j->nchunks) break;
        I64 cnt[NCOUNT] = {0};
        cnt[3] = j->by_wg;
        const I64 k0 = j->bounds[c], k1 = j->bounds[c + 1];
        const I64 r = j->f(j->W, j->ws + k0, k1 - k0, j->V, j->S, j->SCC, j->EX, j->lds, j->L, j->lds_bytes, j->wg,
                           cnt, j->recs, j->mf, j->gm);
        j->res[2 * c] = r;
        j->res[2 * c + 1] = k0 + cnt[2];
        for (int q = 0; q < NCOUNT; q++)
            if (q != 2 && q != 3 && cnt[q]) __atomic_fetch_add(&j->sums[q], cnt[q], __ATOMIC_RELAXED);
        __atomic_fetch_add(&j->done, 1, __ATOMIC_RELEASE);
    }
}

static void prelease(pjob_t *j) { if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) == 0) free(j); }
static void *phelper(void *a) { pwork((pjob_t *)a); prelease((pjob_t *)a); return NULL; }

/* returns how many chunks stopped early */
I64 cgen_par(runfn_t f, I64 threads, I64 W, const I64 *ws, U32 *V, U32 *S, U32 *SCC, uint8_t *EX, uint8_t *lds,
             I64 L, I64 lds_bytes, const I64 *wg, I64 *counts, const I64 *recs, mfn_t mf, const I64 *gm,
             const I64 *bounds, I64 nchunks, I64 *res)
{
    pjob_t local = {f, W, ws, V, S, SCC, EX, lds, L, lds_bytes, wg, recs, mf, gm, bounds, nchunks, res, 0, 0, 1,
                    counts[3], {0}};
    pjob_t *j = &local;
    if (threads > nchunks) threads = nchunks;
    if (threads > 64) threads = 64;
    if (threads > 1) j = malloc(sizeof *j);
    if (j == NULL) { j = &local; threads = 1; }
    if (j != &local) {
        *j = local;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        for (I64 t = 1; t < threads; t++) {
            pthread_t tid;
            __atomic_add_fetch(&j->refs, 1, __ATOMIC_RELAXED);
            if (pthread_create(&tid, &attr, phelper, j) != 0) __atomic_sub_fetch(&j->refs, 1, __ATOMIC_RELAXED);
        }
        pthread_attr_destroy(&attr);
    }
    pwork(j);
    while (__atomic_load_n(&j->done, __ATOMIC_ACQUIRE) < nchunks) sched_yield();   /* a helper's last chunk */
    for (int q = 0; q < NCOUNT; q++)
        if (q != 2 && q != 3) counts[q] += __atomic_load_n(&j->sums[q], __ATOMIC_RELAXED);
    I64 stopped = 0;
    for (I64 c = 0; c < nchunks; c++) stopped += res[2 * c] >= 0;
    if (j != &local) prelease(j);
    return stopped;
}
static inline float u2f(U32 x) { float f; memcpy(&f, &x, 4); return f; }
static inline int isnan_(float x) { return x != x; }
"""


class _Gen:
    """C text of one wave's part of a segment: declarations before the lane loop, per-lane code."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.n = 0

    def tmp(self) -> str:
        self.n += 1
        return f"t{self.n}"

    # ---- 32-bit sources: (prologue lines, per-lane expression)
    def src32(self, o, ty: str = "b32", lanes: bool = True) -> tuple[list[str], str]:
        if o.kind in ("const", "literal", "imm"):
            v = (o.const_bits(ty) if o.kind != "imm" else o.value) & 0xFFFFFFFF
            return [], f"{v:#x}u"
        if o.kind != "reg":
            raise NotCovered(o.kind)
        if o.reg.file in ("v", "a"):
            if not lanes:
                raise NotCovered("vector operand of a scalar op")
            i = self.ctx.vindex(o.reg, 1)
            p = self.tmp()
            return [f"const U32 *{p} = V + ((I64){i} * W + w) * 64;"], f"{p}[l]"
        code = o.reg.code
        if code >= 128:
            raise NotCovered(f"scalar code {code}")
        t = self.tmp()
        return [f"const U32 {t} = S[{code} * W + w];"], t

    def src64(self, o, ty: str = "b64", lanes: bool = True) -> tuple[list[str], str]:
        if o.kind in ("const", "literal", "imm"):
            v = (o.const_bits(ty) if o.kind != "imm" else o.value) & 0xFFFFFFFFFFFFFFFF
            return [], f"{v:#x}ull"
        if o.kind != "reg":
            raise NotCovered(o.kind)
        if o.reg.file in ("v", "a"):
            if not lanes:
                raise NotCovered("vector operand of a scalar op")
            i = self.ctx.vindex(o.reg, 2)
            p, q = self.tmp(), self.tmp()
            return [f"const U32 *{p} = V + ((I64){i} * W + w) * 64;",
                    f"const U32 *{q} = V + ((I64){i + 1} * W + w) * 64;"], f"((U64){p}[l] | ((U64){q}[l] << 32))"
        code = o.reg.code
        if code >= 127:
            raise NotCovered(f"scalar code {code}")
        t = self.tmp()
        return [f"const U64 {t} = (U64)S[{code} * W + w] | ((U64)S[{code + 1} * W + w] << 32);"], t

    def mask(self, o) -> tuple[list[str], str]:
        """A lane mask (SGPR pair or constant) as a per-wave U64."""
        if o is None:
            t = self.tmp()
            return [f"const U64 {t} = (U64)S[106 * W + w] | ((U64)S[107 * W + w] << 32);"], t
        if o.kind in ("const", "literal", "imm"):
            v = (o.const_bits("b64") if o.kind != "imm" else o.value) & 0xFFFFFFFFFFFFFFFF
            return [], f"{v:#x}ull"
        return self.src64(o, lanes=False)

    def vdst(self, o, count: int = 1) -> list[str]:
        if o is None or o.kind != "reg" or o.reg.file not in ("v", "a"):
            raise NotCovered("destination is not a VGPR")
        i = self.ctx.vindex(o.reg, count)
        return [f"U32 *d{k} = V + ((I64){i + k} * W + w) * 64;" for k in range(count)]


def _sdst_code(o, pair: bool) -> int | None:
    """Scalar destination code, or None when the write is dropped (codes past the file)."""
    if o is None or o.kind != "reg" or o.reg.file not in ("s", "ttmp", "special"):
        raise NotCovered("destination is not a scalar register")
    code = o.reg.code
    if code >= (127 if pair else 128):
        return None
    return code


def _swrite32(code: int | None, val: str) -> list[str]:
    if code is None:
        return []
    out = [f"S[{code} * W + w] = (U32)({val});"]
    if code in (126, 127):
        out.append("sync_exec(S, EX, W, w);")
    return out


def _swrite64(code: int | None, val: str) -> list[str]:
    if code is None:
        return []
    out = [f"{{ const U64 v_ = (U64)({val}); S[{code} * W + w] = (U32)v_; S[{code + 1} * W + w] = (U32)(v_ >> 32); }}"]
    if code == 126:
        out.append("sync_exec(S, EX, W, w);")
    return out


def _writes_exec(code: int | None, pair: bool) -> bool:
    return code is not None and (code == 126 or (not pair and code == 127))


# ============================================================================ VALU

# name -> (input types, C expression of a, b, c (U32 or U64 per type))
_V32: dict[str, tuple[tuple[str, ...], str]] = {
    "v_mov_b32": (("b32",), "a"),
    "v_not_b32": (("b32",), "~a"),
    "v_add_u32": (("u32", "u32"), "a + b"),
    "v_sub_u32": (("u32", "u32"), "a - b"),
    "v_subrev_u32": (("u32", "u32"), "b - a"),
    "v_mul_lo_u32": (("u32", "u32"), "a * b"),
    "v_mul_hi_u32": (("u32", "u32"), "(U32)(((U64)a * b) >> 32)"),
    "v_mul_u32_u24": (("u32", "u32"), "(a & 0xFFFFFFu) * (b & 0xFFFFFFu)"),
    "v_mul_hi_u32_u24": (("u32", "u32"), "(U32)(((U64)(a & 0xFFFFFFu) * (b & 0xFFFFFFu)) >> 32)"),
    "v_mad_u32_u24": (("u32", "u32", "u32"), "(a & 0xFFFFFFu) * (b & 0xFFFFFFu) + c"),
    "v_min_u32": (("u32", "u32"), "a < b ? a : b"),
    "v_max_u32": (("u32", "u32"), "a > b ? a : b"),
    "v_min_i32": (("i32", "i32"), "(int32_t)a < (int32_t)b ? a : b"),
    "v_max_i32": (("i32", "i32"), "(int32_t)a > (int32_t)b ? a : b"),
    "v_lshlrev_b32": (("u32", "b32"), "b << (a & 31)"),
    "v_lshrrev_b32": (("u32", "b32"), "b >> (a & 31)"),
    "v_ashrrev_i32": (("u32", "i32"), "(U32)((int32_t)b >> (a & 31))"),
    "v_and_b32": (("u32", "u32"), "a & b"),
    "v_or_b32": (("u32", "u32"), "a | b"),
    "v_xor_b32": (("u32", "u32"), "a ^ b"),
    "v_xnor_b32": (("u32", "u32"), "~(a ^ b)"),
    "v_bfe_u32": (("u32", "u32", "u32"), "bfe_u32(a, b, c)"),
    "v_bfe_i32": (("u32", "u32", "u32"), "bfe_i32(a, b, c)"),
    "v_bfi_b32": (("u32", "u32", "u32"), "(a & b) | (~a & c)"),
    "v_alignbit_b32": (("u32", "u32", "u32"), "(U32)((((U64)a << 32) | b) >> (c & 31))"),
    "v_alignbyte_b32": (("u32", "u32", "u32"), "(U32)((((U64)a << 32) | b) >> ((c & 3) * 8))"),
    "v_perm_b32": (("u32", "u32", "u32"), "perm_b32(a, b, c)"),
    "v_lshl_add_u32": (("u32", "u32", "u32"), "(a << (b & 31)) + c"),
    "v_add_lshl_u32": (("u32", "u32", "u32"), "(a + b) << (c & 31)"),
    "v_add3_u32": (("u32", "u32", "u32"), "a + b + c"),
    "v_lshl_or_b32": (("u32", "u32", "u32"), "(a << (b & 31)) | c"),
    "v_and_or_b32": (("u32", "u32", "u32"), "(a & b) | c"),
    "v_or3_b32": (("u32", "u32", "u32"), "a | b | c"),
    "v_xad_u32": (("u32", "u32", "u32"), "(a ^ b) + c"),
    "v_min3_u32": (("u32", "u32", "u32"), "(a < b ? a : b) < c ? (a < b ? a : b) : c"),
    "v_max3_u32": (("u32", "u32", "u32"), "(a > b ? a : b) > c ? (a > b ? a : b) : c"),
}
_V64 = {   # 64-bit result (a VGPR pair): name -> (input types, expression)
    "v_lshl_add_u64": (("u64", "u32", "u64"), "(a << (b & 7)) + c"),
    "v_lshlrev_b64": (("u32", "b64"), "b << (a & 63)"),
    "v_lshrrev_b64": (("u32", "b64"), "b >> (a & 63)"),
}
_ICMP = {"lt": "<", "eq": "==", "le": "<=", "gt": ">", "ne": "!=", "ge": ">="}
_CARRY = ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32")


def _check_plain_valu(vi) -> None:
    if vi.variant in ("sdwa", "dpp") or vi.dpp is not None or vi.sdwa is not None:
        raise NotCovered("DPP/SDWA")


def _sdwa_sels(vi) -> tuple[int, int] | None:
    """None for a plain VALU instruction; for an SDWA one the C covers -- an integer op of _V32 or
    v_cndmask_b32, whole-dword destination (dst_sel DWORD), no clamp or float modifiers, the form
    compilers use to take a half or a byte of a register -- its source selects (ops_valu._sdwa_select's
    codes: BYTE_0..3 = 0..3, WORD_0/1 = 4/5, DWORD = 6)."""
    if vi.sdwa is None:
        _check_plain_valu(vi)
        return None
    if (vi.dpp is not None or vi.sdwa[2] != 6 or vi.clamp or vi.omod or any(vi.neg[:2]) or any(vi.abs[:2])
            or not (vi.name == "v_cndmask_b32" or (vi.name in _V32 and len(_V32[vi.name][0]) <= 2))):
        raise NotCovered("SDWA form")
    return vi.sdwa[0], vi.sdwa[1]


def _sdwa_src(e: str, sel: int, sext: bool) -> str:
    """The C of ops_valu._sdwa_select: the byte or half ``sel`` of the 32-bit value ``e``, zero- or
    sign-extended (``sext``); the value itself for DWORD."""
    if sel == 6:
        return e
    if sel <= 3:
        v = f"((({e}) >> {8 * sel}) & 0xFFu)"
        return f"(U32)(int32_t)(int8_t){v}" if sext else v
    v = f"((({e}) >> {16 * (sel - 4)}) & 0xFFFFu)"
    return f"(U32)(int32_t)(int16_t){v}" if sext else v


def _lane_loop(pro: list[str], body: list[str]) -> list[str]:
    return pro + ["#pragma GCC ivdep", "for (int l = 0; l < 64; l++) {"] + ["    " + b for b in body] + ["}"]


def _valu(inst, g: _Gen) -> tuple[list[str], bool]:
    """C of one VALU instruction for wave w; (lines, writes exec)."""
    from isagen.runtime.emu.ops_valu import VInst
    vi = VInst(inst)
    sels = _sdwa_sels(vi)
    name = vi.name
    if name == "v_perm_b32" and len(vi.srcs) == 3 and not (vi.srcs[2].kind == "reg"
                                                            and vi.srcs[2].reg.file in ("v", "a")):
        # one selector for the whole wave (an SGPR or a constant, as compilers use it)
        pa, ea = g.src32(vi.srcs[0], "u32")
        pb, eb = g.src32(vi.srcs[1], "u32")
        pc, ec = g.src32(vi.srcs[2], "u32")
        # every selector byte < 8 (a byte shuffle of {a, b}, how compilers pack 16-bit halves): four
        # shifts by counts the wave shares, a lane loop the compiler vectorizes; else the general table
        shifts = ", ".join(f"s{i}_ = 8 * ((sel_ >> {8 * i}) & 7)" for i in range(4))
        head = pa + pb + pc + g.vdst(vi.vdst) + [f"const U32 sel_ = {ec};", "if ((sel_ & 0xF8F8F8F8u) == 0) {",
                                                 f"const unsigned {shifts};"]
        fast = [f"const U64 d = ((U64)({ea}) << 32) | ({eb});",
                "const U32 r = ((U32)(d >> s0_) & 0xFFu) | (((U32)(d >> s1_) & 0xFFu) << 8)"
                " | (((U32)(d >> s2_) & 0xFFu) << 16) | (((U32)(d >> s3_) & 0xFFu) << 24);",
                "d0[l] = ex[l] ? r : d0[l];"]
        slow = [f"const U32 r = perm_u(((U64)({ea}) << 32) | ({eb}), &pp);", "d0[l] = ex[l] ? r : d0[l];"]
        return (_lane_loop(head, fast) + ["} else {"] + _lane_loop(["const perm_t pp = perm_prep(sel_);"], slow)
                + ["}"]), False
    if name in _V32 or name in _V64:
        ins, expr = _V32[name] if name in _V32 else _V64[name]
        if len(vi.srcs) != len(ins):
            raise NotCovered("operand count")
        pro: list[str] = []
        ex = []
        for j, (o, ty) in enumerate(zip(vi.srcs, ins)):
            p, e = g.src64(o, ty) if ty.endswith("64") else g.src32(o, ty)
            pro += p
            ex.append(_sdwa_src(e, sels[j], vi.sext[j]) if sels is not None else e)
        decl = [f"const {'U64' if ty.endswith('64') else 'U32'} {v} = {e};" for v, ty, e in zip("abc", ins, ex)]
        if name in _V64:
            pro += g.vdst(vi.vdst, 2)
            body = decl + [f"const U64 r = {expr};",
                           "d0[l] = ex[l] ? (U32)r : d0[l];", "d1[l] = ex[l] ? (U32)(r >> 32) : d1[l];"]
        else:
            pro += g.vdst(vi.vdst, 1)
            body = decl + [f"const U32 r = {expr};", "d0[l] = ex[l] ? r : d0[l];"]
        return _lane_loop(pro, body), False
    if name == "v_cndmask_b32":
        if inst.family == "VOP3" and (any(vi.neg[:2]) or any(vi.abs[:2])):
            raise NotCovered("float modifiers")
        pa, ea = g.src32(vi.srcs[0], "u32")
        pb, eb = g.src32(vi.srcs[1], "u32")
        if sels is not None:
            ea, eb = _sdwa_src(ea, sels[0], vi.sext[0]), _sdwa_src(eb, sels[1], vi.sext[1])
        sel = vi.srcs[2] if inst.family == "VOP3" else vi.vcc_in
        pm, em = g.mask(sel)
        pro = pa + pb + pm + g.vdst(vi.vdst)
        body = [f"const U32 r = ((({em}) >> l) & 1) ? {eb} : {ea};", "d0[l] = ex[l] ? r : d0[l];"]
        return _lane_loop(pro, body), False
    if name in _CARRY:
        base = name.replace("_co", "")
        sub, rev = "sub" in base, "rev" in base
        carry_in = name.startswith(("v_addc", "v_subb"))
        pa, ea = g.src32(vi.srcs[0], "u32")
        pb, eb = g.src32(vi.srcs[1], "u32")
        if rev:
            ea, eb = eb, ea
        pro = pa + pb
        cin = "0"
        if carry_in:
            src = vi.vcc_in if vi.vcc_in is not None else (vi.srcs[2] if len(vi.srcs) > 2 else None)
            pm, em = g.mask(src)
            pro += pm
            cin = f"(I64)((({em}) >> l) & 1)"
        cout = vi.sdst or next((o for o in inst.operands if o.role == "vcc" and o.write), None)
        code = _sdst_code(cout, True) if cout is not None else None
        pro += g.vdst(vi.vdst) + ["U64 cm = 0;"]
        op = "-" if sub else "+"
        body = [f"const I64 r = (I64){ea} {op} (I64){eb} {op} {cin};",
                "d0[l] = ex[l] ? (U32)r : d0[l];",
                f"cm |= (U64)(({'r < 0' if sub else 'r > 0xFFFFFFFFll'}) & ex[l]) << l;"]
        lines = _lane_loop(pro, body)
        return ["{"] + lines + _swrite64(code, "cm") + ["}"], _writes_exec(code, True)
    if name.startswith("v_cmp_"):
        parts = name.split("_")
        opn, ty = parts[2], parts[3]
        if ty in ("i32", "u32") and opn in _ICMP:
            pa, ea = g.src32(vi.srcs[0], ty)
            pb, eb = g.src32(vi.srcs[1], ty)
            cast = "(int32_t)" if ty == "i32" else ""
            cond = f"{cast}({ea}) {_ICMP[opn]} {cast}({eb})"
        elif ty == "f32" and opn in ("o", "u", "lt", "eq", "le", "gt", "ge", "lg", "neq", "nlt", "nle", "ngt",
                                     "nge", "nlg"):
            if any(vi.neg[:2]) or any(vi.abs[:2]):
                raise NotCovered("float modifiers")
            pa, ea = g.src32(vi.srcs[0], "f32")
            pb, eb = g.src32(vi.srcs[1], "f32")
            fa, fb = f"u2f({ea})", f"u2f({eb})"
            cond = {"o": f"!(isnan_({fa}) | isnan_({fb}))", "u": f"(isnan_({fa}) | isnan_({fb}))",
                    "lt": f"{fa} < {fb}", "eq": f"{fa} == {fb}", "le": f"{fa} <= {fb}", "gt": f"{fa} > {fb}",
                    "ge": f"{fa} >= {fb}", "lg": f"(({fa} < {fb}) | ({fa} > {fb}))",
                    "neq": f"!({fa} == {fb})", "nlt": f"!({fa} < {fb})", "nle": f"!({fa} <= {fb})",
                    "ngt": f"!({fa} > {fb})", "nge": f"!({fa} >= {fb})",
                    "nlg": f"!(({fa} < {fb}) | ({fa} > {fb}))"}[opn]
        else:
            raise NotCovered(name)
        dst = vi.sdst or vi.vdst or next((o for o in inst.operands if o.role == "vcc" and o.write), None)
        code = _sdst_code(dst, True) if dst is not None else None
        body = [f"cm |= (U64)(({cond}) & ex[l]) << l;"]
        lines = _lane_loop(pa + pb + ["U64 cm = 0;"], body)
        return ["{"] + lines + _swrite64(code, "cm") + ["}"], _writes_exec(code, True)
    raise NotCovered(name)


# ============================================================================ SALU

_S2_32 = {   # name -> (C statements computing r (U32) and, when the op sets it, scc)
    "s_add_u32": "const U64 t = (U64)a + b; r = (U32)t; scc = (U32)(t >> 32) & 1;",
    "s_sub_u32": "r = a - b; scc = a < b;",
    "s_add_i32": "const I64 t = sx(a) + sx(b); r = (U32)t; scc = t > 0x7FFFFFFFll || t < -0x80000000ll;",
    "s_sub_i32": "const I64 t = sx(a) - sx(b); r = (U32)t; scc = t > 0x7FFFFFFFll || t < -0x80000000ll;",
    "s_addc_u32": "const U64 t = (U64)a + b + c; r = (U32)t; scc = (U32)(t >> 32) & 1;",
    "s_subb_u32": "const I64 t = (I64)a - (I64)b - (I64)c; r = (U32)t; scc = t < 0;",
    "s_min_i32": "scc = sx(a) < sx(b); r = scc ? a : b;",
    "s_min_u32": "scc = a < b; r = scc ? a : b;",
    "s_max_i32": "scc = sx(a) > sx(b); r = scc ? a : b;",
    "s_max_u32": "scc = a > b; r = scc ? a : b;",
    "s_cselect_b32": "r = c ? a : b; scc = c;",
    "s_and_b32": "r = a & b; scc = r != 0;",
    "s_or_b32": "r = a | b; scc = r != 0;",
    "s_xor_b32": "r = a ^ b; scc = r != 0;",
    "s_andn2_b32": "r = a & ~b; scc = r != 0;",
    "s_orn2_b32": "r = a | ~b; scc = r != 0;",
    "s_nand_b32": "r = ~(a & b); scc = r != 0;",
    "s_nor_b32": "r = ~(a | b); scc = r != 0;",
    "s_xnor_b32": "r = ~(a ^ b); scc = r != 0;",
    "s_lshl_b32": "r = a << (b & 31); scc = r != 0;",
    "s_lshr_b32": "r = a >> (b & 31); scc = r != 0;",
    "s_ashr_i32": "r = (U32)(sx(a) >> (b & 31)); scc = r != 0;",
    "s_mul_i32": "r = a * b; scc = c;",
    "s_mul_hi_u32": "r = (U32)(((U64)a * b) >> 32); scc = c;",
    "s_lshl1_add_u32": "const U64 t = ((U64)a << 1) + b; r = (U32)t; scc = (t >> 32) != 0;",
    "s_lshl2_add_u32": "const U64 t = ((U64)a << 2) + b; r = (U32)t; scc = (t >> 32) != 0;",
    "s_lshl3_add_u32": "const U64 t = ((U64)a << 3) + b; r = (U32)t; scc = (t >> 32) != 0;",
    "s_lshl4_add_u32": "const U64 t = ((U64)a << 4) + b; r = (U32)t; scc = (t >> 32) != 0;",
    "s_pack_ll_b32_b16": "r = (a & 0xFFFFu) | (b << 16); scc = c;",
    "s_pack_lh_b32_b16": "r = (a & 0xFFFFu) | (b & 0xFFFF0000u); scc = c;",
    "s_pack_hh_b32_b16": "r = (a >> 16) | (b & 0xFFFF0000u); scc = c;",
}
_S2_64 = {
    "s_cselect_b64": "r = c ? a : b; scc = c;",
    "s_and_b64": "r = a & b; scc = r != 0;",
    "s_or_b64": "r = a | b; scc = r != 0;",
    "s_xor_b64": "r = a ^ b; scc = r != 0;",
    "s_andn2_b64": "r = a & ~b; scc = r != 0;",
    "s_orn2_b64": "r = a | ~b; scc = r != 0;",
    "s_nand_b64": "r = ~(a & b); scc = r != 0;",
    "s_nor_b64": "r = ~(a | b); scc = r != 0;",
    "s_xnor_b64": "r = ~(a ^ b); scc = r != 0;",
    "s_lshl_b64": "r = a << (b & 63); scc = r != 0;",
    "s_lshr_b64": "r = a >> (b & 63); scc = r != 0;",
}
_S2_64_B32 = {"s_lshl_b64", "s_lshr_b64"}
_SC_32 = {"eq": "==", "lg": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_S1_32 = {"s_mov_b32": "r = a; scc = c;", "s_not_b32": "r = ~a; scc = r != 0;"}
_S1_64 = {"s_mov_b64": "r = a; scc = c;", "s_not_b64": "r = ~a; scc = r != 0;"}
_SAVEEXEC = {
    "s_and_saveexec_b64": "s & e", "s_or_saveexec_b64": "s | e", "s_xor_saveexec_b64": "s ^ e",
    "s_andn2_saveexec_b64": "s & ~e", "s_orn2_saveexec_b64": "s | ~e", "s_nand_saveexec_b64": "~(s & e)",
    "s_nor_saveexec_b64": "~(s | e)", "s_xnor_saveexec_b64": "~(s ^ e)", "s_andn1_saveexec_b64": "~s & e",
    "s_orn1_saveexec_b64": "~s | e",
}


def _salu(inst, g: _Gen) -> tuple[list[str], bool]:
    name, fam = inst.name, inst.family
    d = next((o for o in inst.operands if o.role == "sdst"), None)
    srcs = [o for o in inst.operands if o.role in ("ssrc0", "ssrc1")]
    scc = "SCC[w]"
    if fam == "SOPK":
        imm = inst.mods.get("simm16", 0) & 0xFFFF
        simm = imm - 0x10000 if imm & 0x8000 else imm
        if name == "s_movk_i32":
            code = _sdst_code(d, False)
            return _swrite32(code, f"{simm & 0xFFFFFFFF:#x}u"), _writes_exec(code, False)
        if name.startswith("s_cmpk_"):
            opn = name.split("_")[2]
            if opn not in _SC_32 or d is None or d.kind != "reg" or d.reg.code >= 128:
                raise NotCovered(name)
            code = d.reg.code
            if name.endswith("i32"):
                return [f"{scc} = sx(S[{code} * W + w]) {_SC_32[opn]} (I64){simm};"], False
            return [f"{scc} = (I64)S[{code} * W + w] {_SC_32[opn]} (I64){imm};"], False
        if name == "s_addk_i32":
            code = _sdst_code(d, False)
            if code is None:
                raise NotCovered(name)
            lines = [f"{{ const I64 t = sx(S[{code} * W + w]) + {simm};",
                     f"  {scc} = t > 0x7FFFFFFFll || t < -0x80000000ll;"]
            return lines + _swrite32(code, "(U32)t") + ["}"], _writes_exec(code, False)
        if name == "s_mulk_i32":
            code = _sdst_code(d, False)
            if code is None:
                raise NotCovered(name)
            lines = [f"{{ const I64 t = sx(S[{code} * W + w]) * {simm};"]
            return lines + _swrite32(code, "(U32)t") + ["}"], _writes_exec(code, False)
        raise NotCovered(name)
    if fam == "SOPC":
        parts = name.split("_")
        if name in ("s_cmp_eq_u64", "s_cmp_lg_u64"):
            pa, ea = g.src64(srcs[0], lanes=False)
            pb, eb = g.src64(srcs[1], lanes=False)
            return ["{"] + pa + pb + [f"{scc} = {ea} {_SC_32[parts[2]]} {eb};", "}"], False
        if len(parts) == 4 and parts[1] == "cmp" and parts[2] in _SC_32 and parts[3] in ("i32", "u32"):
            pa, ea = g.src32(srcs[0], lanes=False)
            pb, eb = g.src32(srcs[1], lanes=False)
            if parts[3] == "i32":
                ea, eb = f"sx({ea})", f"sx({eb})"
            return ["{"] + pa + pb + [f"{scc} = {ea} {_SC_32[parts[2]]} {eb};", "}"], False
        if name in ("s_bitcmp0_b32", "s_bitcmp1_b32"):
            pa, ea = g.src32(srcs[0], lanes=False)
            pb, eb = g.src32(srcs[1], lanes=False)
            return ["{"] + pa + pb + [f"{scc} = (({ea} >> ({eb} & 31)) & 1) == {name[8]};", "}"], False
        raise NotCovered(name)
    if fam == "SOP2":
        if name in _S2_32:
            pa, ea = g.src32(srcs[0], lanes=False)
            pb, eb = g.src32(srcs[1], lanes=False)
            code = _sdst_code(d, False)
            body = ["{"] + pa + pb + [f"const U32 a = {ea}, b = {eb}, c = {scc}; U32 r, scc;", _S2_32[name]]
            return body + _swrite32(code, "r") + [f"{scc} = scc;", "}"], _writes_exec(code, False)
        if name in _S2_64:
            pa, ea = g.src64(srcs[0], lanes=False)
            pb, eb = g.src32(srcs[1], lanes=False) if name in _S2_64_B32 else g.src64(srcs[1], lanes=False)
            code = _sdst_code(d, True)
            body = ["{"] + pa + pb + [f"const U64 a = {ea}, b = {eb}; const U32 c = {scc}; U64 r; U32 scc;",
                                      _S2_64[name]]
            return body + _swrite64(code, "r") + [f"{scc} = scc;", "}"], _writes_exec(code, True)
        raise NotCovered(name)
    if fam == "SOP1":
        if name in _S1_32:
            pa, ea = g.src32(srcs[0], lanes=False)
            code = _sdst_code(d, False)
            return (["{"] + pa + [f"const U32 a = {ea}, c = {scc}; U32 r, scc;", _S1_32[name]]
                    + _swrite32(code, "r") + [f"{scc} = scc;", "}"]), _writes_exec(code, False)
        if name in _S1_64:
            pa, ea = g.src64(srcs[0], lanes=False)
            code = _sdst_code(d, True)
            return (["{"] + pa + [f"const U64 a = {ea}; const U32 c = {scc}; U64 r; U32 scc;", _S1_64[name]]
                    + _swrite64(code, "r") + [f"{scc} = scc;", "}"]), _writes_exec(code, True)
        if name in _SAVEEXEC:
            pa, ea = g.src64(srcs[0], lanes=False)
            code = _sdst_code(d, True)
            lines = ["{"] + pa + [f"const U64 s = {ea};",
                                  "const U64 e = (U64)S[126 * W + w] | ((U64)S[127 * W + w] << 32);",
                                  f"const U64 n_ = {_SAVEEXEC[name]};"]
            lines += _swrite64(code, "e") + _swrite64(126, "n_") + [f"{scc} = n_ != 0;", "}"]
            return lines, True
        raise NotCovered(name)
    raise NotCovered(name)


# ============================================================================ DS

def ds_layout(name: str, la) -> tuple[int, list[int]]:
    """(bytes per element, the elements' offsets) of a covered LDS instruction (``la``: its
    ops_ds.DsAddressing); NotCovered for the others."""
    from isagen.runtime.emu.ops_ds import _pair_layout
    if name.startswith(("ds_read2", "ds_write2")):
        if name[-3:] not in ("b32", "b64") or name[len("ds_read2"):] not in ("_b32", "_b64", "st64_b32", "st64_b64") \
                and name[len("ds_write2"):] not in ("_b32", "_b64", "st64_b32", "st64_b64"):
            raise NotCovered(name)
        size, o0, o1 = _pair_layout(name, la)
        return size, [o0, o1]
    parts = name.split("_")
    sizes = {"b32": 4, "b64": 8, "b96": 12, "b128": 16}
    if len(parts) != 3 or parts[1] not in ("read", "write") or parts[2] not in sizes:
        raise NotCovered(name)
    return sizes[parts[2]], [la.offset]


def _ds(inst, ctx, k: int, after_check: list[str] | None = None) -> tuple[list[str], int, int] | None:
    """One LDS instruction as a segment over all waves: (lines, bytes read per active lane, written).
    ``after_check``: lines between the bounds check and the access (the sanitizer's: san_ds.py)."""
    from isagen.runtime.emu.ops_ds import DsAddressing
    name = inst.name
    la = DsAddressing(inst, ctx)
    if la.ai is None:
        raise NotCovered("no address register")
    ai = la.ai
    size, elems = ds_layout(name, la)
    read = name.startswith("ds_read")
    ndw = size // 4
    if read:
        di = ctx.vindex(la.ops["vdst"].reg, ndw * len(elems))
        srcs = []
    else:
        di = -1
        srcs = [ctx.vindex(la.ops["data0"].reg, ndw)]
        if len(elems) == 2:
            srcs.append(ctx.vindex(la.ops["data1"].reg, ndw))
    # bounds first, for every wave: a bad lane leaves the instruction (and the rest) to numpy
    check = ["for (I64 k = k0; k < k1; k++) {", "    const I64 w = ws[k];", "    const uint8_t *ex = EX + w * 64;",
             f"    const U32 *ad = V + ((I64){ai} * W + w) * 64;", "    int bad = 0;",
             "    for (int l = 0; l < 64; l++) {", "        const I64 a = (I64)ad[l];"]
    conds = " | ".join(f"(a + {o + size} > lds_bytes)" for o in elems)
    check += [f"        bad |= ex[l] & ({conds});", "    }", f"    if (bad) {{ counts[2] = k0; return {k}; }}", "}"]
    lines = ["{"] + check + list(after_check or ())
    if read:
        # lane by lane: the address, every element's data, then the writes (a destination may be the
        # address register); an inactive lane reads (and drops) the row's first bytes: no branch
        nv = ndw * len(elems)
        lines += ["for (I64 k = k0; k < k1; k++) {", "    const I64 w = ws[k];", "    const uint8_t *ex = EX + w * 64;",
                  f"    const U32 *ad = V + ((I64){ai} * W + w) * 64;",
                  "    const uint8_t *lb = lds + wg[w] * L;", "    int n = 0;"]
        lines += [f"    U32 *d{j} = V + ((I64){di + j} * W + w) * 64;" for j in range(nv)]
        lines += ["    for (int l = 0; l < 64; l++) {", "        const int on = ex[l];", f"        U32 v[{nv}];"]
        lines += [f"        memcpy(&v[{e * ndw}], lb + (on ? (I64)ad[l] + {off} : 0), {size});"
                  for e, off in enumerate(elems)]
        lines += [f"        d{j}[l] = on ? v[{j}] : d{j}[l];" for j in range(nv)]
        lines += ["        n += on;", "    }", f"    counts[0] += (I64)n * {size * len(elems)};", "}"]
    else:
        for e, off in enumerate(elems):
            lines += ["for (I64 k = k0; k < k1; k++) {", "    const I64 w = ws[k];",
                      "    const uint8_t *ex = EX + w * 64;",
                      f"    const U32 *ad = V + ((I64){ai} * W + w) * 64;",
                      "    uint8_t *lb = lds + wg[w] * L;", "    int n = 0;"]
            s_ = srcs[e]
            lines += [f"    const U32 *s{j} = V + ((I64){s_ + j} * W + w) * 64;" for j in range(ndw)]
            lines += ["    for (int l = 0; l < 64; l++) if (ex[l]) {", f"        U32 val[{ndw}];"]
            lines += [f"        val[{j}] = s{j}[l];" for j in range(ndw)]
            lines += [f"        memcpy(lb + (I64)ad[l] + {off}, val, {size}); n++;", "    }",
                      f"    counts[1] += (I64)n * {size};", "}"]
    lines.append("}")
    return lines, (size * len(elems) if read else 0), (0 if read else size * len(elems))


# ============================================================================ global loads

def _gload(inst, ctx, k: int) -> list[str]:
    """A global load of 1-4 dwords (``global_load_dword[xN]``, a 64-bit VGPR address or an SGPR base
    plus a 32-bit VGPR offset) as a segment over all waves of the workgroup: first every active lane's
    bounds (a lane outside every allocation stops the run before it: the numpy handler reports it),
    then lane by lane the address, the data, the writes (the destination may be the address)."""
    from isagen.runtime.emu.ops_mem import VMem
    if inst.family != "GLOBAL":
        raise NotCovered(inst.family)
    vm = VMem(inst, ctx)
    if vm.kind != "load" or vm.lds or vm.d16 or vm.atomic or vm.size not in (4, 8, 12, 16):
        raise NotCovered(inst.name)
    size, ndw = vm.size, vm.size // 4
    off = vm.offset & 0xFFFFFFFFFFFFFFFF
    a, saddr = vm.ops.get("addr"), vm.ops.get("saddr")
    if a is None or a.kind != "reg" or a.reg.file not in ("v", "a"):
        raise NotCovered("address")
    if saddr is not None and saddr.kind == "reg":
        if saddr.reg.code >= 127:
            raise NotCovered("saddr")
        vi = ctx.vindex(a.reg, 1)
        pro = [f"const U64 base = ((U64)S[{saddr.reg.code} * W + w] | ((U64)S[{saddr.reg.code + 1} * W + w] << 32))"
               f" + {off:#x}ull;", f"const U32 *av = V + ((I64){vi} * W + w) * 64;"]
        addr = "base + (U64)av[l]"
    else:
        vi = ctx.vindex(a.reg, 2)
        pro = [f"const U32 *av = V + ((I64){vi} * W + w) * 64;", f"const U32 *aw = V + ((I64){vi + 1} * W + w) * 64;"]
        addr = f"((U64)av[l] | ((U64)aw[l] << 32)) + {off:#x}ull"
    di = ctx.vindex(vm.ops["vdst"].reg if "vdst" in vm.ops else _data_dst_reg(vm), ndw)
    head = ["for (I64 k = k0; k < k1; k++) {", "    const I64 w = ws[k];", "    const uint8_t *ex = EX + w * 64;"]
    head += ["    " + x for x in pro]
    lines = ["{", "I64 last = -1;"] + head + [
        "    int bad = 0;",
        "    for (int l = 0; l < 64; l++)",
        f"        if (ex[l]) bad |= !in_alloc(gm, {addr}, {size}, &last);",
        f"    if (bad) {{ counts[2] = k0; return {k}; }}", "}"]
    lines += head + [f"    U32 *d{j} = V + ((I64){di + j} * W + w) * 64;" for j in range(ndw)]
    lines += ["    const uint8_t *ar = (const uint8_t *)(intptr_t)gm[1];", "    const U64 a0 = (U64)gm[2];",
              "    I64 n = 0;", "    for (int l = 0; l < 64; l++) if (ex[l]) {",
              f"        const U64 a = {addr};", f"        U32 v[{ndw}];", f"        memcpy(v, ar + (a - a0), {size});"]
    lines += [f"        d{j}[l] = v[{j}];" for j in range(ndw)]
    lines += ["        n++;", "    }", f"    counts[{4 + ndw - 1}] += n * {size};", "}", "}"]
    return lines


def _data_dst_reg(vm):
    o = vm.ops.get("vdata")
    if o is None or o.kind != "reg":
        raise NotCovered("destination")
    return o.reg


# ============================================================================ runs

def _covered(s: CompiledStep, ctx) -> tuple[str, list[str], bool] | None:
    """(kind 'wave' | 'lds' | 'nop', C lines, writes exec) of a step, or None when it is not covered."""
    from isagen.runtime.emu.ops_salu import _noop
    if s.error is not None or s.term:
        return None
    inst = s.inst
    if getattr(s.fn, "san_base", s.fn) is _noop and s.cat in ("nop", "waitcnt"):     # (sanitized too)
        return "nop", [], False
    if s.cat == "mfma":
        # the native MFMA kernel for the wave (native.py's mfma_wave on the step's record, which the
        # handler makes per batch); the same bits as the numpy path (test_emu_native.py)
        if getattr(s, "native_call", None) is not None and native.available():
            return "mfma", [], False
        return None
    try:
        if s.cat == "valu" and inst.family in ("VOP1", "VOP2", "VOP3", "VOPC") and not inst.mai:
            g = _Gen(ctx)
            lines, wexec = _valu(inst, g)
            return "wave", lines, wexec
        if s.cat == "salu" and inst.family in ("SOP1", "SOP2", "SOPC", "SOPK"):
            g = _Gen(ctx)
            lines, wexec = _salu(inst, g)
            return "wave", lines, wexec
        if s.cat == "vmem" and inst.family == "GLOBAL":
            _gload(inst, ctx, 0)
            return "gmem", [], False
        if s.cat == "ds" and inst.family == "DS":
            r = _ds(inst, ctx, 0)
            if r is not None:
                return "lds", [], False
    except (NotCovered, CompileError):
        return None
    return None


class _Run:
    __slots__ = ("first", "steps", "src", "fname", "wexec", "lds", "mfmas", "gmem", "cost", "ds_gen", "parts")

    def __init__(self, first: int, steps: list):
        self.first, self.steps = first, steps
        self.src = ""
        self.fname = ""
        self.wexec = False
        self.lds = False
        self.gmem = False            # global loads: their bytes are counted (RunContext.global_access)
        self.cost = 0                # the work of one wave, in units of a VALU instruction (COST_*)
        self.mfmas: list[CompiledStep] = []     # the run's MFMAs, in order (their records: recs[j])
        self.ds_gen: Callable | None = None     # the C of its LDS instructions, when not _ds's (san_ds.py)
        self.parts: list | None = None          # san_cgen: the runs and steps of a run that writes EXEC


def _vgprs(inst, ctx) -> set[int]:
    """The unified-file indices of the vector registers an instruction names."""
    out: set[int] = set()
    for o in inst.operands:
        if o.kind == "reg" and o.reg is not None and o.reg.file in ("v", "a"):
            i = ctx.vindex(o.reg)
            out.update(range(i, i + o.reg.count))
    return out


def _run_source(run: _Run, ctx) -> str:
    """The C function of a run: segments of per-wave code and LDS instructions."""
    run.mfmas = []
    run.cost = 0
    out = [f"I64 {run.fname}(I64 W, const I64 *ws, I64 nws, U32 *V, U32 *S, U32 *SCC, uint8_t *EX,"
           " uint8_t *lds, I64 L, I64 lds_bytes, const I64 *wg, I64 *counts, const I64 *recs, mfn_t mf,"
           " const I64 *gm) {",
           # workgroup by workgroup (waves of one are consecutive in ws when counts[3] is set): they
           # share nothing, and one workgroup's registers and LDS stay in the caches for the whole run
           "for (I64 k0 = 0, k1; k0 < nws; k0 = k1) {",
           "k1 = k0 + 1;",
           "if (counts[3]) { while (k1 < nws && wg[ws[k1]] == wg[ws[k0]]) k1++; } else k1 = nws;"]
    seg: list[str] = []
    regs: set[int] = set()        # the VGPRs (unified file) of the segment's instructions

    def flush():
        if seg:
            # the next wave's registers of the segment asked for (into L2) while this wave runs: a wave's
            # registers lie W * 256 bytes apart, which no hardware prefetcher follows
            pf = sorted(regs)
            pre = [f"static const short pf[{len(pf)}] = {{{', '.join(map(str, pf))}}};",
                   "if (k + 1 < nws) {", "    const I64 wn = ws[k + 1];",
                   f"    for (int q = 0; q < {len(pf)}; q++) {{",
                   "        const char *p = (const char *)(V + ((I64)pf[q] * W + wn) * 64);",
                   "        __builtin_prefetch(p, 1, 2); __builtin_prefetch(p + 64, 1, 2);",
                   "        __builtin_prefetch(p + 128, 1, 2); __builtin_prefetch(p + 192, 1, 2);", "    }", "}"] \
                if pf and len(seg) > 4 * 4 else []
            out.extend(["for (I64 k = k0; k < k1; k++) {", "const I64 w = ws[k];", "const uint8_t *ex = EX + w * 64;"]
                       + pre + seg + ["}"])
            seg.clear()
            regs.clear()

    for k, s in enumerate(run.steps):
        c = _covered(s, ctx)
        assert c is not None
        kind, lines, wexec = c
        run.wexec |= wexec
        if kind == "nop":
            continue
        if kind in ("mfma", "wave"):
            regs.update(_vgprs(s.inst, ctx))
        if kind == "mfma":
            seg.append(f"/* {s.inst.text} */")
            seg.append(f"mf(recs + {len(run.mfmas) * native.REC}, w);")
            run.mfmas.append(s)
            run.cost += COST_MFMA
            continue
        if kind == "gmem":
            flush()
            out.extend([f"/* {s.inst.text} */"] + _gload(s.inst, ctx, k))
            run.gmem = True
            run.cost += COST_MEM
            continue
        if kind == "lds":
            flush()
            r = run.ds_gen(s.inst, ctx, k) if run.ds_gen is not None else _ds(s.inst, ctx, k)
            assert r is not None
            out.extend([f"/* {s.inst.text} */"] + r[0])
            run.lds = True
            run.cost += COST_MEM
        else:
            seg.append(f"/* {s.inst.text} */")
            seg.append("{")
            seg.extend(lines)
            seg.append("}")
            run.cost += 1
    flush()
    out += ["}", "return -1;", "}"]
    return "\n".join(out)


class Plan:
    """The native engine of one compiled program (``executor.CompiledCode``)."""

    def __init__(self, prog, fuse_mfma_runs):
        self.prog = prog
        # executor._fuse_mfma_runs (passed in: the executor imports this module): a block's steps ->
        # its handlers with the runs of MFMAs fused
        self.fuse_mfma_runs = fuse_mfma_runs
        self.mode = mode()
        self.pending = self.mode != "off"
        self.lib = None
        self.runs: dict[tuple[int, int], _Run] = {}    # (first, last) instruction index -> run
        self.cfns: dict[str, int] = {}
        self.par = None
        self.by_first: dict[int, list[_Run]] = {}
        self._job: _Build | None = None      # the compiler run in progress
        self._runs: list[_Run] = []

    # ---------------------------------------------------------------- build
    def maybe_build(self, st) -> None:
        """Start the build once the batch ``st`` has executed enough, and load the library once the
        compiler has finished (executor.run_batch asks every 256 blocks while ``pending``)."""
        if self._job is not None:
            if self._job.poll():
                self._finish()
        elif int(st.icount.sum()) >= THRESHOLD:
            self.build(wait=False)

    def build(self, wait: bool = True) -> None:
        """Generate the C of every run of every basic block and compile it (in the background unless
        ``wait``: the launch goes on with the numpy handlers meanwhile); load it and re-fuse the blocks
        when it is ready."""
        global _why
        prog = self.prog
        from isagen.runtime.emu import xp as X
        if X.active() != "cpu":
            self.pending = False
            return
        try:
            n = len(prog.insts)
            for i in sorted(prog.leaders):
                if i < n:
                    prog.block_at(i, fuse=False)
            runs: list[_Run] = []
            for blk in sorted(prog._blocks.values(), key=lambda b: b.start):
                runs += self._block_runs(blk)
            if not runs:
                _why = "no instruction of the kernel has a C form"
                self.pending = False
                return
            parts = [_HDR + self.extra_source()]
            for r in runs:
                r.fname = f"run_{r.first}_{r.first + len(r.steps) - 1}"
                r.src = _run_source(r, prog.ctx)
                parts.append(r.src)
            self._runs = runs
            self._job = _Build("\n\n".join(parts) + "\n")
        except Exception as e:     # a generator gap must never stop a launch: the numpy path runs
            _why = f"generating the native block code failed: {type(e).__name__}: {e}"
            self.pending = False
            return
        finally:
            for blk in prog._blocks.values():
                if blk.fns is None or len(blk.fns) == len(blk.steps):
                    blk.fns = self.fuse_mfma_runs(blk.steps)
        if wait or self._job.poll():
            self._finish()

    def _finish(self) -> None:
        job, runs = self._job, self._runs
        self._job, self._runs = None, []
        self.pending = False
        lib = job.result() if job is not None else None
        if lib is None:
            return
        fns, self.par = _load(lib, runs)
        for r in runs:
            self.cfns[r.fname] = fns[r.fname]
            self.runs[(r.first, r.first + len(r.steps) - 1)] = r
            self.by_first.setdefault(r.first, []).append(r)
        self.lib = lib
        for blk in self.prog._blocks.values():
            blk.fns = self.fuse_block(blk.steps)

    def extra_source(self) -> str:
        """C the runs' functions use beyond the common header (san_cgen.SanPlan: the LDS shadow's)."""
        return ""

    def _block_runs(self, b) -> list[_Run]:
        out: list[_Run] = []
        cur: list = []
        first = -1

        def flush():
            # a run worth a call: at least one instruction that does something
            if cur and any(_covered(s, self.prog.ctx)[0] != "nop" for s in cur):
                out.append(_Run(first, list(cur)))
            cur.clear()

        for s in b.steps:
            ok = s is self.prog.steps[s.idx] and _covered(s, self.prog.ctx) is not None
            if ok:
                if not cur:
                    first = s.idx
                cur.append(s)
            else:
                flush()
        flush()
        return out

    # ---------------------------------------------------------------- running
    def fuse_block(self, steps: list[CompiledStep]) -> list:
        """The block's handlers (executor._fuse_mfma_runs applied), with each run of covered steps that
        has a C function as one handler."""
        out: list[CompiledStep] = []
        i = 0
        n = len(steps)
        while i < n:
            s = steps[i]
            hit = None
            if s is self.prog.steps[s.idx]:
                for r in self.by_first.get(s.idx, ()):
                    if i + len(r.steps) <= n and all(a is b for a, b in zip(steps[i:i + len(r.steps)], r.steps)):
                        hit = r
                        break
            if hit is None:
                out.append(s)
                i += 1
                continue
            ps = CompiledStep(s.inst, s.idx, self.run_handler(hit), "cgen")
            out.append(ps)
            i += len(hit.steps)
        return self.fuse_mfma_runs(out)

    def run_handler(self, run: _Run):
        """The handler of a built run (san_cgen.SanPlan adds the sanitizer's checks)."""
        return _handler(self.cfns[run.fname], run, self.par)


def _load(lib, runs: list[_Run]) -> tuple[dict, object]:
    """The run functions of a loaded library by name (as raw addresses for ``cgen_par``) and the
    library's ``cgen_par`` driver."""
    P, L = ctypes.c_void_p, ctypes.c_int64
    par = lib.cgen_par
    par.argtypes = [P, L, L, P, P, P, P, P, P, L, L, P, P, P, P, P, P, L, P]
    par.restype = L
    return {r.fname: ctypes.cast(getattr(lib, r.fname), ctypes.c_void_p).value for r in runs}, par


NCOUNT = 8       # the counters of a run's call (the C source's NCOUNT; see cgen_par)

# workgroups per chunk of a run's threaded call: each thread takes chunks until none is left (a thread
# the OS holds back on a shared machine then does less of the work); at least this many chunks per call
CHUNKS = 16
# a run's work per wave in units of one VALU instruction over a wave (~20-40 ns): an MFMA (32x32x8:
# ~0.5 us), an LDS or global access; a call spreads over threads from THREAD_WORK units (~0.5 ms:
# starting a thread costs ~20-50 us) and MIN_THREAD_WAVES waves
COST_MFMA, COST_MEM = 20, 4
THREAD_WORK = 16384
MIN_THREAD_WAVES = 64


def _chunks(wg_of_ws: np.ndarray, by_wg: bool, threads: int) -> np.ndarray:
    """int64 chunk bounds in ws (whole workgroups each) for ``cgen_par``."""
    n = wg_of_ws.size
    if not by_wg or threads < 2 or n < MIN_THREAD_WAVES:
        return np.array([0, n], np.int64)
    starts = np.flatnonzero(np.concatenate(([True], wg_of_ws[1:] != wg_of_ws[:-1])))
    step = max(1, -(-starts.size // CHUNKS))
    return np.concatenate((starts[::step], [n])).astype(np.int64)


def _handler(cfn: int, run: _Run, par, hook=None):
    """The handler of a loaded run.  ``hook`` (san_ds.DsHook): ``hook.recs(st, mfma records or None, wsa)``
    gives the ``recs`` address the run's C gets, ``hook.after(st, wsa, wg, bounds, res, stopped)`` runs
    after its call, before the numpy handlers finish what it stopped before."""
    steps = run.steps
    wexec, lds, gmem = run.wexec, run.lds, run.gmem
    fallback = [s.fn for s in steps]
    key = "cgen"
    mfmas = run.mfmas
    cost = run.cost

    def fn(st, ws):
        V = st.V
        if not isinstance(V, np.ndarray):       # another engine's arrays: the numpy handlers
            for h in fallback:
                h(st, ws)
            return
        b = st.native_calls.get(key)
        if b is None:
            b = st.native_calls[key] = _Args(st)
        if gmem and not b.gma:                  # global memory not in one host arena: the numpy handlers
            for h in fallback:
                h(st, ws)
            return
        recs = 0
        mrecs = None
        if mfmas:
            plan = st.native_calls.get(id(fn))      # per batch: the MFMA records point into its registers
            if plan is None:
                calls = [s.native_call(st) for s in mfmas]
                plan = st.native_calls[id(fn)] = (np.ascontiguousarray(np.stack([c[0] for c in calls]), np.int64)
                                                  if all(c is not None for c in calls) else None, calls)
            if plan[0] is None:
                for h in fallback:
                    h(st, ws)
                return
            mrecs = plan[0]
            recs = native.address(mrecs)
        whole = isinstance(ws, slice) and ws == ALL
        if isinstance(ws, slice):
            wsa = b.all_ws if whole else np.ascontiguousarray(b.all_ws[ws])     # a stepped slice too
        else:
            wsa = ws if (ws.dtype == np.int64 and ws.flags.c_contiguous) else np.ascontiguousarray(ws, np.int64)
        if hook is not None:
            recs = hook.recs(st, mrecs, wsa)
        threads = b.threads if wsa.size * cost >= THREAD_WORK else 1
        if threads == 1:
            bounds = b.one_chunk if whole else np.array([0, wsa.size], np.int64)
        else:
            bounds = b.all_bounds if whole else _chunks(b.wg[wsa], bool(b.cnt[3]), threads)
        nch = bounds.size - 1
        res = b.res if nch <= b.res.size // 2 else np.zeros(2 * nch, np.int64)
        c = b.cnt
        stopped = par(cfn, threads, st.W, native.address(wsa), b.V, b.S, b.SCC, b.EX, b.lds, b.L, b.lds_bytes,
                      b.wga, b.counts, recs, b.mf, b.gma if gmem else 0, native.address(bounds), nch,
                      native.address(res))
        if wexec:
            st.exec_all = bool(st.EXEC.all())
        if lds:
            rc = st.run
            rc.lds_bytes_read += int(c[0])
            rc.lds_bytes_written += int(c[1])
            c[:2] = 0
        if gmem:
            rc = st.run
            for d in range(4):
                if c[4 + d]:
                    rc.global_access(4 * (d + 1), int(c[4 + d]), write=False)
            c[4:] = 0
        if hook is not None:
            hook.after(st, wsa, b.wg if b.cnt[3] else None, bounds, res[:2 * nch].reshape(nch, 2), stopped)
        if stopped:
            _finish_stopped(st, wsa, b.wg if b.cnt[3] else None, bounds, res[:2 * nch].reshape(nch, 2), fallback)
    return fn


def stop_positions(wsa: np.ndarray, wg: np.ndarray | None, bounds: np.ndarray, res: np.ndarray,
                   done: int) -> np.ndarray:
    """The next step of each wave of ``wsa`` after a run's call whose chunks stopped (see
    :func:`_finish_stopped`): ``done`` (the run's length) for the waves that finished it."""
    n = wsa.size
    pos = np.full(n, done, np.int64)
    wgs = wg[wsa] if wg is not None else None
    for c in np.flatnonzero(res[:, 0] >= 0):
        r, p = int(res[c, 0]), int(res[c, 1])
        k1 = int(bounds[c + 1])
        q = p + int(np.count_nonzero(wgs[p:k1] == wgs[p])) if wgs is not None else k1
        pos[p:q] = r
        pos[q:k1] = 0
    return pos


def _finish_stopped(st, wsa: np.ndarray, wg: np.ndarray | None, bounds: np.ndarray, res: np.ndarray,
                    fallback: list) -> None:
    """After chunks stopped at an LDS or global access out of range (``res[c] = (step, where its workgroup
    starts)``):
    the numpy handlers run the rest, in their order.  The stopped workgroup of a chunk has executed
    the steps before its stop, the chunk's later workgroups none, every other workgroup the whole run;
    step j then runs over every unfinished wave that has not executed it yet, in ws order.  That is
    what the numpy path's one-step-over-all-waves order gives, reports included: a workgroup that
    finished in C had no access out of range (it would have stopped), so leaving it out of a step
    changes no register, no LDS byte and no report; and workgroups share nothing.  ``wg``: the
    workgroup of each wave of the batch, or None where the run took ws as one group (its waves not
    ordered by workgroup: one chunk, stopped as a whole)."""
    done = len(fallback)
    pos = stop_positions(wsa, wg, bounds, res, done)
    for j in range(int(pos.min()), done):
        sel = wsa[pos <= j]
        if sel.size:
            fallback[j](st, sel)


class _Args:
    __slots__ = ("V", "S", "SCC", "EX", "lds", "L", "lds_bytes", "wg", "wga", "all_ws", "cnt", "counts", "threads",
                 "all_bounds", "one_chunk", "res", "mf", "gm", "gma")

    def __init__(self, st):
        a = native.address
        for name in ("V", "S", "SCC", "EXEC", "lds"):
            arr = getattr(st, name)
            assert arr.flags.c_contiguous, name
        self.V, self.S, self.SCC, self.EX = a(st.V), a(st.S), a(st.SCC), a(st.EXEC)
        self.lds, self.L, self.lds_bytes = a(st.lds), int(st.lds.shape[1]), int(st.lds_bytes)
        self.wg = np.ascontiguousarray(st.wg, np.int64)
        self.wga = a(self.wg)
        self.all_ws = np.arange(st.W, dtype=np.int64)
        # [LDS bytes read, written, where in ws the workgroup that stopped starts, by workgroup?]
        self.cnt = np.zeros(NCOUNT, np.int64)
        self.cnt[3] = int(bool(np.all(np.diff(self.wg) >= 0)))     # a workgroup's waves consecutive
        self.counts = a(self.cnt)
        # chunks of whole workgroups over the usable cores (native.threads, ISAGEN_EMU_THREADS)
        self.threads = native.threads()
        self.all_bounds = _chunks(self.wg, bool(self.cnt[3]), self.threads)
        self.one_chunk = np.array([0, st.W], np.int64)
        self.res = np.zeros(2 * (CHUNKS + 1), np.int64)
        self.mf = native.wave_function()
        # global memory for the loads: [allocations, arena address, its device address, starts, ends]
        rc = getattr(st, "run", None)
        mem = rc.memory if rc is not None else None
        if mem is not None and isinstance(mem.arena, np.ndarray) and mem.arena.flags.c_contiguous:
            from isagen.runtime.emu.arena import ARENA_BASE
            self.gm = np.array([mem._starts.size, a(mem.arena), ARENA_BASE, a(mem._starts), a(mem._ends)], np.int64)
            self.gma = a(self.gm)
        else:
            self.gm, self.gma = None, 0


def covers(step: CompiledStep, ctx) -> bool:
    """Whether the step has a C form (it can be part of a native run)."""
    return _covered(step, ctx) is not None


def compile_runs(ctx, runs: list[list[CompiledStep]]) -> list | None:
    """Handlers ``fn(st, ws)`` that each run one list of covered steps as one native run (all in one
    library); None when it cannot be built.  The tests compare them with the numpy handlers."""
    rs = []
    for k, steps in enumerate(runs):
        r = _Run(steps[0].idx, list(steps))
        r.fname = f"run{k}"
        r.src = _run_source(r, ctx)
        rs.append(r)
    lib = _Build("\n\n".join([_HDR] + [r.src for r in rs]) + "\n").result()
    if lib is None:
        return None
    fns, par = _load(lib, rs)
    return [_handler(fns[r.fname], r, par) for r in rs]


# ============================================================================ building

# generated block libraries kept in the cache (one per kernel and compiler; the least recently used
# go first): a tuning sweep or a test run emulates hundreds of kernels, each library 15-500 KB
KEEP_LIBRARIES = 64


def trim_cache(out_dir: Path, keep: int) -> int:
    """Remove all but the ``keep`` most recently used ``blocks_*.so`` of ``out_dir`` (by modification
    time, which a load refreshes); returns how many were removed.  A library another process has
    loaded stays usable (its mapping outlives the file)."""
    try:
        libs = sorted(out_dir.glob("blocks_*.so"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return 0
    n = 0
    for p in libs[max(keep, 0):]:
        try:
            p.unlink()
            n += 1
        except OSError:
            pass
    return n


class _Build:
    """One compiler run for a generated source, in the background; the library is cached under
    ``cache_dir() / "emu-native"`` by a hash of the source, compiler, flags and host CPU."""

    def __init__(self, src: str):
        global _why
        self.proc: subprocess.Popen | None = None
        self.tmp: str | None = None
        self.so: Path | None = None
        self.err: Path | None = None
        cc = native._compiler()
        if cc is None:
            _why = "no C compiler on PATH (cc, gcc, clang, clang-22, clang-19 or $CC)"
            return
        self.cc = cc
        from isagen.objects.cache import cache_dir
        key = hashlib.sha256((src + cc + " ".join(FLAGS) + native._cpu_id()).encode()).hexdigest()[:20]
        out_dir = cache_dir() / "emu-native"
        self.so = out_dir / f"blocks_{key}.so"
        if self.so.exists():
            try:
                os.utime(self.so)       # recently used: the trim below keeps it
            except OSError:
                pass
            return
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            trim_cache(out_dir, KEEP_LIBRARIES - 1)
            self.tmp = tempfile.mkdtemp(prefix="isagen-cgen-")
            c = Path(self.tmp) / "blocks.c"
            c.write_text(src)
            part = out_dir / f".{self.so.name}.{os.getpid()}.part"
            # the rename (atomic: concurrent builders agree) is part of the job, so a process that ends
            # before the compiler does still leaves the library in the cache for the next one
            cmd = " ".join(shlex.quote(x) for x in [cc, *FLAGS, str(c), "-o", str(part)])
            # the compiler's messages go to a file: a pipe nobody reads until it ends could fill up
            self.err = out_dir / f".{self.so.name}.{os.getpid()}.err"
            with open(self.err, "w") as err:
                self.proc = subprocess.Popen(["sh", "-c", f"{cmd} && mv -f {shlex.quote(str(part))} "
                                              f"{shlex.quote(str(self.so))}; r=$?; rm -rf {shlex.quote(self.tmp)}; "
                                              f"exit $r"], stdout=subprocess.DEVNULL, stderr=err)
        except (OSError, subprocess.SubprocessError) as e:
            _why = f"building the native block code failed: {e}"
            self.so = None
            self._cleanup()

    def poll(self) -> bool:
        """Whether the compiler has finished (or never ran)."""
        return self.proc is None or self.proc.poll() is not None

    def _cleanup(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def result(self) -> ctypes.CDLL | None:
        """Wait for the compiler; the loaded library, or None (``why_not`` says why)."""
        global _why
        if self.so is None:
            return None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=600)
                if self.proc.returncode != 0 or not self.so.exists():
                    msg = self.err.read_text(errors="replace").strip()[:300] if self.err else ""
                    _why = f"{self.cc} failed on the generated block code: {msg}"
                    return None
            except (OSError, subprocess.SubprocessError) as e:
                _why = f"building the native block code failed: {e}"
                return None
            finally:
                self.proc = None
                self._cleanup()
                if self.err is not None:
                    self.err.unlink(missing_ok=True)
        try:
            return ctypes.CDLL(str(self.so))
        except OSError as e:
            _why = f"loading {self.so} failed: {e}"
            return None
