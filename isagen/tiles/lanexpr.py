"""Lane expressions: one formula, two meanings — a numpy value per lane, and the VALU code computing it.

Every per-lane quantity a tile primitive needs (an LDS-DMA global offset, a ``ds_read`` address, a
store offset, a mask) is written once as an expression over the lane id and wave-uniform values::

    L = lane()                                   # 0..63
    row = (L >> 3) + uniform("row0", 0, 255)     # a wave-uniform value held in an SGPR
    addr = row * 128 + (((L & 7) ^ (row & 7)) << 4)

``evaluate(expr, env)`` gives the 64 lane values with numpy (the layout model the tests and the bank
analysis use); ``Emitter(k).emit(expr)`` writes the VALU/SALU instructions that compute the same value
into a VGPR (wave-uniform sub-expressions go to SALU).  Because both come from the same object, the
numpy model *is* the emitted arithmetic; tests/tiles/test_tiles_primitives.py runs the emitted code in the
emulator (an independent implementation of the instructions) on random expressions and compares.

Values are unsigned 32-bit.  Every node carries an upper bound (``hi``) so that the emitter can use
the 24-bit multiply and the tests can assert nothing wraps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from isagen.isa.operands import VCC, Reg

MASK32 = 0xFFFFFFFF

_LANE_IDS = np.arange(64, dtype=np.int64)
_LANE_IDS.flags.writeable = False


class Expr:
    """A per-lane unsigned 32-bit value.

    Nodes are immutable and compare structurally.  Each works out, once when it is made, what the
    emitter and the simplifier ask at every level of deep, shared trees: its structural hash, its
    upper bound ``hi`` (the value in every lane is at most this) and ``uniform`` (the same value in
    every lane: computed in SGPRs)."""

    __slots__ = ("_hash", "hi", "uniform", "closed", "_lanes")
    _hash: int
    hi: int
    uniform: bool
    closed: bool          # no Uniform or VReg inside: the lane values need no env
    _lanes: Any           # evaluate's value of a closed node, once asked (never modified)

    def _key(self) -> tuple:
        raise NotImplementedError

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, o) -> bool:
        if self is o:
            return True
        if type(o) is not type(self):
            return NotImplemented
        return self._hash == o._hash and self._key() == o._key()

    def __ne__(self, o) -> bool:
        eq = self.__eq__(o)
        return eq if eq is NotImplemented else not eq

    # --------------------------------------------------------------- building
    def __add__(self, o):
        return _bin("add", self, o)

    __radd__ = __add__

    def __mul__(self, o):
        return _bin("mul", self, o)

    __rmul__ = __mul__

    def __and__(self, o):
        return _bin("and", self, o)

    __rand__ = __and__

    def __or__(self, o):
        return _bin("or", self, o)

    __ror__ = __or__

    def __xor__(self, o):
        return _bin("xor", self, o)

    __rxor__ = __xor__

    def __lshift__(self, n):
        return _bin("shl", self, n)

    def __rshift__(self, n):
        return _bin("shr", self, n)

    def __floordiv__(self, n):
        n = int(n)
        if n <= 0 or n & (n - 1):
            raise ValueError(f"lane expressions divide by powers of two only, not {n}")
        return self >> (n.bit_length() - 1)

    def __mod__(self, n):
        n = int(n)
        if n <= 0 or n & (n - 1):
            raise ValueError(f"lane expressions take remainders by powers of two only, not {n}")
        return self & (n - 1)

    def walk(self):
        yield self


class Const(Expr):
    __slots__ = ("value",)
    value: int

    def __init__(self, value: int):
        self.value = value
        self.hi = value
        self.uniform = True
        self.closed = True
        self._hash = hash(("Const", value))

    def _key(self) -> tuple:
        return (self.value,)

    def __repr__(self):
        return str(self.value)


class Lane(Expr):
    """The lane id within the wave (0..63)."""

    __slots__ = ()

    def __init__(self):
        self.hi = 63
        self.uniform = False
        self.closed = True
        self._lanes = _LANE_IDS
        self._hash = hash(("Lane",))

    def _key(self) -> tuple:
        return ()

    def __repr__(self):
        return "lane"


class Uniform(Expr):
    """A wave-uniform value held in an SGPR at run time (``reg``), or named only (numpy model);
    ``bound`` is an upper bound of the value (for the 24-bit multiply choice)."""

    __slots__ = ("name", "bound", "reg")
    name: str
    bound: int
    reg: Reg | None

    def __init__(self, name: str, bound: int, reg: Reg | None = None):
        self.name, self.bound, self.reg = name, bound, reg
        self.hi = bound
        self.uniform = True
        self.closed = False
        self._hash = hash(("Uniform", name, bound, reg))

    def _key(self) -> tuple:
        return (self.name, self.bound, self.reg)

    def __repr__(self):
        return self.name


class VReg(Expr):
    """A per-lane value already in a VGPR (``reg``); the numpy model looks ``name`` up in the env."""

    __slots__ = ("name", "reg", "bound")
    name: str
    reg: Reg
    bound: int

    def __init__(self, name: str, reg: Reg, bound: int = MASK32):
        self.name, self.reg, self.bound = name, reg, bound
        self.hi = bound
        self.uniform = False
        self.closed = False
        self._hash = hash(("VReg", name, reg, bound))

    def _key(self) -> tuple:
        return (self.name, self.reg, self.bound)

    def __repr__(self):
        return self.name


def _bin_hi(op: str, a: Expr, b: Expr) -> int:
    x, y = a.hi, b.hi
    if op == "add":
        return x + y
    if op == "mul":
        return x * y
    if op == "and":
        return min(x, y)
    if op in ("or", "xor"):
        return (1 << max(x, y).bit_length()) - 1
    if op == "shl":
        return x << y
    if op == "shr":
        return x >> _const(b)
    raise AssertionError(op)


class Bin(Expr):
    """``a op b``; op is one of add mul and or xor shl shr."""

    __slots__ = ("op", "a", "b")
    op: str
    a: Expr
    b: Expr

    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b
        self.hi = a.hi + b.hi if op == "add" else _bin_hi(op, a, b)
        self.uniform = a.uniform and b.uniform
        self.closed = a.closed and b.closed
        self._lanes = None
        self._hash = hash(("Bin", op, a._hash, b._hash))    # the children's hashes, without a call each

    def _key(self) -> tuple:
        return (self.op, self.a, self.b)

    def walk(self):
        yield self
        yield from self.a.walk()
        yield from self.b.walk()

    def __repr__(self):
        sym = {"add": "+", "mul": "*", "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}[self.op]
        return f"({self.a!r} {sym} {self.b!r})"


class Select(Expr):
    """``a`` where ``x < y`` (unsigned), else ``b``."""

    __slots__ = ("x", "y", "a", "b")
    x: Expr
    y: Expr
    a: Expr
    b: Expr

    def __init__(self, x: Expr, y: Expr, a: Expr, b: Expr):
        self.x, self.y, self.a, self.b = x, y, a, b
        self.hi = max(a.hi, b.hi)
        self.uniform = x.uniform and y.uniform and a.uniform and b.uniform
        self.closed = x.closed and y.closed and a.closed and b.closed
        self._lanes = None
        self._hash = hash(("Select", x._hash, y._hash, a._hash, b._hash))

    def _key(self) -> tuple:
        return (self.x, self.y, self.a, self.b)

    def walk(self):
        yield self
        for e in (self.x, self.y, self.a, self.b):
            yield from e.walk()

    def __repr__(self):
        return f"({self.x!r} < {self.y!r} ? {self.a!r} : {self.b!r})"


def lane() -> Lane:
    return Lane()


def uniform(name: str, bound: int, reg: Reg | None = None) -> Uniform:
    return Uniform(name, int(bound), reg)


def const(v) -> Expr:
    return v if isinstance(v, Expr) else Const(int(v))


def where_lt(x, y, a, b) -> Expr:
    """``a`` in lanes where ``x < y`` (unsigned compare), ``b`` elsewhere."""
    x, y, a, b = const(x), const(y), const(a), const(b)
    if isinstance(x, Const) and isinstance(y, Const):
        return a if x.value < y.value else b
    if a == b:
        return a
    return Select(x, y, a, b)


def _const(e) -> int:
    if not isinstance(e, Const):
        raise ValueError(f"shift amounts must be constants, got {e!r}")
    return e.value


_CONSTS: dict[int, Const] = {}


def _int_const(v) -> Const:
    """``Const(int(v))``, shared: nodes are immutable, and expressions use few distinct constants."""
    v = int(v)
    c = _CONSTS.get(v)
    if c is None:
        c = Const(v)
        if len(_CONSTS) < 4096:
            _CONSTS[v] = c
    return c


def _bin(op: str, a, b) -> Expr:
    if not isinstance(a, Expr):
        a = _int_const(a)
    if not isinstance(b, Expr):
        b = _int_const(b)
    ac, bc = type(a) is Const, type(b) is Const
    if op == "shl" or op == "shr":
        if not bc:
            _const(b)                      # raises
        if ac:
            return Const(_apply(op, a.value, b.value) & MASK32)
        n = b.value
        if n == 0:
            return a
        if op == "shr" and a.hi >> n == 0:
            return Const(0)
        return Bin(op, a, b)
    if ac and bc:
        return Const(_apply(op, a.value, b.value) & MASK32)
    # identities keep the emitted code short
    if op == "add" or op == "or" or op == "xor":
        if bc and b.value == 0:
            return a
        if ac and a.value == 0:
            return b
    elif op == "mul":
        for x, y, yc in ((a, b, bc), (b, a, ac)):
            if yc:
                if y.value == 0:
                    return Const(0)
                if y.value == 1:
                    return x
                if y.value & (y.value - 1) == 0:
                    return _bin("shl", x, y.value.bit_length() - 1)
    elif op == "and":
        for x, y, yc in ((a, b, bc), (b, a, ac)):
            if yc and y.value == 0:
                return Const(0)
            if yc and x.hi <= y.value and y.value & (y.value + 1) == 0:
                return x                   # masking with all-ones above the value's bound
    # canonical order for commutative ops: constants right (VOP2 wants the VGPR in src1)
    if ac:
        a, b = b, a
    return Bin(op, a, b)


def _apply(op, x, y):
    if op == "add":
        return x + y
    if op == "mul":
        return x * y
    if op == "and":
        return x & y
    if op == "or":
        return x | y
    if op == "xor":
        return x ^ y
    if op == "shl":
        return x << y
    if op == "shr":
        return x >> y
    raise AssertionError(op)


def bind(expr, regs: dict):
    """``expr`` with the named uniforms given their registers (``{name: Reg}``)."""
    if isinstance(expr, Uniform) and regs.get(expr.name) is not None:
        return Uniform(expr.name, expr.bound, regs[expr.name])
    if isinstance(expr, Bin):
        return Bin(expr.op, bind(expr.a, regs), bind(expr.b, regs))
    if isinstance(expr, Select):
        return Select(bind(expr.x, regs), bind(expr.y, regs), bind(expr.a, regs), bind(expr.b, regs))
    return expr


# ------------------------------------------------------------------------------ numpy evaluation
def evaluate(expr, env: dict | None = None) -> np.ndarray:
    """The 64 lane values (int64 array) of ``expr``; ``env`` maps uniform names to ints."""
    v = _ev(const(expr), env or {}, {})
    if isinstance(v, int):
        return np.full(64, v, np.int64)
    return v.copy()


def _ev(e, env: dict, memo: dict):
    """evaluate's recursion (a module function: a recursive closure would be a cycle, left with its
    memo for the cyclic collector after every call).  A value the same in every lane stays a Python
    int (numpy broadcasts it where it meets a lane array): the arithmetic, then the 32-bit mask, gives
    the same low 32 bits either way.  A node with no env inputs keeps its value (read-only), for the
    next expression that shares it."""
    t = type(e)
    if t is Const:
        return e.value
    if e.closed:
        v = e._lanes
        if v is not None:
            return v
    else:
        key = id(e)
        v = memo.get(key)
        if v is not None:
            return v
    if t is Bin:
        v = _apply(e.op, _ev(e.a, env, memo), _ev(e.b, env, memo)) & MASK32
    elif t is Uniform or t is VReg:
        if e.name not in env:
            raise KeyError(f"lane expression needs a value for '{e.name}'")
        v = env[e.name]
        if type(v) is not int or not -(1 << 63) <= v < (1 << 63):     # an int: kept as one (see above)
            v = np.broadcast_to(np.asarray(v, dtype=np.int64), (64,)).copy()
    elif t is Select:
        x, y, a, b = (_ev(e.x, env, memo), _ev(e.y, env, memo), _ev(e.a, env, memo), _ev(e.b, env, memo))
        if isinstance(x, int) and isinstance(y, int):
            v = a if x < y else b
        else:
            v = np.where(x < y, a, b)
    else:
        raise TypeError(e)
    if e.closed:
        if not isinstance(v, int):
            v.flags.writeable = False
        e._lanes = v
    else:
        memo[key] = v
    return v


# ------------------------------------------------------------------------------ emission
class Emitter:
    """Writes VALU/SALU code for lane expressions into a ``KernelBuilder``.

    ``lane`` is the VGPR holding the lane id (0..63).  Sub-expressions are computed once per emitter
    (common sub-expression cache); wave-uniform ones go to SGPRs with SALU.  ``emit(expr, dst)`` puts
    the value in ``dst`` (or a new VGPR); ``free()`` releases every temporary the emitter holds.
    """

    def __init__(self, k, lane_reg: Reg, *, comment: str = "", max_temps: int = 12):
        self.k = k
        self.max_temps = max_temps     # past this many, temporaries are dropped after an emit into a given dst
        self.lane_reg = lane_reg
        self.comment = comment
        self.cache: dict = {}          # Expr -> Reg (temporaries this emitter owns)
        self.owned: list[Reg] = []

    # --------------------------------------------------------------- public
    def emit(self, expr, dst: Reg | None = None, comment: str | None = None) -> Reg:
        expr = const(expr)
        why = comment or self.comment
        given = dst is not None
        if dst is None:
            dst = self.k.vgpr(1, "lane_expr", scratch=True)
            self.owned.append(dst)
        src = self._value(expr, why, top=dst)
        if src is not dst and src != dst:
            self._mov(dst, src, why)
        if given and len(self.owned) > self.max_temps:
            self.free()
        return dst

    def emit_uniform(self, expr, comment: str | None = None):
        """A wave-uniform expression in an SGPR (SALU), or the int itself when it is a constant."""
        expr = const(expr)
        if not expr.uniform:
            raise ValueError(f"{expr!r} is not wave-uniform")
        return self._value(expr, comment or self.comment)

    def free(self):
        if self.owned:
            self.k.free(*self.owned)
        self.owned, self.cache = [], {}

    # --------------------------------------------------------------- internals
    def _mov(self, dst: Reg, src, why):
        self.k.v_mov_b32(dst, src, comment=why)

    def _tmp_v(self) -> Reg:
        r = self.k.vgpr(1, "lane_tmp", scratch=True)
        self.owned.append(r)
        return r

    def _tmp_s(self) -> Reg:
        r = self.k.sgpr(1, "lane_tmp", scratch=True)
        self.owned.append(r)
        return r

    def _value(self, e: Any, why, top: Reg | None = None):     # Any: dispatched on type(e), which mypy does not narrow
        """A register (VGPR or SGPR) or an int constant holding ``e``."""
        t = type(e)
        if t is Const:
            return e.value
        if t is Lane:
            return self.lane_reg
        if t is VReg:
            return e.reg
        if t is Uniform:
            if e.reg is None:
                raise ValueError(f"uniform '{e.name}' has no register")
            return e.reg
        reg = self.cache.get(e)
        if reg is not None:
            return reg
        if e.uniform:
            reg = self._salu(e, why)
        else:
            reg = self._valu(e, why, top)
        if reg is not top:
            self.cache[e] = reg
        return reg

    # ..... wave-uniform: SALU
    def _salu(self, e, why) -> Reg:
        k = self.k
        if isinstance(e, Select):
            x, y = self._two_sources(self._sval(e.x, why), self._sval(e.y, why), why)
            a, b = self._two_sources(self._sval(e.a, why), self._sval(e.b, why), why)
            d = self._tmp_s()
            k.s_cmp_lt_u32(x, y, comment=why)
            k.s_cselect_b32(d, a, b, comment=why)
            return d
        a, b = self._two_sources(self._sval(e.a, why), self._sval(e.b, why), why)
        d = self._tmp_s()
        op = {"add": k.s_add_u32, "mul": k.s_mul_i32, "and": k.s_and_b32, "or": k.s_or_b32,
              "xor": k.s_xor_b32, "shl": k.s_lshl_b32, "shr": k.s_lshr_b32}[e.op]
        op(d, a, b, comment=why)
        return d

    def _two_sources(self, a, b, why):
        """SALU takes one literal: a second non-inline constant goes through an SGPR."""
        def lit(v):
            return isinstance(v, int) and not -16 <= v <= 64
        if lit(a) and lit(b) and a != b:
            t = self._tmp_s()
            self.k.s_mov_b32(t, b, comment=why)
            b = t
        return a, b

    def _sval(self, e, why):
        v = self._value(e, why)
        return v

    # ..... per lane: VALU
    def _vreg(self, e, why) -> Reg:
        """``e`` in a VGPR (moving a constant or SGPR into one if needed; cached)."""
        v = self._value(e, why)
        if isinstance(v, Reg) and v.cls == "v":
            return v
        key = ("vgpr", e)
        if key in self.cache:
            return self.cache[key]
        d = self._tmp_v()
        self.k.v_mov_b32(d, v, comment=why)
        self.cache[key] = d
        return d

    def _valu(self, e, why, top) -> Reg:
        k = self.k
        d = top if top is not None else self._tmp_v()
        if isinstance(e, Select):
            # v_cndmask_b32 d, src0, src1, vcc = vcc ? src1 : src0, and src1 must be a VGPR: when only
            # ``b`` is per-lane, select it with the negated compare (x >= y)
            negate = e.a.uniform and not e.b.uniform
            x = self._value(e.x, why)
            y = self._value(e.y, why)
            yv = isinstance(y, Reg) and y.cls == "v"
            if not yv:
                xv = x if isinstance(x, Reg) and x.cls == "v" else self._vreg(e.x, why)
            if not negate:
                if yv:
                    k.v_cmp_lt_u32(VCC, x, y, comment=why)       # vcc = x < y
                else:
                    k.v_cmp_gt_u32(VCC, y, xv, comment=why)      # vcc = y > x
                a, b = self._vreg(e.a, why), self._value(e.b, why)
            else:
                if yv:
                    k.v_cmp_ge_u32(VCC, x, y, comment=why)       # vcc = x >= y
                else:
                    k.v_cmp_le_u32(VCC, y, xv, comment=why)      # vcc = y <= x
                a, b = self._vreg(e.b, why), self._value(e.a, why)
            if not (isinstance(b, int) and -16 <= b <= 64) and not (isinstance(b, Reg) and b.cls == "v"):
                b = self._vreg(e.a if negate else e.b, why)      # with vcc, src0 cannot be an SGPR or literal
            k.v_cndmask_b32(d, b, a, VCC, comment=why)           # vcc ? a : b
            return d
        op = e.op
        if op in ("shl", "shr"):
            a = self._vreg(e.a, why)
            n = e.b.value
            (k.v_lshlrev_b32 if op == "shl" else k.v_lshrrev_b32)(d, n, a, comment=why)
            return d
        # commutative two-operand ops: one VGPR operand, the other anything (VOP2 src0 takes a literal)
        a, b = e.a, e.b
        if a.uniform and not b.uniform:
            a, b = b, a
        av = self._vreg(a, why)
        bv = self._value(b, why)
        if op == "add":
            k.v_add_u32(d, bv, av, comment=why)
        elif op == "and":
            k.v_and_b32(d, bv, av, comment=why)
        elif op == "or":
            k.v_or_b32(d, bv, av, comment=why)
        elif op == "xor":
            k.v_xor_b32(d, bv, av, comment=why)
        elif op == "mul":
            if a.hi < (1 << 24) and b.hi < (1 << 24):
                if isinstance(bv, Reg) and bv.cls == "v" and isinstance(av, Reg):
                    k.v_mul_u32_u24(d, av, bv, comment=why)
                else:
                    k.v_mul_u32_u24(d, bv, av, comment=why)
            else:
                if isinstance(bv, int):
                    s = self._tmp_s()
                    k.s_mov_b32(s, bv, comment=why)
                    bv = s
                k.v_mul_lo_u32(d, av, bv, comment=why)
        else:
            raise AssertionError(op)
        return d
