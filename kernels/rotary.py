"""Rotary position embedding (RoPE), rotate-half (GPT-NeoX) and interleaved (GPT-J) layouts.

``x [tokens, heads, head_dim]``, ``cos``/``sin [tokens, head_dim/2]`` (the token's angles, shared by its
heads) -> ``out [tokens, heads, head_dim]``.  With ``half = head_dim/2``, for i < half:

* ``neox`` (rotate-half): a = x[i], b = x[i + half]        -> out[i] = a cos_i - b sin_i,
                                                              out[i + half] = b cos_i + a sin_i
* ``interleaved``:        a = x[2i], b = x[2i + 1]         -> out[2i] = a cos_i - b sin_i,
                                                              out[2i + 1] = b cos_i + a sin_i

in fp32 (one ``v_mul_f32`` and one ``v_fma_f32`` per output), rounded to nearest even once.

**Layout.**  ``L = half / vec`` lanes cover one token's angles (``vec`` = elements per 16 bytes), so a
wave holds ``64 / L`` consecutive tokens; lane ``t`` takes token ``t / L`` and the ``vec`` angles from
``(t mod L) * vec``.  It loads its 16 bytes of cos and of sin once, then walks the token's heads:
per head two 16-byte loads (neox: the same angles' elements of both halves; interleaved: the 32 bytes
of its ``vec`` pairs), ``heads_per_step`` heads in flight at a time, a remainder loop for the rest.
So every byte of x, cos and sin is read once and every byte of out written once, 16 bytes per lane.

**Windows.**  Each wave's buffer resources start at its first token with ``num_records`` = its tokens'
bytes, so tokens past the end read zeros and store nothing (a wave wholly past the end exits), and
tensors past 4 GiB work (48-bit bases).

**Launch contract**: grid ``cdiv(tokens, waves * 64 / L)`` workgroups of ``64 * waves`` work-items;
``heads >= 1``; one wave's tokens must span less than 2 GiB.
"""

from __future__ import annotations

from isagen.builders.contract import LaunchInfo, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.isa.operands import neg
from isagen.prims.convert import ELEMENT_BYTES, Converter
from isagen.prims.occupancy import occupancy_floor
from isagen.prims.rows import LANE_ACCESS_BYTES, LANES, Pending, RowWindow, lane_and_wave, log2

STYLES = {"neox": "rotate-half: pairs (x[i], x[i + head_dim/2])",
          "interleaved": "pairs (x[2i], x[2i + 1])"}

PARAMS = {
    "style": Param("str", "neox", "; ".join(f"{k}: {v}" for k, v in STYLES.items()), choices=tuple(STYLES)),
    "dtype": Param("str", "bf16", "element type of x, cos, sin and out (math in fp32)", choices=("f32", "bf16", "f16")),
    "head_dim": Param("int", 128, "elements per head (head_dim/2 angles); head_dim/2 must be vec x a power of "
                                  "two (vec = 8 for 16-bit types, 4 for fp32), at most 64 x vec", min=8, max=1024),
    "waves": Param("int", 4, "waves per workgroup", min=1, max=16),
    "heads_per_step": Param("int", 4, "heads whose loads are in flight together", min=1, max=16),
    "min_occupancy": Param("int", 1, "reject the kernel when fewer waves than this fit on a SIMD", min=1, max=8),
}


def _vec(p) -> int:
    return LANE_ACCESS_BYTES // ELEMENT_BYTES[p.dtype]


def _lanes_per_token(p) -> int:
    return p.head_dim // 2 // _vec(p)


def validate(p, target):
    vec = _vec(p)
    half = p.head_dim // 2
    L = half // vec if half % vec == 0 else 0
    if p.head_dim % 2 or half % vec or L & (L - 1) or not 1 <= L <= LANES:
        return [("head_dim", f"head_dim={p.head_dim} with {p.dtype}: head_dim/2 = {half} must be {vec} x a "
                             f"power of two up to {vec * LANES} (16 bytes of angles per lane)")]
    return []


def check(p, target, program):
    return occupancy_floor(program, p.min_occupancy, "lower heads_per_step")


def launch(p, target) -> LaunchInfo:
    esize = ELEMENT_BYTES[p.dtype]
    tpw = LANES // _lanes_per_token(p)
    half = p.head_dim // 2
    return LaunchInfo(
        tensors=(TensorParam("x", p.dtype, ("tokens", "heads", p.head_dim), "in"),
                 TensorParam("cos", p.dtype, ("tokens", half), "in"),
                 TensorParam("sin", p.dtype, ("tokens", half), "in"),
                 TensorParam("out", p.dtype, ("tokens", "heads", p.head_dim), "out")),
        grid=(f"cdiv(tokens, {p.waves * tpw})", 1, 1),
        block=(LANES * p.waves, 1, 1),
        requires=(("heads >= 1", "heads must be at least 1"),
                  (f"heads * {p.head_dim * esize * tpw} < 2147483648",
                   f"heads is too large: one wave's {tpw} tokens must span less than 2 GiB"),
                  ("tokens < 2147483648", "tokens must be below 2^31")),
    )


@generator("rotary", params=PARAMS, shapes={"tokens": "tokens (any number)", "heads": "heads per token"},
           validate=validate, check=check, launch=launch,
           doc="rotary embedding (neox / interleaved); cos/sin read once per token, 16 bytes per lane")
def rotary(p, target) -> KernelBuilder:
    return _Rotary(p, target).build()


class _Rotary:
    def __init__(self, p, target):
        self.p = p
        self.esize = ELEMENT_BYTES[p.dtype]
        self.vec = _vec(p)
        self.L = _lanes_per_token(p)
        self.tpw = LANES // self.L
        self.half = p.head_dim // 2
        self.head_bytes = p.head_dim * self.esize
        self.k = KernelBuilder(p.name, target, workgroup_size=LANES * p.waves)

    def build(self) -> KernelBuilder:
        k, p = self.k, self.p
        k.comment(f"rotary ({p.style}) on [tokens, heads, {p.head_dim}] {p.dtype}: {self.L} lanes per token "
                  f"({self.vec} angles each), {self.tpw} tokens per wave, {p.heads_per_step} heads in flight")
        for name, role in (("x", "in"), ("cos", "in"), ("sin", "in"), ("out", "out")):
            k.args.pointer(name, p.dtype, "read_only" if role == "in" else "write_only")
        k.args.value("tokens", "u32")
        k.args.value("heads", "u32")
        self.win = {t: RowWindow(k, t, k.args[t].offset) for t in ("x", "cos", "sin", "out")}
        tokens = k.sgpr(1, "tokens", kernel=True)
        self.heads = k.sgpr(1, "heads", kernel=True)
        k.s_load_dword(tokens, k.kernarg_ptr, k.args["tokens"].offset, comment="tokens")
        k.s_load_dword(self.heads, k.kernarg_ptr, k.args["heads"].offset, comment="heads per token")

        k.comment(f"lane t: token t/{self.L} of the wave's {self.tpw}, angles (t mod {self.L})*{self.vec} ..")
        lane, wave = lane_and_wave(k)
        tsub = k.vgpr(1, "token_in_wave", kernel=True)
        k.v_lshrrev_b32(tsub, log2(self.L), lane, comment="token within the wave")
        self.col = k.vgpr(1, "angle_offset", kernel=True)
        k.v_and_b32(self.col, self.L - 1, lane, comment="16-byte slot within the token")
        k.v_lshlrev_b32(self.col, log2(LANE_ACCESS_BYTES), self.col, comment="its byte offset")
        k.free(lane)

        tok0 = k.sgpr(1, "first_token", kernel=True)
        k.s_mul_i32(tok0, k.workgroup_id["x"], p.waves, comment="workgroup x waves")
        k.s_add_u32(tok0, tok0, wave, comment="+ wave")
        k.s_mul_i32(tok0, tok0, self.tpw, comment=f"x {self.tpw}: this wave's first token")
        k.free(wave)
        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")
        left = k.sgpr(1, "wave_tokens", kernel=True)
        k.s_sub_i32(left, tokens, tok0, comment="tokens from the wave's first to the end")
        k.s_max_i32(left, left, 0)
        k.s_min_u32(left, left, self.tpw, comment="this wave's tokens")
        k.s_cmp_eq_u32(left, 0, comment="scc: the wave is past the last token")
        end = k.label("end")
        k.s_cbranch_scc1(end, comment="nothing to do")

        self.row_bytes = k.sgpr(1, "token_bytes", kernel=True)
        records = k.sgpr(1, "records", kernel=True)
        k.s_mul_i32(self.row_bytes, self.heads, self.head_bytes, comment=f"heads x {self.head_bytes}: bytes per token")
        k.s_mul_i32(records, left, self.row_bytes, comment="x/out: the wave's tokens' bytes")
        for t in ("x", "out"):
            self.win[t].start(tok0, self.row_bytes, records)
        ang_bytes = self.half * self.esize
        k.s_mul_i32(records, left, ang_bytes, comment="cos/sin: the wave's tokens' bytes")
        for t in ("cos", "sin"):
            self.win[t].start(tok0, ang_bytes, records)
        k.free(records, left, tok0, tokens)

        self.off = k.vgpr(1, "head_offset", kernel=True)
        ang_off = k.vgpr(1, "ang_offset", kernel=True)
        k.v_mul_lo_u32(self.off, self.row_bytes, tsub, comment="token within the wave x bytes per token")
        if p.style == "neox":
            k.v_add_u32(self.off, self.off, self.col, comment="+ this lane's slot: head 0, first half")
        else:
            k.v_lshl_add_u32(self.off, self.col, 1, self.off, comment="+ 2 x slot: this lane's 32 bytes of pairs")
        k.v_lshlrev_b32(ang_off, log2(ang_bytes), tsub, comment=f"token within the wave x {ang_bytes}")
        k.v_add_u32(ang_off, ang_off, self.col, comment="+ this lane's slot: its angles")
        k.free(tsub)

        self.conv = Converter(k, p.dtype)
        pending = Pending(k)
        cs = {t: k.vgpr(4, f"{t}_raw", kernel=True) for t in ("cos", "sin")}
        for t in ("cos", "sin"):
            k.buffer_load_dwordx4(cs[t], ang_off, self.win[t].regs, 0, offen=True, comment=f"{t}: {self.vec} angles")
            pending.issue(t)
        k.free(ang_off)
        pending.wait_for("sin", "cos and sin have landed")
        if self.conv.wide:
            self.cos = k.vgpr(self.vec, "cos", kernel=True)
            self.sin = k.vgpr(self.vec, "sin", kernel=True)
            for t, dst in (("cos", self.cos), ("sin", self.sin)):
                for d in range(4):
                    self.conv.unpack(dst[2 * d], dst[2 * d + 1], cs[t][d], f"{t} {2 * d}, {2 * d + 1}")
                k.free(cs[t])
        else:
            self.cos, self.sin = cs["cos"], cs["sin"]
        self.heads_loop()
        self.conv.release()
        k.place(end)
        return k

    # ------------------------------------------------------------------ the heads
    def heads_loop(self):
        k, p = self.k, self.p
        hps = p.heads_per_step
        self.data = k.vgpr(8 * hps, "x", kernel=True)
        self.addr = k.vgpr(2 * hps, "addr", kernel=True)
        self.tmp = [k.vgpr(2, f"t{i}", kernel=True) for i in range(4)]
        left = k.sgpr(1, "heads_left", kernel=True)
        k.s_mov_b32(left, self.heads, comment="heads to do")
        if hps > 1:
            top, rest = k.label("heads"), k.label("heads_rest")
            k.place(top)
            k.s_cmp_lt_u32(left, hps, comment=f"scc: fewer than {hps} heads left")
            k.s_cbranch_scc1(rest)
            self.step(hps)
            k.s_sub_u32(left, left, hps)
            k.s_branch(top)
            k.place(rest)
        top, done = k.label("head"), k.label("heads_done")
        k.place(top)
        k.s_cmp_eq_u32(left, 0, comment="scc: no heads left")
        k.s_cbranch_scc1(done)
        self.step(1)
        k.s_sub_u32(left, left, 1)
        k.s_branch(top)
        k.place(done)

    def step(self, n: int):
        """Rotate ``n`` heads: 2n loads in flight, then compute and store head by head."""
        k, p = self.k, self.p
        second = self.half * self.esize if p.style == "neox" else LANE_ACCESS_BYTES
        k.comment(f"---- {n} head(s): load, rotate, store")
        pending = Pending(k)
        for h in range(n):
            a0, a1 = self.addr[2 * h], self.addr[2 * h + 1]
            if h:
                k.v_add_u32(a0, h * self.head_bytes, self.off, comment=f"head +{h}")
            else:
                k.v_mov_b32(a0, self.off, comment="this step's first head")
            k.v_add_u32(a1, second, a0, comment="second half" if p.style == "neox" else "next 16 bytes")
            for part, a in ((0, a0), (1, a1)):
                k.buffer_load_dwordx4(self.data[8 * h + 4 * part:8 * h + 4 * part + 4], a, self.win["x"].regs, 0,
                                      offen=True, comment=f"x, head +{h}, " + ("a" if part == 0 else "b") + " part")
                pending.issue(f"{h}.{part}")
        k.v_add_u32(self.off, n * self.head_bytes, self.off, comment=f"{n} head(s) further for the next step")
        for h in range(n):
            pending.wait_for(f"{h}.1", f"head +{h} has landed")
            A = self.data[8 * h:8 * h + 4]
            B = self.data[8 * h + 4:8 * h + 8]
            if p.style == "neox":
                self.rotate_neox(A, B)
            else:
                self.rotate_interleaved(A, B)
            for part, regs in ((0, A), (1, B)):
                k.buffer_store_dwordx4(regs, self.addr[2 * h + part], self.win["out"].regs, 0, offen=True,
                                       comment=f"out, head +{h}")

    def _rot(self, a, b, c, s, t):
        """(a, b) <- (a c - b s, b c + a s) in fp32; t: 2 temporaries."""
        k = self.k
        k.v_mul_f32(t[0], b, s, comment="b sin")
        k.v_mul_f32(t[1], a, s, comment="a sin")
        k.v_fma_f32(a, a, c, neg(t[0]), comment="a cos - b sin")
        k.v_fma_f32(b, b, c, t[1], comment="b cos + a sin")

    def rotate_neox(self, A, B):
        """A: x[i..i+vec), B: x[half+i..): element e of A pairs with element e of B, angle e."""
        conv, t = self.conv, self.tmp
        for d in range(4):
            if conv.wide:
                a, b = t[0], t[1]
                conv.unpack(a[0], a[1], A[d], "a")
                conv.unpack(b[0], b[1], B[d], "b")
                for e in range(2):
                    self._rot(a[e], b[e], self.cos[2 * d + e], self.sin[2 * d + e], t[2])
                conv.pack(A[d], a[0], a[1])
                conv.pack(B[d], b[0], b[1])
            else:
                self._rot(A[d], B[d], self.cos[d], self.sin[d], t[2])

    def rotate_interleaved(self, A, B):
        """A then B: 2*vec consecutive elements = vec pairs (even, odd), angles 0..vec-1."""
        conv, t = self.conv, self.tmp
        if conv.wide:
            for part, regs in ((0, A), (1, B)):
                for d in range(4):
                    ab = t[0]
                    conv.unpack(ab[0], ab[1], regs[d], "pair")
                    angle = 4 * part + d
                    self._rot(ab[0], ab[1], self.cos[angle], self.sin[angle], t[2])
                    conv.pack(regs[d], ab[0], ab[1])
        else:
            for part, regs in ((0, A), (1, B)):
                for d in range(2):
                    angle = 2 * part + d
                    self._rot(regs[2 * d], regs[2 * d + 1], self.cos[angle], self.sin[angle], t[2])
