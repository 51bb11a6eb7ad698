"""The timing method's arithmetic, on a simulated GPU and a fake CPU timer (no wall clock).

Speed is measured by benchmarks, never asserted by timed tests. What *can* be tested without a GPU
is the method: which stream the events go on, how many calls one event pair spans, that launch
latency is amortised, that an L2 flush happens before every cold call and outside its window,
that per-call times are divided correctly, and that compare() pools interleaved rounds. A
simulated GPU (:class:`SimGpu`) models a CUDA stream: the host pays ``launch_s`` per call, the GPU
runs each kernel for ``kernel_s`` once both the host has launched it and the previous kernel is done.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from amp_edu.measure import timing
from amp_edu.measure.timing import Timing, compare, measure
from amp_edu.measure.verdict import busy


class SimStream:
    def __init__(self, gpu, device):
        self.gpu, self.device, self.free_at, self.log = gpu, device, 0.0, []

    def synchronize(self):
        self.gpu.host = max(self.gpu.host, self.free_at)

    def wait_stream(self, other):
        self.free_at = max(self.free_at, other.free_at)


class SimEvent:
    def __init__(self, gpu):
        self.gpu, self.t, self.stream = gpu, None, None

    def record(self, stream=None):
        stream = stream or self.gpu.current
        self.stream, self.t = stream, max(stream.free_at, self.gpu.host)
        stream.log.append("event")

    def synchronize(self):
        self.gpu.host = max(self.gpu.host, self.t)

    def elapsed_time(self, end):
        assert self.stream is end.stream, "an event pair must be recorded on one stream"
        return (end.t - self.t) * 1e3          # milliseconds, like torch


class SimGraph:
    def __init__(self, gpu):
        self.gpu, self.kernels = gpu, []

    def replay(self):
        self.gpu.host += self.gpu.launch_s      # one launch for the whole graph
        for d in self.kernels:
            self.gpu.run_kernel(d, launch=False)


class SimGpu:
    """The slice of ``torch.cuda`` that measure() uses, on a simulated timeline."""

    def __init__(self, *, launch_s=10e-6, l2=50 << 20):
        self.host, self.launch_s, self.l2 = 0.0, launch_s, l2
        self.streams = {"cuda": SimStream(self, torch.device("cuda"))}
        self.current = self.streams["cuda"]     # where a launch goes unless a stream is entered
        self.capturing = None
        self.asked_for = []

    def current_stream(self, device):
        self.asked_for.append(torch.device(device))
        return self.streams.setdefault(str(device), SimStream(self, torch.device(device)))

    def Event(self, enable_timing=False):   # noqa: N802 - torch's name
        assert enable_timing
        return SimEvent(self)

    def Stream(self, device):               # noqa: N802
        return SimStream(self, device)

    @contextlib.contextmanager
    def stream(self, s):
        before, self.current = self.current, s
        yield
        self.current = before

    def CUDAGraph(self):                    # noqa: N802
        return SimGraph(self)

    @contextlib.contextmanager
    def graph(self, g):
        self.capturing = g
        yield
        self.capturing = None

    def get_device_properties(self, device):
        return SimpleNamespace(L2_cache_size=self.l2)

    def run_kernel(self, kernel_s, *, launch=True, name="kernel"):
        if self.capturing is not None:
            self.capturing.kernels.append(kernel_s)
            return
        if launch:
            self.host += self.launch_s
        s = self.current
        s.free_at = max(s.free_at, self.host) + kernel_s
        s.log.append(name)


@pytest.fixture
def gpu(monkeypatch):
    sim = SimGpu()
    monkeypatch.setattr(timing, "_cuda", sim)
    return sim


def _kernel(gpu, kernel_s):
    return lambda: gpu.run_kernel(kernel_s)


# --- CUDA: the event window ------------------------------------------------------------------------

def test_one_call_per_window_would_read_launch_latency(gpu):
    """The old method (one call per event pair, idle GPU before it) reads launch + kernel time:
    a 2 µs kernel behind a 10 µs launch reads 12 µs. This is what the new method must avoid."""
    stream = gpu.current_stream("cuda")
    assert timing._window(_kernel(gpu, 2e-6), stream) == pytest.approx(12e-6)


def test_back_to_back_calls_amortise_launch_latency(gpu):
    """A kernel longer than a launch: N back-to-back calls per event pair read the kernel's time."""
    t = measure(_kernel(gpu, 20e-6), device="cuda", warmup=1, repeats=5, min_time_s=0)
    assert t.median_s == pytest.approx(20e-6, rel=0.02)            # one launch in 50+ calls
    assert t.calls_per_repeat * 20e-6 >= timing.WINDOW_S          # the window spans >= 1 ms
    assert "back-to-back" in t.method and t.cache == "warm" and t.n >= 5


def test_calls_per_window_grow_until_the_window_is_long_enough(gpu):
    stream = gpu.current_stream("cuda")
    for kernel_s in (1e-6, 30e-6, 5e-3):
        n = timing._calls_per_window(_kernel(gpu, kernel_s), stream, 1e-3)
        took = timing._window(timing._repeat(_kernel(gpu, kernel_s), n), stream)
        assert took >= 1e-3 and (n == 1 or took < 4e-3), (kernel_s, n, took)


def test_kernels_shorter_than_a_launch_read_the_launch_rate_eagerly_and_their_own_time_in_a_graph(gpu):
    """Eager back-to-back calls of a 1 µs kernel are launch-bound (10 µs each: what eager PyTorch
    really gets); replayed from a CUDA graph they run at the kernel's own 1 µs."""
    eager = measure(_kernel(gpu, 1e-6), device="cuda", warmup=1, repeats=3, min_time_s=0)
    graphed = measure(_kernel(gpu, 1e-6), device="cuda", warmup=1, repeats=3, min_time_s=0, graph=True)
    assert eager.median_s == pytest.approx(10e-6, rel=0.02)
    assert graphed.median_s == pytest.approx(1e-6, rel=0.1) and "CUDA graph" in graphed.method


def test_events_go_on_the_timed_devices_current_stream(gpu):
    """Tensors on cuda:1 while cuda:0 is current: the events must be on cuda:1's stream."""
    gpu.current = gpu.current_stream("cuda:0")                 # the process's current device
    one = gpu.current_stream("cuda:1")

    def on_device_1():
        with gpu.stream(one):
            gpu.run_kernel(50e-6)
    gpu.asked_for.clear()
    measure(on_device_1, device="cuda:1", warmup=0, repeats=2, min_time_s=0)
    assert gpu.asked_for == [torch.device("cuda:1")]
    assert "event" in one.log and "event" not in gpu.streams["cuda:0"].log


def test_cold_calls_flush_l2_before_every_call_outside_the_window(gpu, monkeypatch):
    """flush_l2: each event pair holds exactly one call, each preceded by a flush kernel that
    the window does not include; the flush also hides the call's launch latency."""
    flushes = []

    def fake_flush(dev):
        assert timing.l2_bytes(dev) == 50 << 20
        return lambda: (flushes.append(1), gpu.run_kernel(40e-6, name="flush"))
    monkeypatch.setattr(timing, "_l2_flush", fake_flush)
    t = measure(_kernel(gpu, 3e-6), device="cuda", warmup=2, repeats=6, min_time_s=0, flush_l2=True)
    assert t.median_s == pytest.approx(3e-6, rel=0.01)           # not 13 µs, not 43 µs
    assert t.cache == "l2 flushed" and t.calls_per_repeat == 1 and len(flushes) == t.n
    # after the warm-up, the stream holds (flush, event, kernel, event) again and again
    log = gpu.streams["cuda"].log
    body = log[log.index("flush"):]
    assert body == ["flush", "event", "kernel", "event"] * t.n


def test_compare_passes_the_cache_mode_and_keeps_the_method(gpu):
    res = compare({"a": _kernel(gpu, 20e-6), "b": _kernel(gpu, 40e-6)}, device="cuda", warmup=1, rounds=2,
                  repeats=3, min_time_s=0)
    assert res["b"].median_s / res["a"].median_s == pytest.approx(2.0, rel=0.02)
    assert all(t.n == 6 and "back-to-back" in t.method for t in res.values())


# --- CPU: the timer's blocks ----------------------------------------------------------------------

class FakeTimer:
    """Stands in for torch.utils.benchmark.Timer: each blocked_autorange returns 3 blocks."""

    def __init__(self, per_call):
        self.per_call, self.calls = per_call, 0

    def blocked_autorange(self, min_run_time):
        self.calls += 1
        return SimpleNamespace(times=list(self.per_call), number_per_run=100)


def test_cpu_blocks_are_pooled_until_enough_repeats():
    timer = FakeTimer([1e-3, 2e-3, 3e-3])
    calls = []
    t = timing._measure_cpu(lambda: calls.append(1), repeats=7, min_time_s=0.0, warmup=2,
                            make_timer=lambda fn: timer)
    assert len(calls) == 2 and timer.calls == 3 and t.n == 9      # 3 blocks each, until >= 7
    assert t.median_s == 2e-3 and t.calls_per_repeat == 100 and "threads" in t.method


def test_cpu_measure_uses_every_thread(monkeypatch):
    seen = {}

    class Spy(FakeTimer):
        def __init__(self, stmt, globals, num_threads):
            super().__init__([1e-3])
            seen["threads"] = num_threads
    monkeypatch.setattr("torch.utils.benchmark.Timer", Spy)
    measure(lambda: None, repeats=1, min_time_s=0, warmup=0)
    assert seen["threads"] == torch.get_num_threads()


# --- statistics and bad input ---------------------------------------------------------------------

def test_timing_stats():
    t = Timing.from_times([1.0, 2.0, 3.0, 4.0, 100.0])
    assert t.median_s == 3.0 and t.iqr_s == pytest.approx(4.0 - 2.0)     # the repeats' own quartiles
    assert Timing.from_times([1.0, 1.0, 1.0, 1.0, 2.0]).iqr_s == 0.0       # one slow repeat of five: no spread
    assert Timing.from_times([1.0, 3.0]).iqr_s == pytest.approx(1.0)      # two: half their range
    assert Timing.from_times([2.0]).iqr_s == 0.0
    with pytest.raises(ValueError):
        Timing.from_times([])


def test_bad_input():
    with pytest.raises(TypeError, match="callable"):
        measure(42)
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        measure(lambda: None, device="meta")
    with pytest.raises(ValueError):
        measure(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="window_s"):
        measure(lambda: None, window_s=0)
    for bad in (True, "0.001", None):
        with pytest.raises(TypeError, match="window_s"):
            measure(lambda: None, window_s=bad)
    with pytest.raises(ValueError, match="last-level cache"):
        measure(lambda: None, flush_l2=True)
    with pytest.raises(ValueError):
        compare({})


def test_rel_spread_is_the_iqr_over_the_median():
    assert Timing(2e-3, 0.5e-3, []).rel_spread == pytest.approx(0.25)
    assert Timing.from_times([1.0, 1.0, 1.0, 1.0]).rel_spread == 0.0
    assert Timing(0.0, 0.0, []).rel_spread == float("inf")       # no time at all: no spread to trust


@pytest.fixture(autouse=True)
def _many_cores(monkeypatch):
    """The share tests below do not depend on this machine's core count (one test sets its own)."""
    monkeypatch.setattr(timing, "usable_cores", lambda: 64)


class FakeThreads:
    """Stands in for Linux's per-thread schedstat: ``(ns on a core, ns waiting for one)`` per
    thread; ``advance`` adds what happened during a block, ``None`` reads as "no schedstat here"."""

    def __init__(self, *threads):
        self.now = {tid: (0, 0) for tid in threads} or None

    def advance(self, **ms):
        for tid, (run, wait) in ms.items():
            r0, w0 = self.now.get(tid, (0, 0))
            self.now[tid] = (r0 + int(run * 1e6), w0 + int(wait * 1e6))

    def __call__(self):
        return None if self.now is None else dict(self.now)


def _block(share, threads, wall_ms, cpu_ms, monkeypatch, **ms):
    """One ``with share:`` block that took ``wall_ms``, with ``cpu_ms`` of process CPU time and the
    threads' ``(run, wait)`` in ms, on a fake clock."""
    clock = {"wall": 0.0, "cpu": 0.0}
    fake_time = SimpleNamespace(perf_counter=lambda: clock["wall"], process_time=lambda: clock["cpu"])
    with monkeypatch.context() as m:
        m.setattr(timing, "time", fake_time)
        m.setattr(timing, "_thread_times", threads)
        with share:
            clock["wall"] += wall_ms / 1e3
            clock["cpu"] += cpu_ms / 1e3
            if threads.now is not None:
                threads.advance(**ms)


def test_one_busy_thread_of_several_reads_quiet(monkeypatch):
    """An op that keeps one of torch's threads busy and leaves the others asleep (bf16 matmul on a
    CPU without bf16 units, an op too small to split) on a quiet machine: nothing waited for a core.
    CPU time over wall × threads would read it 1/threads, a false "busy" on a quiet 8-core laptop."""
    threads = FakeThreads("main", "w1", "w2", "w3", "w4", "w5", "w6", "w7")
    share = timing.CpuShare(8)
    _block(share, threads, 20, 20, monkeypatch, main=(20, 0))
    assert share.value == pytest.approx(1.0)
    assert busy({"bf16": Timing(1e-3, 0.0, [], cpu_share=share.value)}) is None


def test_threads_that_wait_for_a_core_read_busy(monkeypatch):
    """Two threads that take turns on one core (a neighbour holds the other): each waits as long
    as it runs. Three-quarters waiting: the verdict refuses."""
    threads = FakeThreads("main", "w1")
    share = timing.CpuShare(2)
    _block(share, threads, 20, 20, monkeypatch, main=(10, 10), w1=(10, 10))
    assert share.value == pytest.approx(0.5)
    _block(share, threads, 40, 20, monkeypatch, main=(5, 35), w1=(15, 25))  # the blocks add up
    assert (share.run_s, share.wait_s) == (pytest.approx(0.04), pytest.approx(0.08))
    assert share.value == pytest.approx(1 / 3)
    stalled = busy({"2 threads": Timing(1e-3, 0.0, [], cpu_share=share.value)})
    assert stalled is not None and stalled.kind == "cpu share"


def test_without_per_thread_times_one_threads_worth_is_the_share(monkeypatch):
    """No schedstat (macOS, Windows): CPU time over wall time, at most 1 — never busy when one
    thread ran throughout, and a process that ran a quarter of the time reads a quarter."""
    none = FakeThreads()
    share = timing.CpuShare(4)
    _block(share, none, 20, 20, monkeypatch)
    assert share.value == pytest.approx(1.0) and not share.per_thread
    share = timing.CpuShare(4)
    _block(share, none, 20, 70, monkeypatch)                 # 4 threads' worth of CPU: capped at 1
    assert share.value == 1.0
    _block(share, none, 180, 0, monkeypatch)                 # then 180 ms with nothing running
    assert share.value == pytest.approx(70 / 200)


def test_cpu_share_on_this_machine():
    """The real readings (no claim about their size: the machine may be busy)."""
    import time as _time

    share = timing.CpuShare(2)
    assert share.value is None                                   # nothing measured yet
    with share:
        end = _time.perf_counter() + 0.02
        while _time.perf_counter() < end:                        # one thread busy
            pass
    assert 0.0 < share.value <= 1.0 and share.wall_s >= 0.02
    if share.per_thread:                                          # Linux: the thread ran or waited throughout
        assert share.run_s + share.wait_s >= 0.015
        before = share.run_s
        with share:
            _time.sleep(0.02)                                     # asleep: neither running nor waiting
        assert share.run_s - before < 0.01
    with pytest.raises(ValueError, match="threads"):
        timing.CpuShare(0)


def test_cpu_timings_record_the_share_and_compare_pools_it():
    calls = []
    t = timing._measure_cpu(lambda: calls.append(1), repeats=3, min_time_s=0.0, warmup=0,
                            make_timer=lambda fn: FakeTimer([1e-3]))
    assert t.cpu_share is None                     # a fake timer takes no time: nothing to say
    x = torch.randn(64, 64)
    got = compare({"mm": lambda: x @ x}, rounds=2, repeats=2, min_time_s=0.005)["mm"]
    assert got.cpu_share is not None and 0.0 < got.cpu_share <= 1.0


def test_more_threads_than_usable_cores_take_turns_and_read_quiet(monkeypatch):
    """8 torch threads on 2 usable cores (a container's quota, an affinity mask): on a quiet machine
    they run a quarter of their ready time, which is all they can get, and read 1; the same
    threads getting half of that read 0.5; on 8 usable cores, a quarter is busy."""
    def share_of(cores, run, wait):
        monkeypatch.setattr(timing, "usable_cores", lambda: cores)
        share = timing.CpuShare(8)
        _block(share, FakeThreads("main"), 100, 100, monkeypatch, main=(run, wait))
        return share.value

    assert share_of(2, 25, 75) == pytest.approx(1.0)
    assert share_of(2, 25, 175) == pytest.approx(0.5)
    assert share_of(8, 25, 75) == pytest.approx(0.25)
