"""How the course times code: one primitive, :func:`measure`, used by every benchmark and lesson.

Timing GPU code naively measures the *launch*, not the work: kernels run asynchronously, and a
first call pays for allocation, autotuning and lazy initialisation. So:

* warm up first (``warmup`` calls, untimed);
* on CUDA, put **many back-to-back calls between one pair of CUDA events**, recorded on the
  current stream *of the device being timed*, and divide by the number of calls. One call per
  event pair with the GPU idle before it would put the CPU's launch cost (Python, the dispatcher,
  the driver: 5-20 µs) inside the window, and a small matmul would read several times slower
  than it runs. :func:`measure` doubles the number of calls until the window spans at least
  ``window_s`` (1 ms: ~100 launches' worth), so launch latency is amortised and only the GPU's
  time per call is left. (``graph=True`` captures those calls in a CUDA graph and replays it:
  then even kernels shorter than a launch are timed at their own speed.)
* a GPU's L2 cache (50 MB on an H100/H200) holds small operands between calls, so back-to-back
  calls run *warm*. Where a result is compared with a DRAM roofline, time it *cold*:
  ``flush_l2=True`` overwrites a buffer twice the L2 before each call (outside the window; the
  flush keeps the GPU busy while the call is launched, so the launch is hidden behind it) -- or
  use operands larger than the L2. Each :class:`Timing` records which (``cache``);
* on the CPU, use ``torch.utils.benchmark.Timer`` with ``num_threads=torch.get_num_threads()``
  (it defaults to *one* thread, which silently understates what the CPU can do); its blocks of
  calls play the role of the event pair's N calls;
* report the **median** and the **interquartile range** of many repeats: the median ignores the
  odd slow repeat (a context switch, a clock change), the IQR says how noisy the machine was;
* on the CPU, also record how much of the time the timed threads actually ran on a core
  (:class:`CpuShare`: of the time this process's threads were ready to run, the share they ran).
  Other processes that hold the cores can slow *every* repeat alike — a multi-threaded matmul
  whose second thread waits for a core finishes when that thread does — and then the repeats
  agree with each other and the IQR looks quiet; the share does not.

Compare two variants *side by side in one run* (:func:`compare`): alternating them cancels much of
the drift that makes two separate runs on a shared machine disagree.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..validate import check_int, check_number
from .load import usable_cores

__all__ = ["Timing", "CpuShare", "measure", "compare", "l2_bytes", "WINDOW_S"]

WINDOW_S = 1e-3           # a CUDA event pair spans at least this: ~100 kernel launches
_MAX_CALLS = 1 << 16      # calls per event pair, at most
_cuda = torch.cuda        # the CUDA API measure() uses; tests substitute a simulated GPU


@dataclass
class Timing:
    """Repeat times of one benchmark (seconds per call), and how they were taken.

    ``calls_per_repeat``: calls averaged in each repeat (N calls between one event pair, or the
    CPU timer's block); ``method``: the timer, in words; ``cache``: ``"warm"`` (operands may stay
    in cache between calls), ``"l2 flushed"`` (cold: the GPU L2 overwritten before every call) or
    ``None`` (not recorded); ``cpu_share``: on the CPU, of the time the process's threads were ready
    to run, the share they ran, against what a quiet machine gives that many threads
    (:class:`CpuShare`; ``None`` for a GPU timing or when not recorded).
    """

    median_s: float
    iqr_s: float
    times_s: list[float] = field(repr=False)
    calls_per_repeat: int = 1
    method: str = ""
    cache: str | None = None
    cpu_share: float | None = None

    @property
    def n(self) -> int:
        return len(self.times_s)

    @property
    def rel_spread(self) -> float:
        """The spread of the repeats as a fraction of their median: ``iqr_s / median_s``. A quiet
        machine keeps it at a few percent; :mod:`amp_edu.measure.verdict` refuses to compare
        timings whose spread is much larger (the machine was busy while they were taken)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else float("inf")

    @classmethod
    def from_times(cls, times: list[float], **how) -> "Timing":
        if not times:
            raise ValueError("no repeat times")
        ts = sorted(times)
        # the quartiles of the repeats themselves ("inclusive"): the default "exclusive" method
        # extrapolates past the sample, so one slow repeat of five read as a 50% spread
        q = statistics.quantiles(ts, n=4, method="inclusive") if len(ts) >= 2 else (ts[0], ts[0], ts[0])
        iqr = q[2] - q[0]
        return cls(statistics.median(ts), iqr, list(times), **how)


def _thread_times() -> dict[str, tuple[int, int]] | None:
    """Per thread of this process: ``(ns it ran on a core, ns it waited for one)`` since it started,
    from Linux's ``/proc/self/task/<tid>/schedstat`` (its first two fields); ``None`` where there is
    none (macOS, Windows, a kernel built without scheduler statistics)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait = f.read().split()[:2]
        except (OSError, ValueError):       # a thread that ended meanwhile, or no schedstat at all
            continue
        out[tid] = (int(run), int(wait))
    return out or None


class CpuShare:
    """Of the time this process's threads were ready to run, the share they ran on a core, over
    the blocks run inside ``with share:`` (they add up)::

        share = CpuShare(torch.get_num_threads())
        with share:
            timer.blocked_autorange()
        share.value          # e.g. 0.99 on a quiet machine, 0.25 when others hold the cores

    A thread is *ready* when it runs or waits in the kernel's run queue for a core; a thread
    asleep (an OpenMP worker the op left idle, a thread waiting for I/O) is neither and does not
    count. So a quiet machine reads close to 1 whether the timed op keeps every thread busy (a large
    matmul; waiting OpenMP threads spin, which counts as running) or only one (bf16 matmul through
    torch's fallback loop on a CPU without bf16 units, ops too small to split): nothing waited for a
    core. Well below 1 means the threads waited for cores that other processes held.

    On Linux the two times come from the kernel, per thread (``/proc/self/task/<tid>/schedstat``:
    ``run_s`` and ``wait_s``). Elsewhere only the process's CPU time is known (``cpu_s``, from
    ``time.process_time``), and the value is ``cpu_s / wall_s`` (at most 1): the share of the time
    *one* thread's worth ran. That never reads a quiet machine as busy, but it misses a second
    thread that waits for a core while the first one runs. (Dividing by ``wall × threads`` instead
    would read an op that uses one of 8 threads as 1/8, on a quiet machine: busy, falsely.)
    ``threads``, the threads the timed code may use, sets what a quiet machine can give them: with
    more threads than usable cores (:func:`~amp_edu.measure.load.usable_cores`: affinity, and a
    container's CPU quota) they take turns among themselves, and at most ``cores / threads`` of their
    ready time is running; ``value`` is the share measured against that (at most 1), so torch's
    default of one thread per visible core in a 2-core container still reads close to 1 when quiet.
    ``value`` is ``None`` until at least a millisecond was measured: a shorter window says nothing.
    """

    def __init__(self, threads: int = 1):
        self.threads = check_int(threads, "threads", min=1)
        self.cpu_s = self.wall_s = 0.0
        self.run_s = self.wait_s = 0.0
        self.per_thread = True      # whether every block was read per thread (Linux's schedstat)
        self._start = None

    def __enter__(self) -> "CpuShare":
        self._start = (time.process_time(), time.perf_counter(), _thread_times())
        return self

    def __exit__(self, *exc) -> None:
        cpu0, wall0, threads0 = self._start
        threads1 = _thread_times()
        self.cpu_s += time.process_time() - cpu0
        self.wall_s += time.perf_counter() - wall0
        if threads0 is None or threads1 is None:
            self.per_thread = False
            return
        for tid, (run, wait) in threads1.items():   # a thread started inside the block counts from 0
            run0, wait0 = threads0.get(tid, (0, 0))
            self.run_s += (run - run0) / 1e9
            self.wait_s += (wait - wait0) / 1e9

    @property
    def value(self) -> float | None:
        if self.wall_s < 1e-3:
            return None
        if self.per_thread and self.run_s + self.wait_s > 0:
            # with more threads than usable cores, a quiet machine gives them cores/threads of it
            return min(1.0, self.run_s / (self.run_s + self.wait_s) / min(1.0, usable_cores() / self.threads))
        return min(1.0, self.cpu_s / self.wall_s)


def _check(fn, device, warmup, repeats, min_time_s):
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if warmup < 0 or repeats < 1 or min_time_s < 0:
        raise ValueError("need warmup >= 0, repeats >= 1, min_time_s >= 0")
    return dev


def l2_bytes(device) -> int | None:
    """The GPU's L2 cache size in bytes (``None`` for a CPU or when torch does not say)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    size = getattr(_cuda.get_device_properties(dev), "L2_cache_size", None)
    return int(size) if size else None


def measure(fn: Callable[[], object], *, device="cpu", warmup: int = 3, repeats: int = 20,
            min_time_s: float = 0.2, flush_l2: bool = False, window_s: float = WINDOW_S,
            graph: bool = False) -> Timing:
    """Time ``fn()`` on ``device``: median and IQR of at least ``repeats`` measurements.

    CPU: each measurement is a block of calls chosen by ``Timer.blocked_autorange``, reported per
    call. CUDA: each measurement is N back-to-back calls between two events on the device's
    current stream, N chosen so the window lasts ``window_s`` (``graph=True``: the N calls are
    replayed from a CUDA graph); with ``flush_l2=True`` each measurement is instead one call after
    an L2 flush. Keeps going until ``min_time_s`` has been spent timing.
    """
    dev = _check(fn, device, warmup, repeats, min_time_s)
    window_s = check_number(window_s, "window_s", positive=True, finite=False)
    if dev.type == "cuda":
        stream = _cuda.current_stream(dev)       # the timed tensors' device, not the current one
        flush = _l2_flush(dev) if flush_l2 else None
        return _measure_cuda(fn, stream, warmup=warmup, repeats=repeats, min_time_s=min_time_s,
                             window_s=window_s, flush=flush, graph=graph)
    if flush_l2:
        raise ValueError("flush_l2 applies to CUDA; a CPU's caches cannot be flushed between the "
                         "calls of a timer block: use operands larger than its last-level cache")
    return _measure_cpu(fn, repeats=repeats, min_time_s=min_time_s, warmup=warmup)


# --- CPU ------------------------------------------------------------------------------------------

def _timer(fn):
    from torch.utils.benchmark import Timer
    return Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())


def _measure_cpu(fn, *, repeats, min_time_s, warmup, make_timer=_timer) -> Timing:
    for _ in range(warmup):
        fn()
    timer = make_timer(fn)
    times: list[float] = []
    per_block = 1
    share = CpuShare(torch.get_num_threads())
    t_start = time.perf_counter()
    while len(times) < repeats:
        # each blocked_autorange gives several block timings (already per call); pool them
        with share:
            m = timer.blocked_autorange(min_run_time=max(min_time_s / repeats, 1e-3))
        times.extend(m.times)
        per_block = m.number_per_run
        if time.perf_counter() - t_start > 60 * max(min_time_s, 0.5):
            break
    return Timing.from_times(times, calls_per_repeat=per_block, cache="warm", cpu_share=share.value,
                             method=f"torch.utils.benchmark.Timer, {torch.get_num_threads()} threads, "
                                    f"blocks of {per_block} calls")


# --- CUDA -----------------------------------------------------------------------------------------

def _l2_flush(dev) -> Callable[[], None]:
    """A callable that overwrites twice the GPU's L2 (256 MiB when torch does not know the size)."""
    size = 2 * (l2_bytes(dev) or 128 << 20)
    buf = torch.empty(size // 4, dtype=torch.int32, device=dev)
    return buf.zero_


def _window(run, stream) -> float:
    """Seconds between two events recorded on ``stream`` around ``run()``."""
    start, end = _cuda.Event(enable_timing=True), _cuda.Event(enable_timing=True)
    start.record(stream)
    run()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _repeat(fn, n):
    def run():
        for _ in range(n):
            fn()
    return run


def _calls_per_window(fn, stream, window_s) -> int:
    """Double the calls until their event window lasts ``window_s`` (or the cap is reached)."""
    n = 1
    while n < _MAX_CALLS:
        took = _window(_repeat(fn, n), stream)
        if took >= window_s:
            break
        n = min(_MAX_CALLS, n * max(2, math.ceil(window_s / max(took, 1e-9))))
    return n


def _captured(fn, n, stream):
    """``n`` calls of ``fn`` captured once into a CUDA graph; returns its ``replay``."""
    side = _cuda.Stream(stream.device)
    side.wait_stream(stream)
    with _cuda.stream(side):                    # capture needs the code warmed on a side stream
        for _ in range(3):
            fn()
    stream.wait_stream(side)
    g = _cuda.CUDAGraph()
    with _cuda.graph(g):
        for _ in range(n):
            fn()

    def replay():
        with _cuda.stream(stream):              # on the timed stream, between its events
            g.replay()
    return replay


def _measure_cuda(fn, stream, *, warmup, repeats, min_time_s, window_s, flush, graph) -> Timing:
    for _ in range(warmup):
        fn()
    stream.synchronize()
    if flush is not None:
        return _measure_cold(fn, stream, repeats=repeats, min_time_s=min_time_s, flush=flush)
    n = _calls_per_window(fn, stream, window_s)
    run, how = _repeat(fn, n), f"{n} back-to-back calls per CUDA event pair"
    if graph:
        try:
            run, how = _captured(fn, n, stream), f"a CUDA graph of {n} calls per CUDA event pair"
        except RuntimeError as exc:             # an op that cannot be captured: time it eagerly
            how += f" (CUDA graph capture failed: {str(exc).splitlines()[0][:80]})"
    times: list[float] = []
    t_start = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - t_start < min_time_s:
        times.append(_window(run, stream) / n)
        if len(times) >= 10 * repeats:
            break
    return Timing.from_times(times, calls_per_repeat=n, method=how, cache="warm")


def _measure_cold(fn, stream, *, repeats, min_time_s, flush) -> Timing:
    """One call per event pair, each after an L2 flush. All pairs are queued before any is read,
    so the GPU never waits for the CPU: the flush kernel runs while the call is being launched."""
    times: list[float] = []
    t_start = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - t_start < min_time_s:
        pairs = []
        for _ in range(repeats):
            flush()
            start, end = _cuda.Event(enable_timing=True), _cuda.Event(enable_timing=True)
            start.record(stream)
            fn()
            end.record(stream)
            pairs.append((start, end))
        pairs[-1][1].synchronize()
        times += [s.elapsed_time(e) / 1e3 for s, e in pairs]
        if len(times) >= 10 * repeats:
            break
    return Timing.from_times(times, calls_per_repeat=1, cache="l2 flushed",
                             method="1 call per CUDA event pair, L2 flushed before each")


def compare(fns: dict[str, Callable[[], object]], *, device="cpu", warmup: int = 3, rounds: int = 5,
            repeats: int = 10, min_time_s: float = 0.1, flush_l2: bool = False) -> dict[str, Timing]:
    """Time several variants side by side: ``rounds`` rounds, each timing every variant in turn.

    Interleaving cancels slow drift of a shared machine; the per-variant times of all rounds are
    pooled before taking the median and IQR (and a CPU timing's ``cpu_share`` is the mean of its
    rounds'). Use this for every *ratio* the course reports.
    """
    if not fns:
        raise ValueError("fns must name at least one function")
    pooled: dict[str, list[float]] = {k: [] for k in fns}
    shares: dict[str, list[float]] = {k: [] for k in fns}
    how: dict[str, dict] = {}
    for k, fn in fns.items():
        _check(fn, device, warmup, repeats, min_time_s)
        for _ in range(warmup):
            fn()
    for _ in range(rounds):
        for k, fn in fns.items():
            t = measure(fn, device=device, warmup=0, repeats=repeats, min_time_s=min_time_s, flush_l2=flush_l2)
            pooled[k].extend(t.times_s)
            if t.cpu_share is not None:
                shares[k].append(t.cpu_share)
            how[k] = dict(calls_per_repeat=t.calls_per_repeat, method=t.method, cache=t.cache,
                          cpu_share=statistics.fmean(shares[k]) if shares[k] else None)
    return {k: Timing.from_times(v, **how[k]) for k, v in pooled.items()}
