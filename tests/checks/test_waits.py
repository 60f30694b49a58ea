"""The wait checker (isagen.checks.waits): planted missing waits are found, correct programs report nothing.

The counter rules are the gfx9 ones of AMD's CDNA3 ISA guide ("Data dependency resolution",
s_waitcnt) and LLVM's SIInsertWaitcnts: VMEM (loads, stores, LDS DMA) finish in issue order on
vmcnt; DS in order on lgkmcnt; SMEM in any order (only lgkmcnt(0) proves a scalar load done).
"""

import random
import shutil
import subprocess

import pytest

from isagen.builders.program import KernelBuilder
from isagen.checks.waits import check_waits
from isagen.errors import CheckError
from isagen.isa.instruction import Instruction
from isagen.isa.operands import Label, S, V
from isagen.isa.table import isa_table

TARGET = "gfx942"
I = isa_table(TARGET)
RSRC = S[8:12]


def load(dst, addr=1):
    return I["buffer_load_dword"](V[dst], V[addr], RSRC, 0, offen=True)


def store(data, addr=1):
    return I["buffer_store_dword"](V[data], V[addr], RSRC, 0, offen=True)


def use(dst, *srcs):
    srcs = list(srcs) + [srcs[-1]] * (2 - len(srcs))
    return I["v_add_f32"](V[dst], V[srcs[0]], V[srcs[1]])


def wait(**counts):
    return I["s_waitcnt"](**counts)


END = I["s_endpgm"]()


def found(items, target=TARGET):
    return [(v.pos, v.source, v.reg) for v in check_waits(items, target)]


def test_straight_line_load_then_use():
    items = [load(2), use(4, 2, 3), END]
    assert found(items) == [(1, 0, "v2")]
    msg = str(check_waits(items, TARGET)[0])
    assert msg == ("#1 v_add_f32 v4, v2, v3: reads v2 loaded by #0 buffer_load_dword v2, v1, s[8:11], 0 offen "
                   "(vmcnt) with no s_waitcnt vmcnt(0) between")
    assert found([load(2), wait(vmcnt=0), use(4, 2, 3), END]) == []
    # a wait that names only the other counter leaves vmcnt unconstrained
    assert found([load(2), wait(lgkmcnt=0), use(4, 2, 3), END]) == [(2, 0, "v2")]


def test_vmcnt_is_in_order():
    # vmcnt(1) after two loads: all but the newest are done -> covers the first, not the second
    items = [load(2), load(3), wait(vmcnt=1), use(4, 2), use(5, 3), END]
    assert found(items) == [(4, 1, "v3")]
    assert "with no s_waitcnt vmcnt(0) between" in str(check_waits(items, TARGET)[0])
    # a store counts on vmcnt too (gfx9 has no separate store counter)
    items = [load(2), store(6), wait(vmcnt=1), use(4, 2), END]
    assert found(items) == []
    items = [store(6), load(2), wait(vmcnt=1), use(4, 2), END]
    assert found(items) == [(3, 1, "v2")]
    # the message says how far the wait may go
    items = [load(2), load(3), load(7), use(4, 2), END]
    assert "no s_waitcnt vmcnt(2) or lower between" in str(check_waits(items, TARGET)[0])


def test_smem_finishes_out_of_order():
    loads = [I["s_load_dwordx2"](S[10:12], S[0:2], 0), I["s_load_dwordx2"](S[12:14], S[0:2], 8)]
    add = I["s_add_u32"](S[20], S[10], S[12])
    items = loads + [wait(lgkmcnt=1), add, END]
    assert found(items) == [(3, 0, "s10"), (3, 1, "s12")]             # lgkmcnt(1) covers neither
    assert "s_waitcnt lgkmcnt(0) between (scalar loads finish out of order)" in str(check_waits(items, TARGET)[0])
    assert found(loads + [wait(lgkmcnt=0), add, END]) == []


def test_lds_is_in_order_even_with_smem_outstanding():
    ds = [I["ds_read_b32"](V[2], V[1]), I["ds_read_b32"](V[3], V[1])]
    assert found(ds + [wait(lgkmcnt=1), use(4, 2), use(5, 3), END]) == [(4, 1, "v3")]
    # an SMEM issued after the first ds_read may already be back: it does not prove anything
    items = [ds[0], I["s_load_dword"](S[10], S[0:2], 0), wait(lgkmcnt=1), use(4, 2), END]
    assert found(items) == [(3, 0, "v2")]
    # a DS issued after it does (DS return in order)
    items = [ds[0], I["s_load_dword"](S[10], S[0:2], 0), ds[1], wait(lgkmcnt=1), use(4, 2), END]
    assert found(items) == []


def test_loop_carried_load():
    top = Label(".Lw_loop")
    body = [I["s_mov_b32"](S[20], 8), load(7), top,
            use(5, 7),                               # uses the load of the previous iteration (or the prologue)
            load(7),                                 # next iteration's operand, issued at the bottom
            I["s_sub_u32"](S[20], S[20], 1), I["s_cmp_lg_u32"](S[20], 0), I["s_cbranch_scc1"](top), END]
    got = check_waits(body, TARGET)
    assert [(v.pos, v.source) for v in got] == [(3, 1), (3, 4)]       # the prologue's load and the loop's own
    assert "reached through a loop back edge" in str(got[1])
    fixed = body[:3] + [wait(vmcnt=0)] + body[3:]
    assert found(fixed) == []
    # waiting only at the loop bottom covers the back edge but not the way in from the prologue
    late = body[:5] + [wait(vmcnt=0)] + body[5:]
    assert [(p, s) for p, s, _ in found(late)] == [(3, 1)]


def test_branch_where_only_one_path_waits():
    skip, join = Label(".Lb_skip"), Label(".Lb_join")
    items = [load(2),
             I["s_cmp_eq_u32"](S[2], 0), I["s_cbranch_scc1"](skip),
             wait(vmcnt=0), I["s_branch"](join),
             skip, I["v_mov_b32"](V[9], 0),
             join, use(4, 2), END]
    assert found(items) == [(8, 0, "v2")]
    both = items[:6] + [wait(vmcnt=0)] + items[6:]
    assert found(both) == []


def test_overwriting_a_pending_destination():
    # WAW: a VALU writes the load's destination before the load has landed
    assert found([load(2), I["v_mov_b32"](V[2], 0), END]) == [(1, 0, "v2")]
    assert "overwrites v2 that #0 buffer_load_dword" in str(
        check_waits([load(2), I["v_mov_b32"](V[2], 0), END], TARGET)[0])
    assert found([I["ds_read_b32"](V[2], V[1]), I["v_mov_b32"](V[2], 0), END]) == [(1, 0, "v2")]
    assert found([I["s_load_dword"](S[10], S[0:2], 0), I["s_mov_b32"](S[10], 0), END]) == [(1, 0, "s10")]
    # a VMEM load after a VMEM load to the same register: they write back in order (no wait needed)
    assert found([load(2), load(2), wait(vmcnt=0), use(4, 2), END]) == []
    # ... but not a DS load after a VMEM load
    assert found([load(2), I["ds_read_b32"](V[2], V[1]), END]) == [(1, 0, "v2")]


def test_store_data_needs_no_wait():
    # gfx9 stores read their data VGPRs when they issue (the 1-2 wait-state wide-store hazard is
    # isagen.checks.hazards' job); the address register of a load is read at issue too
    assert found([store(4), I["v_mov_b32"](V[4], 0), END]) == []
    assert found([I["ds_write_b32"](V[1], V[4]), I["v_mov_b32"](V[4], 0), END]) == []
    assert found([load(1, addr=1), END]) == []


def test_lds_dma_is_waited_with_vmcnt():
    dma = I["buffer_load_dword_lds"](V[1], RSRC, 0, offen=True)
    read = I["ds_read_b32"](V[2], V[3])
    items = [dma, read, END]
    got = check_waits(items, TARGET)
    assert [(v.pos, v.source, v.reg) for v in got] == [(1, 0, "LDS")]
    assert "reads LDS that the LDS DMA #0 buffer_load_dword v1, s[8:11], 0 offen lds (vmcnt) may still be writing: " \
           "needs s_waitcnt vmcnt(0) before it" in str(got[0])
    assert found([dma, wait(lgkmcnt=0), read, END]) == [(2, 0, "LDS")]       # lgkmcnt does not cover DMA
    assert found([dma, wait(vmcnt=0), read, END]) == []
    # the older of two DMAs is covered by vmcnt(1)
    assert found([dma, load(9), wait(vmcnt=1), read, END]) == []
    assert found([I["ds_write_b32"](V[3], V[4])] + [dma, I["ds_write_b32"](V[3], V[4]), END]) == [(2, 1, "LDS")]


class Tagged(Instruction):
    """An instruction that names the LDS bytes it touches (the ``lds`` protocol of isagen.checks.waits)."""

    __slots__ = ("lds",)

    @classmethod
    def of(cls, inst, lds):
        t = cls(inst.desc, inst.ops, inst.mods, inst.comment)
        t.lds = lds
        return t


def test_lds_dma_into_one_buffer_and_reads_of_the_other():
    # double buffering: DMA fills buffer 1 while the wave reads buffer 0 -> no conflict
    dma1 = Tagged.of(I["buffer_load_dword_lds"](V[1], RSRC, 0, offen=True), (4096, 8192))
    read0 = Tagged.of(I["ds_read_b32"](V[2], V[3]), (0, 4096))
    read1 = Tagged.of(I["ds_read_b32"](V[2], V[3]), (4096, 4100))
    assert found([dma1, read0, END]) == []
    assert found([dma1, read1, END]) == [(1, 0, "LDS[4096:8192]")]
    # without a range the read may touch any LDS
    assert found([dma1, I["ds_read_b32"](V[2], V[3]), END]) == [(1, 0, "LDS[4096:8192]")]


def test_counter_maximum_bounds_outstanding_work():
    # more younger VMEM instructions than vmcnt can count: the oldest must be done
    items = [load(2)] + [store(6) for _ in range(I.target.max_vmcnt + 1)] + [use(4, 2), END]
    assert found(items) == []
    items = [load(2)] + [store(6) for _ in range(I.target.max_vmcnt - 1)] + [use(4, 2), END]
    assert found(items) == [(len(items) - 2, 0, "v2")]


def test_counter_maximum_across_blocks():
    # the younger instructions spread over several blocks (labels and a branch between them): the
    # count carries across, and a wait in between counts what is still outstanding
    cap = I.target.max_vmcnt
    a, b = Label(".Lc_a"), Label(".Lc_b")
    half = cap // 2
    items = ([load(2)] + [store(6) for _ in range(half)] + [a] + [store(6) for _ in range(cap + 1 - half)]
             + [I["s_cmp_eq_u32"](S[2], 0), I["s_cbranch_scc1"](b), b, use(4, 2), END])
    assert found(items) == []
    short = ([load(2)] + [store(6) for _ in range(half)] + [a] + [store(6) for _ in range(cap - 1 - half)]
             + [I["s_cmp_eq_u32"](S[2], 0), I["s_cbranch_scc1"](b), b, use(4, 2), END])
    assert found(short) == [(len(short) - 2, 0, "v2")]
    # a vmcnt(N) after the loads: the load is done once N or fewer younger ones remain
    waited = [load(2)] + [store(6) for _ in range(3)] + [a, wait(vmcnt=3), use(4, 2), END]
    assert found(waited) == []
    waited = [load(2)] + [store(6) for _ in range(3)] + [a, wait(vmcnt=4), use(4, 2), END]
    assert found(waited) == [(6, 0, "v2")]


def test_clean_pipelined_loop_reports_nothing():
    """A double-buffered global->register pipeline: prefetch, then wait for the older load only."""
    top = Label(".Lp_loop")
    items = [I["s_load_dwordx4"](RSRC, S[0:2], 0), wait(lgkmcnt=0),
             load(10), I["s_mov_b32"](S[20], 16),
             top,
             load(11),                             # prefetch the next operand
             wait(vmcnt=1),                        # the previous one (v10) has landed
             I["v_add_f32"](V[12], V[10], V[12]),
             I["v_mov_b32"](V[10], V[11]) ,        # would be a WAW on v11 without the wait below
             I["s_sub_u32"](S[20], S[20], 1), I["s_cmp_lg_u32"](S[20], 0),
             I["s_cbranch_scc1"](top),
             store(12), END]
    got = check_waits(items, TARGET)
    assert [(v.pos, v.reg) for v in got] == [(8, "v11")]      # v_mov reads v11 while it may be in flight
    items.insert(8, wait(vmcnt=0))
    assert check_waits(items, TARGET) == []


def test_kernel_builder_runs_the_check_at_finish():
    k = KernelBuilder("w_check", TARGET, workgroup_size=64)
    rsrc = k.sgpr(4, "rsrc", align=4)
    k.s_load_dwordx4(rsrc, k.kernarg_ptr, 0)
    k.wait(lgkmcnt=0, why="resource descriptor")
    val = k.vgpr(1, "val")
    k.buffer_load_dword(val, k.tid, rsrc, 0, offen=True)
    k.v_add_f32(val, val, val)
    k.free(val, rsrc, k.tid)
    with pytest.raises(CheckError, match=r"#\d+ v_add_f32 .*: reads v\d+ loaded by #\d+ buffer_load_dword"):
        k.finish()
    program = k.finish(force=True)
    assert "reads" in program.rejected


# --------------------------------------------------------------------------- LLVM 19 as a live oracle
# llc-19 -run-pass si-insert-waitcnts puts LLVM's own s_waitcnts into MIR.  On random gfx942 programs
# of loads (VMEM, DS, SMEM), stores and uses: the checker accepts every program LLVM has waited
# (no false reports), and removing any one of LLVM's waits makes it report (each was needed).

LLC = shutil.which("llc-19")
RSRC_MIR = "$sgpr8_sgpr9_sgpr10_sgpr11"


def _mir_line(inst):
    n, o = inst.name, inst.ops

    def r(x):
        if isinstance(x, int):
            return str(x)
        file = {"v": "vgpr", "s": "sgpr"}[x.cls]
        return "$" + "_".join(f"{file}{i}" for i in range(x.index, x.index + x.count))
    return {
        "buffer_load_dword": lambda: f"{r(o[0])} = BUFFER_LOAD_DWORD_OFFEN {r(o[1])}, {RSRC_MIR}, 0, 0, 0, 0, "
                                     "implicit $exec",
        "buffer_store_dword": lambda: f"BUFFER_STORE_DWORD_OFFEN {r(o[0])}, {r(o[1])}, {RSRC_MIR}, 0, 0, 0, 0, "
                                      "implicit $exec",
        "ds_read_b32": lambda: f"{r(o[0])} = DS_READ_B32_gfx9 {r(o[1])}, 0, 0, implicit $exec",
        "ds_write_b32": lambda: f"DS_WRITE_B32_gfx9 {r(o[0])}, {r(o[1])}, 0, 0, implicit $exec",
        "s_load_dword": lambda: f"{r(o[0])} = S_LOAD_DWORD_IMM $sgpr0_sgpr1, {o[2]}, 0",
        "v_add_f32": lambda: f"{r(o[0])} = V_ADD_F32_e32 {r(o[1])}, {r(o[2])}, implicit $mode, implicit $exec",
        "v_mov_b32": lambda: f"{r(o[0])} = V_MOV_B32_e32 {r(o[1])}, implicit $exec",
        "s_add_u32": lambda: f"{r(o[0])} = S_ADD_U32 {r(o[1])}, {r(o[2])}, implicit-def $scc",
        "s_endpgm": lambda: "S_ENDPGM 0",
    }[n]()


def _random_memory_program(rng, n):
    out = []
    for _ in range(n):
        k = rng.randrange(9)
        v = lambda: V[rng.randrange(2, 10)]         # noqa: E731 - a small pool so registers collide
        if k == 0:
            out.append(I["buffer_load_dword"](v(), V[1], RSRC, 0, offen=True))
        elif k == 1:
            out.append(I["ds_read_b32"](v(), V[1]))
        elif k == 2:
            out.append(I["s_load_dword"](S[rng.randrange(12, 16)], S[0:2], 4 * rng.randrange(4)))
        elif k == 3:
            out.append(I["buffer_store_dword"](v(), V[1], RSRC, 0, offen=True))
        elif k == 4:
            out.append(I["ds_write_b32"](V[1], v()))
        elif k in (5, 6):
            out.append(I["v_add_f32"](v(), rng.choice([v(), S[rng.randrange(12, 16)]]), v()))
        elif k == 7:
            out.append(I["s_add_u32"](S[rng.randrange(16, 18)], S[rng.randrange(12, 16)], S[rng.randrange(12, 16)]))
        else:
            out.append(I["v_mov_b32"](v(), 0))
    return out + [END]


def _decode_waitcnt(imm):
    """gfx9 s_waitcnt simm16: vmcnt = [3:0] | [15:14] << 4, lgkmcnt = [11:8]."""
    vm = (imm & 0xF) | ((imm >> 14) & 3) << 4
    lgkm = (imm >> 8) & 0xF
    counts = {}
    if vm != 63:
        counts["vmcnt"] = vm
    if lgkm != 15:
        counts["lgkmcnt"] = lgkm
    return counts


@pytest.mark.skipif(LLC is None, reason="llc-19 (Debian llvm-19) is not installed")
def test_random_programs_against_llvm19_waitcnt_insertion():
    rng = random.Random(1123)
    programs = [_random_memory_program(rng, rng.randrange(4, 20)) for _ in range(120)]
    mir = "".join(f"---\nname: f{k}\nmachineFunctionInfo:\n  isEntryFunction: true\nbody: |\n  bb.0:\n"
                  + "".join(f"    {_mir_line(i)}\n" for i in p) + "...\n" for k, p in enumerate(programs))
    out = subprocess.run([LLC, "-mtriple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-run-pass", "si-insert-waitcnts",
                          "-x", "mir", "-", "-o", "-"], input=mir, capture_output=True, text=True, check=True).stdout
    bodies = [b.split("bb.0:")[1].split("\n...")[0] for b in out.split("\nbody:")[1:]]
    assert len(bodies) == len(programs)
    waits_seen = 0
    for prog, body in zip(programs, bodies):
        lines = [l.strip() for l in body.splitlines() if l.strip()]
        waited, k = [], 0
        for line in lines:
            if line.startswith("S_WAITCNT"):
                counts = _decode_waitcnt(int(line.split()[1]))
                if counts:
                    waited.append(wait(**counts))
                continue
            waited.append(prog[k])
            k += 1
        assert k == len(prog)
        text = "\n".join(map(str, waited))
        assert check_waits(waited, TARGET) == [], "LLVM's waits are enough, but isagen reports:\n" + text
        for i, item in enumerate(waited):
            if item.name == "s_waitcnt":
                waits_seen += 1
                assert check_waits(waited[:i] + waited[i + 1:], TARGET), f"LLVM's wait #{i} was not needed?\n" + text
                if "vmcnt" in item.mods and "lgkmcnt" not in item.mods:
                    # LLVM's vmcnt is exact (VMEM is in order): one more in flight is one too many
                    looser = wait(vmcnt=item.mods["vmcnt"] + 1)
                    assert check_waits(waited[:i] + [looser] + waited[i + 1:], TARGET), text
    assert waits_seen > 100
