"""How the course times code: one primitive, :func:`measure`, used by every benchmark.

Timing GPU code naively measures the *launch*, not the work: kernels run asynchronously. And a
first call pays for allocation, autotuning and lazy initialisation. So:

* warm up first (``warmup`` calls, untimed);
* on CUDA, time each repeat with CUDA events (``torch.cuda.Event(enable_timing=True)``) and
  synchronise before reading them;
* on the CPU, use ``torch.utils.benchmark.Timer`` with ``num_threads=torch.get_num_threads()``
  (it defaults to *one* thread, which silently understates what the CPU can do);
* report the **median** and the **interquartile range** of many repeats: the median ignores the
  odd slow repeat (a context switch, a clock change), the IQR says how noisy the machine was.

Compare two variants *side by side in one run* (:func:`compare`): alternating them cancels much of
the drift that makes two separate runs on a shared machine disagree.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

__all__ = ["Timing", "measure", "compare"]


@dataclass
class Timing:
    """Repeat times of one benchmark (seconds per call)."""

    median_s: float
    iqr_s: float
    times_s: list[float] = field(repr=False)

    @property
    def n(self) -> int:
        return len(self.times_s)

    @classmethod
    def from_times(cls, times: list[float]) -> "Timing":
        if not times:
            raise ValueError("no repeat times")
        ts = sorted(times)
        if len(ts) >= 4:
            q = statistics.quantiles(ts, n=4)
            iqr = q[2] - q[0]
        else:
            iqr = ts[-1] - ts[0]
        return cls(statistics.median(ts), iqr, list(times))


def _check(fn, device, warmup, repeats, min_time_s):
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if warmup < 0 or repeats < 1 or min_time_s < 0:
        raise ValueError("need warmup >= 0, repeats >= 1, min_time_s >= 0")
    return dev


def measure(fn: Callable[[], object], *, device="cpu", warmup: int = 3, repeats: int = 20,
            min_time_s: float = 0.2) -> Timing:
    """Time ``fn()`` on ``device``: median and IQR of at least ``repeats`` measurements.

    On the CPU each measurement is a block of calls chosen by ``Timer.blocked_autorange`` (so very
    short functions are timed in blocks, and the per-call time is reported); on CUDA each repeat is
    one call between two CUDA events. Keeps going until ``min_time_s`` has been spent timing.
    """
    dev = _check(fn, device, warmup, repeats, min_time_s)
    for _ in range(warmup):
        fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        times: list[float] = []
        t_start = time.perf_counter()
        while len(times) < repeats or time.perf_counter() - t_start < min_time_s:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
            if len(times) >= 10 * repeats:
                break
        return Timing.from_times(times)

    from torch.utils.benchmark import Timer

    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    times = []
    t_start = time.perf_counter()
    while len(times) < repeats:
        # each blocked_autorange gives several block timings; pool them until we have enough
        m = timer.blocked_autorange(min_run_time=max(min_time_s / repeats, 1e-3))
        times.extend(m.times)
        if time.perf_counter() - t_start > 60 * max(min_time_s, 0.5):
            break
    return Timing.from_times(times)


def compare(fns: dict[str, Callable[[], object]], *, device="cpu", warmup: int = 3, rounds: int = 5,
            repeats: int = 10, min_time_s: float = 0.1) -> dict[str, Timing]:
    """Time several variants side by side: ``rounds`` rounds, each timing every variant in turn.

    Interleaving cancels slow drift of a shared machine; the per-variant times of all rounds are
    pooled before taking the median and IQR. Use this for every *ratio* the course reports.
    """
    if not fns:
        raise ValueError("fns must name at least one function")
    pooled: dict[str, list[float]] = {k: [] for k in fns}
    for k, fn in fns.items():
        _check(fn, device, warmup, repeats, min_time_s)
        for _ in range(warmup):
            fn()
    for _ in range(rounds):
        for k, fn in fns.items():
            pooled[k].extend(measure(fn, device=device, warmup=0, repeats=repeats,
                                     min_time_s=min_time_s).times_s)
    return {k: Timing.from_times(v) for k, v in pooled.items()}
