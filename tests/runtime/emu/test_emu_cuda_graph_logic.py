"""The planning logic of the cuda engine's CUDA graphs (runtime/emu/cuda_graph.py), on a stand-in for CuPy's
capture API, so it runs everywhere (the real graphs are checked on a GPU in test_emu_cuda.py).

The stand-in records what a handler does while a "capture" is open and replays it at each launch of the
graph, and refuses a read back (as CUDA does on a capturing stream); the handlers here log what they
execute.  Checked: a block runs exactly once per execution and in program order whatever is captured; a
handler that reads back runs plainly between graphs (and the capture it broke leaves no trace: statistics
restored); statistics of captured handlers are added again at every replay; the terminator and the
``_UNSAFE`` kinds are never captured; blocks are only planned at their second execution.
"""

import types

import pytest

from isagen.runtime.emu import cuda_graph as G
from isagen.runtime.emu import xp as X
from isagen.runtime.emu.wave import ALL


class _Refused(RuntimeError):
    pass


class _FakeRuntime:
    streamCaptureModeRelaxed = 2

    def __init__(self):
        self.capturing = None          # the list of recorded ops while a capture is open
        self.graphs = {}
        self.next = 1
        self.invalid = False

    def streamBeginCapture(self, ptr, mode):
        assert self.capturing is None
        self.capturing, self.invalid = [], False

    def streamEndCapture(self, ptr):
        ops, self.capturing = self.capturing, None
        if self.invalid:
            raise _Refused("capture invalidated")
        h = self.next
        self.next += 1
        self.graphs[h] = ops
        return h

    def graphInstantiate(self, h):
        return h

    def graphLaunch(self, h, stream):
        for op in self.graphs[h]:
            op()

    def graphDestroy(self, h):
        self.graphs.pop(h, None)

    def graphExecDestroy(self, h):
        pass


def _fake_cupy(rt):
    class Stream:
        ptr = 7

        def __init__(self, non_blocking=False):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    class Pool:
        def malloc(self, n):
            raise AssertionError("not used here")

        def total_bytes(self):
            return 0

    class Ctx:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    cuda = types.SimpleNamespace(runtime=rt, Stream=Stream, MemoryPool=Pool, using_allocator=lambda f: Ctx(),
                                 set_pinned_memory_allocator=lambda f: None,
                                 get_current_stream=lambda: types.SimpleNamespace(ptr=0))
    return types.SimpleNamespace(cuda=cuda, get_default_pinned_memory_pool=lambda: types.SimpleNamespace(
        malloc=lambda n: None))


class _Run:
    def __init__(self):
        self.bytes_read = self.bytes_written = self.scalar_bytes_read = self.scalar_bytes_written = 0
        self.lds_bytes_read = self.lds_bytes_written = 0
        self.global_bytes_by_width: dict = {}
        self.reports: list = []
        self._seen: dict = {}


class _St:
    def __init__(self):
        self.run = _Run()
        self.log: list = []


def _step(name, cat="valu", term=False):
    return types.SimpleNamespace(inst=types.SimpleNamespace(name=name), cat=cat, term=term, error=None)


@pytest.fixture
def fake(monkeypatch):
    rt = _FakeRuntime()
    monkeypatch.setattr(X, "cupy_module", lambda: _fake_cupy(rt))
    return rt


def _block(rt, kinds):
    """Steps and handlers: 'op' (device work, capturable), 'sync' (reads back: refused while capturing),
    'stat' (device work plus a host statistic of 16 bytes), 'memtime' (never captured), 'term'."""
    steps, fns = [], []
    for i, k in enumerate(kinds):
        name = {"memtime": "s_memtime", "term": "s_branch"}.get(k, f"v_op{i}")
        steps.append(_step(name, "salu" if k in ("memtime", "term") else "valu", term=k == "term"))

        def fn(st, ws, i=i, k=k):
            def work():
                st.log.append(i)
            if k == "sync" and rt.capturing is not None:
                rt.invalid = True
                raise _Refused("the current stream is capturing, so D2H transfers are disallowed")
            if k == "stat":
                st.run.lds_bytes_read += 16
            if rt.capturing is not None:
                rt.capturing.append(work)
            else:
                work()
        fns.append(fn)
    return types.SimpleNamespace(start=0, steps=steps, fns=fns)


def test_block_runs_once_in_order_every_execution(fake):
    kinds = ["op", "stat", "op", "sync", "op", "op", "memtime", "op", "op", "term"]
    b = _block(fake, kinds)
    st = _St()
    before = dict(G.STATS)
    for n in range(1, 5):
        G.run_block(st, b, ALL)
        assert st.log == list(range(len(kinds))) * n          # each handler once per execution, in order
        assert st.run.lds_bytes_read == 16 * n                # the statistic once per execution
    segs = st._cuda_graphs[0].segs
    kinds_of = [s[0] for s in segs]
    # graphs: [op stat op], [op op], [op op]; plain: sync, memtime, the terminator
    assert kinds_of == ["g", "p", "g", "p", "g", "p"]
    assert G.STATS["captured"] - before["captured"] == 3
    assert G.STATS["launched"] - before["launched"] == 3 * 3      # captured at run 2, replayed at runs 3, 4
    assert not fake.capturing


def test_single_handlers_between_uncapturable_ones_run_plainly(fake):
    b = _block(fake, ["op", "sync", "op", "sync", "term"])
    st = _St()
    for n in range(1, 4):
        G.run_block(st, b, ALL)
        assert st.log == [0, 1, 2, 3, 4] * n
    assert all(s[0] == "p" for s in st._cuda_graphs[0].segs)        # runs shorter than MIN_RUN: no graph


def test_failed_capture_restores_statistics_and_reports(fake):
    b = _block(fake, ["stat", "stat", "sync", "term"])
    st = _St()
    G.run_block(st, b, ALL)
    G.run_block(st, b, ALL)       # captures [stat stat], fails at sync first, retries: counted once
    assert st.run.lds_bytes_read == 2 * 32
    assert st.log == [0, 1, 2, 3] * 2


def test_first_execution_is_plain(fake):
    b = _block(fake, ["op", "op", "term"])
    st = _St()
    G.run_block(st, b, ALL)
    assert st._cuda_graphs[0].segs is None and fake.graphs == {}
