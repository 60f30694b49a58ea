"""Buffer resources (V#): raw byte buffers whose range check does the bounds work.

A raw buffer resource is four SGPRs: the 48-bit base address, ``num_records`` (bytes) and the format
word.  ``buffer_load``/``buffer_store`` with ``offen`` take a per-lane byte offset; a lane whose offset
is at or past ``num_records`` loads 0 and its store is dropped.  The tile primitives lean on that:

* the offset is wholly in the VGPR (soffset 0, no instruction offset): whether soffset takes part in
  the range check differs between chips, so it never carries anything the check must see;
* the base may move (``advance``): a K loop steps the base by one tile and lowers ``num_records`` by
  the same amount (clamped at 0), so every lane keeps one offset for the whole loop and a tile past
  the end of the tensor loads zeros;
* a lane that must not touch memory gets ``OOB_OFFSET``, past every buffer isagen builds (they are
  limited to 2**31 - 1 bytes).
"""

from __future__ import annotations

from isagen.isa.operands import Reg

BUFFER_DWORD3 = 0x00020000     # gfx9 raw buffer: DATA_FORMAT (bits 18:15) = 4 (32 bit), NUM_FORMAT 0, DST_SEL 0
OOB_OFFSET = 0x80000000        # an offset at or past num_records of every buffer (num_records < 2**31)
OOB_INLINE = -4                # 0xfffffffc, also past every window, and an inline constant (no literal)
MAX_RECORDS = (1 << 31) - 1


class BufferResource:
    """A raw buffer resource in four SGPRs, named after the tensor it reads or writes.

    ``base`` is words 0-1 (address; stride 0), ``records`` word 2, word 3 the format.  ``remaining``
    (an optional extra SGPR) tracks the signed byte count from the base to the end of the tensor, so
    that ``advance`` can clamp ``num_records`` at 0 when the base walks past the end.
    """

    def __init__(self, k, name: str, *, tracked: bool = False):
        self.k = k
        self.name = name
        self.regs: Reg = k.sgpr(4, f"{name}_rsrc", kernel=True)
        self.remaining: Reg | None = k.sgpr(1, f"{name}_remaining", kernel=True) if tracked else None

    @property
    def base(self) -> Reg:
        return self.regs[0:2]

    def load_pointer(self, arg_offset: int) -> None:
        """Kernel argument (a 64-bit pointer) -> words 0-1."""
        self.k.s_load_dwordx2(self.base, self.k.kernarg_ptr, arg_offset, comment=f"{self.name}: base address")

    def finish(self, num_records) -> None:
        """After the pointer has landed (``s_waitcnt lgkmcnt(0)``): stride 0, num_records, format."""
        k = self.k
        k.s_and_b32(self.regs[1], self.regs[1], 0xFFFF, comment=f"{self.name}: base bits 47:32; stride 0")
        self.set_records(num_records)
        k.s_mov_b32(self.regs[3], BUFFER_DWORD3, comment=f"{self.name}: raw buffer, 32-bit format")

    def set_records(self, value) -> None:
        """``num_records`` from an SGPR or constant; with tracking, ``remaining`` holds it too."""
        k = self.k
        if self.remaining is not None:
            if value is not self.remaining:
                k.s_mov_b32(self.remaining, value, comment=f"{self.name}: bytes from the base to the end")
            k.s_max_i32(self.regs[2], self.remaining, 0, comment=f"{self.name}: num_records (0 past the end)")
        else:
            k.s_mov_b32(self.regs[2], value, comment=f"{self.name}: num_records (bytes)")

    def add_base(self, delta, why: str = "") -> None:
        """base += delta (an SGPR or a 32-bit constant, unsigned)."""
        k = self.k
        k.s_add_u32(self.regs[0], self.regs[0], delta, comment=why or f"{self.name}: base += {delta}")
        k.s_addc_u32(self.regs[1], self.regs[1], 0, comment=f"{self.name}: carry into bits 47:32")

    def sub_base(self, delta, why: str = "") -> None:
        k = self.k
        k.s_sub_u32(self.regs[0], self.regs[0], delta, comment=why or f"{self.name}: base -= {delta}")
        k.s_subb_u32(self.regs[1], self.regs[1], 0, comment=f"{self.name}: borrow from bits 47:32")

    def advance(self, delta, why: str = "") -> None:
        """Move the window by ``delta`` bytes: base += delta, num_records -= delta (clamped at 0)."""
        for step in self.advance_steps(delta, why):
            step()

    def advance_steps(self, delta, why: str = "") -> list:
        """``advance`` as three callables, in order, that a schedule may spread (the first is the
        s_add_u32/s_addc_u32 pair: the carry travels in SCC, which other SALU ops overwrite)."""
        if self.remaining is None:
            raise ValueError(f"{self.name}: advance needs a tracked resource")
        k, r = self.k, self.regs

        def base():
            k.s_add_u32(r[0], r[0], delta, comment=why or f"{self.name}: base to the next tile")
            k.s_addc_u32(r[1], r[1], 0, comment=f"{self.name}: carry into bits 47:32")
        return [
            base,
            lambda: k.s_sub_i32(self.remaining, self.remaining, delta,
                                comment=f"{self.name}: bytes left from the new base"),
            lambda: k.s_max_i32(r[2], self.remaining, 0, comment=f"{self.name}: num_records (0 past the end)"),
        ]
