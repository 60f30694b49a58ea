"""Loading code objects and dispatching their kernels on the emulated device (the emulator's
counterpart of ``hipModuleLaunchKernel``).

``Module(device, co_bytes)`` reads the code object (``isagen.objects.codeobject``), checks it is for the
device's processor, and compiles each kernel's machine code on first launch.  ``launch`` packs the
explicit arguments exactly as the metadata's ``.args`` lay them out, fills the hidden arguments of
code object v5 that the metadata declares, sets up the initial register state the hardware gives a
wave (user SGPRs in the fixed order, workgroup IDs, packed work-item IDs in v0, EXEC for partial
waves, preloaded kernel arguments), and runs the workgroups in batches.
"""

from __future__ import annotations

import os
import struct
import time

import numpy as np

from isagen.errors import CodeObjectError, LaunchError
from isagen.isa.decoder import decode
from isagen.objects.codeobject import read_code_object
from isagen.progress import notes_wanted, progress_wanted, report_note, report_progress
from isagen.runtime.emu import xp as X
from isagen.runtime.emu.access import PRIVATE_BASE, SHARED_BASE, Ctx
from isagen.runtime.emu.executor import CompiledCode, RunContext, run_batch
from isagen.runtime.emu.report import EmulatorError
from isagen.runtime.emu.sanitizer import Sanitizer
from isagen.runtime.emu.wave import EXEC_LO, Batch

# bytes of VGPR file one batch may hold (the batch size adapts to the kernel's register count)
BATCH_VGPR_BYTES = 192 << 20
MAX_BATCH_WAVES = 2048
# bytes of LDS one batch may hold (the sanitizer's race shadow takes 8x as much again)
BATCH_LDS_BYTES = 16 << 20
# the cuda engine: the per-instruction cost is launch overhead, nearly independent of the waves, so a
# batch is as large as the GPU's memory comfortably allows (the whole grid for GEMMs up to 8192^3)
CUDA_BATCH_VGPR_BYTES = 4 << 30
CUDA_MAX_BATCH_WAVES = 1 << 16
CUDA_BATCH_LDS_BYTES = 1 << 30
# a launch of at least this many waves, watched by a progress bar, runs its first workgroup alone to
# learn how many instructions a wave executes (the bar's estimate inside the batches after it).  A
# batch costs ~(36 + W) x its instructions per wave x the time of one wave's instruction (measured on a
# GEMM: 36 is the per-instruction fixed cost in waves), so the lone workgroup adds at most ~15% to a
# launch of 256 waves and less to larger ones; smaller launches are quick and go without it.
PROBE_MIN_WAVES = 256


class LoadedKernel:
    """One kernel of a loaded module, compiled lazily (once per sanitize setting)."""

    def __init__(self, module, k):
        self.module = module
        self.k = k
        self.name = k.name
        self.kd = k.descriptor
        self.meta = k.metadata or {}
        self._programs: dict[bool, CompiledCode] = {}
        self._insts = None

    def program(self, sanitize: bool) -> CompiledCode:
        p = self._programs.get(sanitize)
        if p is None:
            if self._insts is None:
                # the whole .text when the kernel lies in it, so functions it calls are there too
                self._insts = self.module.text_insts(self.k) or self.k.decode()
            kd = self.kd
            dev = self.module.device
            nregs = kd.vgpr_count
            accum = kd.accum_offset
            if accum > nregs:
                accum = nregs
            ctx = Ctx(kernel=self.name, target=dev.target.name, nregs=nregs, accum_offset=accum,
                      sanitize=sanitize, lds_dma_inst_offset=dev.lds_dma_inst_offset,
                      denorm32=kd.float_denorm_mode_32, denorm16=kd.float_denorm_mode_16_64,
                      code_base=self.k.code_address, dx10_clamp=kd.dx10_clamp, ieee=kd.ieee_mode)
            p = self._programs[sanitize] = CompiledCode(self._insts, ctx)
        return p

    @property
    def explicit_args(self) -> list[dict]:
        return [a for a in self.meta.get(".args", []) if not str(a.get(".value_kind", "")).startswith("hidden_")]

    @property
    def hidden_args(self) -> list[dict]:
        return [a for a in self.meta.get(".args", []) if str(a.get(".value_kind", "")).startswith("hidden_")]


def workgroup_order(total: int) -> np.ndarray:
    """The order the emulator runs a launch's workgroups in (linear ids), from ``ISAGEN_EMU_WG_ORDER``:
    ``forward`` (default), ``reverse`` or ``shuffle:<seed>`` (a seeded permutation).  A GPU runs
    workgroups in no promised order; a kernel whose result depends on it (a race between workgroups, an
    order-sensitive atomic sum) shows it when run in another order."""
    text = os.environ.get("ISAGEN_EMU_WG_ORDER", "forward").strip().lower() or "forward"
    if text == "forward":
        return np.arange(total)
    if text == "reverse":
        return np.arange(total)[::-1].copy()
    if text.startswith("shuffle:"):
        try:
            seed = int(text.split(":", 1)[1])
        except ValueError:
            seed = -1
        if seed >= 0:
            return np.random.default_rng(seed).permutation(total)
    raise LaunchError(f"ISAGEN_EMU_WG_ORDER={text!r}: use forward, reverse or shuffle:<seed> (a seed >= 0)")


class Module:
    """A loaded code object: ``launch(name, grid, block, args, shared_bytes=0)``."""

    def __init__(self, device, co_bytes):
        self.device = device
        want = device.target.name
        if isinstance(co_bytes, (bytes, bytearray, memoryview)):
            self.co = read_code_object(bytes(co_bytes), target=want)
        else:
            self.co = read_code_object(co_bytes, target=want)
        if self.co.mach != want:
            raise LaunchError(f"code object is for {self.co.mach}, the emulated device is {want} "
                              f"(create Device('{self.co.mach}'))")
        self._kernels: dict[str, LoadedKernel] = {}
        self.last_stats: dict | None = None
        self.last_reports: list = []
        # a callable ``trace(batch, ws, block)`` the executor calls before each basic block (off: None)
        self.trace = None

    _text = None

    def text_insts(self, k) -> list | None:
        """The decoded ``.text`` section (once per module) when kernel ``k``'s code lies in it."""
        co = self.co
        lo, hi = co.text_address, co.text_address + len(co.text)
        if not (co.text and lo <= k.code_address < hi):
            return None
        if self._text is None:
            try:
                self._text = decode(co.text, co.mach, base=co.text_address)
            except CodeObjectError:
                self._text = []            # data in .text: fall back to the kernel's own code
        return self._text or None

    @property
    def kernel_names(self) -> list[str]:
        return list(self.co.kernels)

    def kernel(self, name: str) -> LoadedKernel:
        if name.endswith(".kd"):
            name = name[:-3]
        k = self._kernels.get(name)
        if k is None:
            if name not in self.co.kernels:
                raise LaunchError(f"no kernel named '{name}' in the module (kernels: "
                                  f"{', '.join(self.co.kernels) or 'none'})")
            k = self._kernels[name] = LoadedKernel(self, self.co.kernels[name])
        return k

    # ------------------------------------------------------------------ launch
    def launch(self, name: str, grid=(1, 1, 1), block=(64, 1, 1), args=(), shared_bytes: int = 0,
               on_error: str = "raise", sanitize: bool | None = None, kernarg: bytes | None = None):
        """Run kernel ``name`` over ``grid`` workgroups of ``block`` work-items.

        ``args`` follow the metadata's explicit ``.args`` in order: device buffers or integer
        addresses for pointers, numpy scalars (or Python numbers) for values.  ``on_error``:
        ``"raise"`` (an EmulatorError at the first report) or ``"collect"`` (run on, return the list
        of reports).  ``sanitize`` overrides the device's setting for this launch.
        ``kernarg``: the explicit arguments as raw bytes instead of ``args`` (what
        ``hipModuleLaunchKernel``'s ``HIP_LAUNCH_PARAM_BUFFER_POINTER`` passes: a packed C struct, as
        AITER's launchers do); it is copied to the start of the kernarg segment and the hidden
        arguments are filled after it as usual.
        """
        with X.engine(self.device.engine):
            return self._launch(name, grid, block, args, shared_bytes, on_error, sanitize, kernarg)

    def _launch(self, name: str, grid, block, args, shared_bytes: int, on_error: str, sanitize: bool | None,
                kernarg: bytes | None):
        if on_error not in ("raise", "collect"):
            raise LaunchError(f"on_error must be 'raise' or 'collect', not {on_error!r}")
        k = self.kernel(name)
        dev = self.device
        san = dev.sanitize if sanitize is None else bool(sanitize)
        grid = _dims(grid, "grid")
        block = _dims(block, "block")
        threads = block[0] * block[1] * block[2]
        maxwg = int(k.meta.get(".max_flat_workgroup_size", 1024) or 1024)
        if threads > maxwg:
            raise LaunchError(f"block {block} has {threads} work-items; kernel '{k.name}' allows at most {maxwg} "
                              f"(.max_flat_workgroup_size)")
        reqd = k.meta.get(".reqd_workgroup_size")
        if reqd and tuple(reqd) != block:
            raise LaunchError(f"kernel '{k.name}' requires block {tuple(reqd)} (.reqd_workgroup_size), got {block}")
        shared_bytes = int(shared_bytes)
        if shared_bytes < 0:
            raise LaunchError(f"shared_bytes must be >= 0, got {shared_bytes}")
        lds_total = k.kd.group_segment_fixed_size + shared_bytes
        if lds_total > dev.target.lds_bytes:
            raise LaunchError(f"kernel '{k.name}' needs {lds_total} bytes of LDS ({k.kd.group_segment_fixed_size} "
                              f"static + {shared_bytes} dynamic); {dev.target.name} has {dev.target.lds_bytes}")
        prog = k.program(san)
        mem = dev.memory
        temps = []
        try:
            # the runtime hands out kernarg space in 64-byte aligned blocks; scalar loads may read
            # up to the end of the block
            kbuf = mem.alloc((max(self._kernarg_size(k), 8) + 63) // 64 * 64, dev, f"kernarg of {k.name}")
            temps.append(kbuf)
            extra = self._support_buffers(k, grid, block, kbuf, temps)
            kernarg = self._pack_args(k, args, grid, block, shared_bytes, extra, kernarg)
            mem.write_bytes(kbuf.addr, kernarg)
            rc = RunContext(k.name, prog, dev, on_error, dev.max_wave_instructions)
            rc.trace = self.trace
            prog.reset_counts()
            t0 = time.perf_counter()
            nwaves_wg = (threads + 63) // 64
            total_wg = grid[0] * grid[1] * grid[2]
            self._order = workgroup_order(total_wg)
            per_wave = max(prog.ctx.nregs, 1) * 64 * 4
            # the cuda engine's large batches, but not with the sanitizer on: its bookkeeping stays host-side
            # numpy (sanitizer.py), sized like the CPU engine's, which also keeps the reports' batching the same
            cuda = dev.engine == "cuda" and not san
            vgpr_cap = CUDA_BATCH_VGPR_BYTES if cuda else BATCH_VGPR_BYTES
            waves_cap = CUDA_MAX_BATCH_WAVES if cuda else MAX_BATCH_WAVES
            lds_cap = CUDA_BATCH_LDS_BYTES if cuda else BATCH_LDS_BYTES
            wg_per_batch = max(1, min(total_wg, vgpr_cap // (per_wave * nwaves_wg),
                                      max(1, waves_cap // nwaves_wg),
                                      max(1, lds_cap // max(lds_total, 1))))
            report_progress(0, total_wg)             # the CLI's bar, when one is open, learns the size
            # Progress inside a batch: its waves run in step, so none finishes before the batch ends and a
            # launch of one batch would report nothing until it is done.  The instructions a wave has
            # executed, against a finished batch's mean per wave, tell how far it has got.  When a
            # bar is watching a launch of PROBE_MIN_WAVES or more, the first workgroup runs alone to
            # learn that mean early (nothing is spent when no one watches).
            wave_insts = 0.0
            first = 0
            # The CPU engine's first workgroup also gives the launch's estimate, printed up front
            # where the caller takes notes (``isagen run``): ``_launch_estimate``.
            eta = notes_wanted() and dev.engine == "cpu"
            probe = ((progress_wanted() or eta) and total_wg > 1 and wg_per_batch > 1
                     and total_wg * nwaves_wg >= PROBE_MIN_WAVES)
            while first < total_wg:
                n = 1 if probe and first == 0 else min(wg_per_batch, total_wg - first)
                st = self._batch(k, prog, first, n, grid, block, kbuf, kernarg, extra, lds_total, san)
                st.stats = rc
                if wave_insts:
                    report_progress(first, total_wg, _batch_estimate(st, first, n, wave_insts))
                t_batch = time.perf_counter()
                try:
                    run_batch(prog, st, rc)
                finally:
                    if st.san is not None:
                        st.san.close()           # (its large arrays go to the next batch)
                wave_insts = float(st.icount.mean())
                if probe and eta and first == 0:
                    report_note(_launch_estimate(time.perf_counter() - t_batch, wave_insts, nwaves_wg, total_wg,
                                                 wg_per_batch))
                first += n
                report_progress(first, total_wg)
                if rc.reports and on_error == "collect" and any(r.category in ("budget", "fault", "unsupported")
                                                                for r in rc.reports):
                    break
            elapsed = time.perf_counter() - t0
        finally:
            for b in temps:
                try:
                    mem.free(b)
                except LaunchError:
                    pass
        cats = prog.category_counts()
        self.last_stats = {
            "kernel": k.name, "grid": grid, "block": block, "workgroups": total_wg,
            "waves": total_wg * nwaves_wg, "wave_instructions": int(sum(cats.values())),
            "categories": {c: v for c, v in cats.items() if v},
            "global_bytes_read": rc.bytes_read, "global_bytes_written": rc.bytes_written,
            "global_bytes_by_width": dict(sorted(rc.global_bytes_by_width.items())),
            "scalar_bytes_read": rc.scalar_bytes_read, "scalar_bytes_written": rc.scalar_bytes_written,
            "lds_bytes_read": rc.lds_bytes_read, "lds_bytes_written": rc.lds_bytes_written,
            "seconds": elapsed, "sanitized": san, "reports": len(rc.reports),
        }
        self.last_reports = list(rc.reports)
        return list(rc.reports)

    # ------------------------------------------------------------------ arguments
    @staticmethod
    def _kernarg_size(k: LoadedKernel) -> int:
        size = int(k.meta.get(".kernarg_segment_size", k.kd.kernarg_size) or 0)
        size = max(size, k.kd.kernarg_size)
        end = max([int(a[".offset"]) + int(a[".size"]) for a in k.meta.get(".args", [])] or [0])
        return max(size, end)

    def _pack_args(self, k: LoadedKernel, args, grid, block, shared_bytes, extra, raw=None) -> bytes:
        explicit = k.explicit_args
        args = list(args)
        if raw is not None:
            raw = bytes(raw)
            size = self._kernarg_size(k)
            if args:
                raise LaunchError(f"kernel '{k.name}': pass either args or kernarg bytes, not both")
            if len(raw) > size:
                raise LaunchError(f"kernel '{k.name}': kernarg of {len(raw)} bytes is larger than its kernarg "
                                  f"segment ({size} bytes, .kernarg_segment_size)")
            buf = bytearray(size)
            buf[:len(raw)] = raw
            self._hidden(k, buf, grid, block, shared_bytes, extra)
            return bytes(buf)
        if len(args) != len(explicit):
            desc = ", ".join(f"{a.get('.name', f'arg{i}')}:{_kind(a)}" for i, a in enumerate(explicit))
            raise LaunchError(f"kernel '{k.name}' takes {len(explicit)} arguments ({desc}), got {len(args)}")
        buf = bytearray(self._kernarg_size(k))
        for i, (a, v) in enumerate(zip(explicit, args)):
            off, sz = int(a[".offset"]), int(a[".size"])
            nm = a.get(".name", f"#{i}")
            vk = a.get(".value_kind", "by_value")
            if vk in ("global_buffer", "dynamic_shared_pointer", "image", "sampler", "pipe", "queue"):
                addr = _address(v, nm)
                buf[off:off + sz] = addr.to_bytes(8, "little")[:sz]
            else:
                buf[off:off + sz] = _value_bytes(v, sz, nm, a.get(".value_type"))
        self._hidden(k, buf, grid, block, shared_bytes, extra)
        return bytes(buf)

    def _hidden(self, k: LoadedKernel, buf, grid, block, shared_bytes, extra):
        dims = 3 if (grid[2] > 1 or block[2] > 1) else 2 if (grid[1] > 1 or block[1] > 1) else 1
        for a in k.hidden_args:
            vk, off, sz = a[".value_kind"], int(a[".offset"]), int(a[".size"])
            val = 0
            if vk.startswith("hidden_block_count_"):
                val = grid["xyz".index(vk[-1])]
            elif vk.startswith("hidden_group_size_"):
                val = block["xyz".index(vk[-1])]
            elif vk.startswith("hidden_remainder_"):
                val = 0                       # grid counts whole workgroups
            elif vk == "hidden_grid_dims":
                val = dims
            elif vk == "hidden_dynamic_lds_size":
                val = shared_bytes
            elif vk == "hidden_private_base":
                val = PRIVATE_BASE >> 32
            elif vk == "hidden_shared_base":
                val = SHARED_BASE >> 32
            elif vk == "hidden_queue_ptr":
                val = extra["queue"]
            buf[off:off + sz] = int(val).to_bytes(8, "little")[:sz]

    def _support_buffers(self, k: LoadedKernel, grid, block, kbuf, temps) -> dict:
        """Dispatch packet and queue for kernels that ask for their pointers."""
        mem = self.device.memory
        dev = self.device
        out = {"dispatch": 0, "queue": 0}
        us = k.kd.user_sgprs
        if us.get("dispatch_ptr"):
            pkt = mem.alloc(64, dev, "dispatch packet")
            temps.append(pkt)
            dims = 3 if (grid[2] > 1 or block[2] > 1) else 2 if (grid[1] > 1 or block[1] > 1) else 1
            data = struct.pack("<HHHHHHIIIIIQQQQ", 0, dims, block[0], block[1], block[2], 0,
                               grid[0] * block[0], grid[1] * block[1], grid[2] * block[2],
                               k.kd.private_segment_fixed_size, k.kd.group_segment_fixed_size,
                               0, kbuf.addr, 0, 0)
            mem.write_bytes(pkt.addr, data)
            out["dispatch"] = pkt.addr
        if us.get("queue_ptr") or any(a[".value_kind"] == "hidden_queue_ptr" for a in k.hidden_args):
            q = mem.alloc(256, dev, "queue")
            temps.append(q)
            out["queue"] = q.addr
        return out

    # ------------------------------------------------------------------ initial wave state
    def _batch(self, k: LoadedKernel, prog: CompiledCode, first: int, n: int, grid, block, kbuf, kernarg, extra,
               lds_total, san) -> Batch:
        kd = k.kd
        threads = block[0] * block[1] * block[2]
        nw = (threads + 63) // 64
        W = n * nw
        st = Batch(prog.ctx.nregs, W, n, lds_total)
        lin = self._order[first:first + n]          # which workgroups run in this batch (ISAGEN_EMU_WG_ORDER)
        gx, gy = grid[0], grid[1]
        st.wg_id[:, 0] = lin % gx
        st.wg_id[:, 1] = (lin // gx) % gy
        st.wg_id[:, 2] = lin // (gx * gy)
        st.wg[:] = np.repeat(np.arange(n), nw)
        st.wave_in_wg[:] = np.tile(np.arange(nw), n)
        st.wg_x = X.from_host(st.wg)              # the same, on the engine's device (LDS indexing)
        # EXEC: the work-items that exist
        t = st.wave_in_wg[:, None] * 64 + np.arange(64)[None, :]
        live = t < threads
        live_x = X.from_host(live)
        st.EXEC[:] = live_x
        st.set_exec(slice(None), live_x)
        # v0 (packed x | y << 10 | z << 20 on gfx90a+)
        x = t % block[0]
        y = (t // block[0]) % block[1]
        z = t // (block[0] * block[1])
        dims = kd.workitem_id_vgprs
        v0 = x.astype(np.uint32)
        if dims >= 1:
            v0 |= (y.astype(np.uint32) << 10)
        if dims >= 2:
            v0 |= (z.astype(np.uint32) << 20)
        st.V[0] = X.from_host(np.where(live, v0, 0))
        # user SGPRs in hardware order
        layout = kd.user_sgpr_layout()
        s_init = []
        for nm, s0, cnt in layout:
            vals = [0] * cnt
            if nm == "kernarg_segment_ptr":
                vals = [kbuf.addr & 0xFFFFFFFF, kbuf.addr >> 32]
            elif nm == "dispatch_ptr":
                vals = [extra["dispatch"] & 0xFFFFFFFF, extra["dispatch"] >> 32]
            elif nm == "queue_ptr":
                vals = [extra["queue"] & 0xFFFFFFFF, extra["queue"] >> 32]
            elif nm == "private_segment_buffer":
                vals = [0, 0, 0xFFFFFFFF, 0x00027000]
            elif nm == "flat_scratch_init":
                vals = [0, 0]
            elif nm == "private_segment_size":
                vals = [kd.private_segment_fixed_size]
            elif nm == "kernarg_preload":
                off = kd.kernarg_preload_offset * 4
                raw = kernarg[off: off + 4 * cnt].ljust(4 * cnt, b"\0")
                vals = list(struct.unpack(f"<{cnt}I", raw))
            for j, v in enumerate(vals):
                st.S[s0 + j] = v & 0xFFFFFFFF
            s_init += list(range(s0, s0 + cnt))
        nxt = kd.user_sgpr_count
        for d, on in enumerate(kd.workgroup_id_enabled):
            if on:
                st.S[nxt] = X.from_host(st.wg_id[st.wg, d].astype(np.uint32))
                s_init.append(nxt)
                nxt += 1
        if kd.workgroup_info_enabled:
            st.S[nxt] = 0
            s_init.append(nxt)
            nxt += 1
        if kd.private_segment_enabled:
            st.S[nxt] = 0           # private segment wave byte offset
            s_init.append(nxt)
            nxt += 1
        # HW_REG_MODE as the descriptor sets it (s_getreg reads it; s_setreg changes are kept)
        st.mode[:] = (kd.float_round_mode_32 | kd.float_round_mode_16_64 << 2 | kd.float_denorm_mode_32 << 4
                      | kd.float_denorm_mode_16_64 << 6 | int(kd.dx10_clamp) << 8 | int(kd.ieee_mode) << 9)
        # private (scratch) memory per lane
        priv = kd.private_segment_fixed_size
        if priv or kd.uses_dynamic_stack:
            st.scratch = X.np.zeros((W, 64, max(priv, 0) + (16384 if kd.uses_dynamic_stack else 0)), np.uint8)
        # entry point (past the 256-byte compatibility prologue when arguments are preloaded)
        entry_pc = k.k.code_address
        if kd.kernarg_preload_length and self.device.kernarg_preload:
            entry_pc += 256
        entry = prog.ctx.pc_index.get(entry_pc)
        if entry is None:
            raise LaunchError(f"kernel '{k.name}': entry address {entry_pc:#x} is not an instruction boundary")
        st.pc[:] = entry
        if prog.ctx.sanitize:
            sz = Sanitizer(prog, st, self.device)      # (the device keeps its shadow's arrays)
            st.san = sz
            sz.init_vgprs([0])
            sz.init_sgprs(s_init + [EXEC_LO, EXEC_LO + 1])
            st._exec_all()              # (the cuda engine reads it back now: see Batch._exec_all)
        return st


# the fixed cost of one instruction step of a batch, in waves, for the up-front estimate: fitted to the
# lone first workgroup and the batches after it (t / instructions per wave = c * (a + W)) on the CPU
# engine, 2026-11-26, two runs each: 46-60 for GEMMs of 4 and 8 waves a workgroup, 68-90 for
# layer_norm, 25-64 for axpy (whose lone workgroup takes 3-8 ms, so noise decides)
STEP_FIXED_WAVES = 60


def _launch_estimate(probe_s: float, wave_insts: float, nwaves_wg: int, total_wg: int, wg_per_batch: int) -> str:
    """The line ``isagen run`` prints up front on the CPU engine, from the first workgroup run alone
    (``probe_s`` seconds, ``wave_insts`` instructions per wave): the launch's wave-instructions (that
    mean times the waves) and its time, with each later batch of W waves costing
    ``(STEP_FIXED_WAVES + W) / (STEP_FIXED_WAVES + nwaves_wg)`` times the first workgroup (a batch's
    waves run in step, so its time goes with its instructions per wave times that cost)."""
    rest, batches = total_wg - 1, []
    while rest > 0:
        batches.append(min(wg_per_batch, rest))
        rest -= batches[-1]
    unit = probe_s / (STEP_FIXED_WAVES + nwaves_wg)
    seconds = probe_s + sum((STEP_FIXED_WAVES + n * nwaves_wg) * unit for n in batches)
    waves = total_wg * nwaves_wg
    return (f"emulator (cpu): ~{round(wave_insts * waves):,} wave-instructions ({wave_insts:,.0f} per wave x "
            f"{waves:,} waves, from its first workgroup), estimated ~{_seconds(seconds)}")


def _seconds(s: float) -> str:
    return f"{s:.2g} s" if s < 10 else f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def _batch_estimate(st: Batch, first: int, n: int, wave_insts: float):
    """Workgroups done while batch ``st`` (workgroups ``first`` .. ``first + n``) runs, estimated from the
    instructions its waves have executed against ``wave_insts`` per wave; below the batch's end until it
    reports."""
    def estimate() -> float:
        return first + n * min(0.99, float(st.icount.mean()) / wave_insts)
    return estimate


# ============================================================================ argument helpers

def _dims(v, what) -> tuple:
    if isinstance(v, (int, np.integer)):
        v = (int(v),)
    try:
        t = tuple(int(x) for x in v)
    except (TypeError, ValueError):
        raise LaunchError(f"{what} must be up to three positive integers, got {v!r}") from None
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise LaunchError(f"{what} must be up to three positive integers, got {v!r}")
    return t + (1,) * (3 - len(t))


def _kind(a: dict) -> str:
    vk = a.get(".value_kind", "?")
    return "pointer" if vk == "global_buffer" else f"{a.get('.size')}-byte value"


def _address(v, name) -> int:
    if v is None:
        return 0
    if hasattr(v, "data_ptr") and not isinstance(v, np.ndarray):
        v = v.data_ptr()
    if isinstance(v, np.ndarray):
        raise LaunchError(f"argument '{name}' is a pointer: pass a device buffer (dev.to_device(array)), "
                          "not a host numpy array")
    try:
        a = int(v)
    except (TypeError, ValueError):
        raise LaunchError(f"argument '{name}' is a pointer; got {type(v).__name__}") from None
    if not 0 <= a < (1 << 64):
        raise LaunchError(f"argument '{name}': address {a:#x} out of range")
    return a


def _value_bytes(v, size, name, vtype=None) -> bytes:
    if isinstance(v, np.generic):
        b = v.tobytes()
        if len(b) != size:
            raise LaunchError(f"argument '{name}' takes {size} bytes; got a {v.dtype} ({len(b)} bytes)")
        return b
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, int):
        if not -(1 << (8 * size - 1)) <= v < (1 << (8 * size)):
            raise LaunchError(f"argument '{name}' = {v} does not fit in {size} bytes")
        return (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    if isinstance(v, float):
        if size == 4:
            return struct.pack("<f", v)
        if size == 8:
            return struct.pack("<d", v)
        if size == 2:
            return np.float16(v).tobytes()
    if isinstance(v, (bytes, bytearray)) and len(v) == size:
        return bytes(v)
    raise LaunchError(f"argument '{name}' is a {size}-byte value; got {v!r} (pass a numpy scalar such as "
                      f"np.int32(n) or np.float32(x))")


__all__ = ["Module", "LoadedKernel", "EmulatorError", "CodeObjectError"]
