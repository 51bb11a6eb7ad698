"""How much does ``amp_edu.autocast`` (Python, a TorchFunctionMode) cost next to ``torch.autocast`` (C++)?

Our autocast runs a little Python for every torch call in the region: look the op up, check the
arguments, maybe cast. That cost is per *call*, not per FLOP, so it disappears behind big matmuls
and shows on a small model where every op is tiny. We time one training step (forward in the
region, loss, backward outside) of two MLPs, under each autocast, side by side in one run
(:func:`amp_edu.measure.timing.compare`), and report ``ours / torch`` per model, with the verdict
of :func:`amp_edu.measure.verdict.speed_verdict` (none when the repeats say the machine was busy):

* ``matmul-bound``: width 1024, batch 256 by default (milliseconds of matmul per layer);
* ``overhead-bound``: width 32, batch 8 (microseconds per op: Python overhead dominates; on a
  CPU timed on one thread, since its ops are too small to split and thread synchronisation on a
  shared machine would swamp the difference).

``python -m amp_edu.bench.autocast_overhead [--quick] [--width W --batch B] [--models overhead-bound]``
prints the table. On a CPU without bf16 units (no AVX512_BF16/AMX) a bf16 matmul runs at about
1 GFLOP/s, so one width-1024 step takes seconds there and the full run minutes; the lesson uses a
smaller matmul-bound MLP on such machines (still over 95% matmul time).

Predicting the matmul-bound ratio (:func:`predicted_ratio`). Both MLPs make the same torch calls,
so our extra Python per step is the same on both; the small model measures it. What it costs the
big model depends on where the Python runs relative to the work:

* **CPU**: one thread runs the Python and then the kernels, one after the other, so the extra
  time simply adds: ``1 + extra / step``.
* **GPU**: the host only *issues* kernels; the GPU runs them later, asynchronously. While the GPU
  is busy with earlier kernels the host runs ahead, so extra host time is hidden until the host
  becomes the bottleneck: ``step_ours ~ max(device time, host time + extra)``. We measure the host
  time of torch's step (the time to issue it, without waiting for the GPU) and predict
  ``max(step, host + extra) / step``: exactly 1 for a GPU-bound step, approaching the CPU formula
  when the host was already the bottleneck.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .. import models
from ..autocast import autocast
from ..device import num_threads, pick_device
from ..measure.timing import Timing, compare
from ..measure.verdict import Verdict, speed_verdict
from ..validate import check_int

__all__ = ["Result", "MODELS", "mlp", "run", "table", "predicted_ratio", "main"]

MODELS = ("matmul-bound", "overhead-bound")


@dataclass
class Result:
    """Median step times (s) under each autocast, their spread, the host time of torch's step, and
    (CPU) the share of the time the timed threads ran on a core."""

    model: str
    width: int
    batch: int
    torch_s: float
    ours_s: float
    torch_iqr_s: float
    ours_iqr_s: float
    torch_best_s: float = float("nan")
    ours_best_s: float = float("nan")
    device: str = "cpu"
    torch_host_s: float = float("nan")   # time to *issue* torch's step (CUDA); the step itself on a CPU
    torch_cpu_share: float | None = None
    ours_cpu_share: float | None = None

    @property
    def ratio(self) -> float:
        """Ratio of the medians, ours / torch."""
        return self.ours_s / self.torch_s

    @property
    def verdict(self) -> Verdict:
        """Ours against torch's (:func:`amp_edu.measure.verdict.speed_verdict` on the medians and
        IQRs): "faster"/"slower" beyond the spread, no verdict when the machine was busy."""
        return speed_verdict(Timing(self.ours_s, self.ours_iqr_s, [], cpu_share=self.ours_cpu_share),
                             Timing(self.torch_s, self.torch_iqr_s, [], cpu_share=self.torch_cpu_share))

    @property
    def best_ratio(self) -> float:
        """Ratio of the fastest repeats: noise on a busy machine only ever adds time, so the
        fastest repeats are the cleanest view of the intrinsic cost."""
        return self.ours_best_s / self.torch_best_s


def mlp(width: int, depth: int = 4, classes: int = 10) -> torch.nn.Sequential:
    """``depth`` Linear+GELU blocks of ``width``, then a classifier head (:func:`amp_edu.models.mlp`;
    weights from torch's global RNG, which :func:`run` seeds)."""
    return models.mlp([width] * (depth + 1) + [classes], activation=torch.nn.GELU)


def _step(model, x, y, region):
    def step():
        with region():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        model.zero_grad(set_to_none=True)
    return step


def _host_time(step, dev: torch.device, n: int = 5) -> float:
    """Median time to issue ``step`` on ``dev`` without waiting for the GPU (CUDA only)."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize(dev)
    return statistics.median(times)


def run(*, width: int = 1024, batch: int = 256, quick: bool = False, device=None,
        dtype: torch.dtype | None = None, models: tuple[str, ...] = MODELS,
        ours: Callable | None = None) -> list[Result]:
    """Time the matmul-bound MLP (``width`` x ``batch``) and the small one under ``torch.autocast``
    and ``amp_edu.autocast``, side by side; one Result per model, in ``models`` order.

    ``ours`` replaces ``amp_edu.autocast`` by another region factory ``ours(device_type, dtype=...)``
    (the tests use it to check that the benchmark sees a known extra cost).
    """
    width, batch = check_int(width, "width", min=1), check_int(batch, "batch", min=1)
    bad = [m for m in models if m not in MODELS]
    if bad or not models:
        raise ValueError(f"models must be a non-empty tuple of {MODELS}, got {models!r}")
    dev = torch.device(device) if device is not None else pick_device()
    dtype = dtype or (torch.float16 if dev.type == "cuda" else torch.bfloat16)
    region = ours or autocast
    # the tiny model is cheap: give it more rounds, its difference is the per-step Python overhead
    configs = {"matmul-bound": (width, batch, (2, 2) if quick else (6, 2)),
               "overhead-bound": (32, 8, (2, 3) if quick else (7, 5))}
    torch.manual_seed(0)
    out = []
    for name in models:
        w, b, (rounds, repeats) = configs[name]
        model = mlp(w).to(dev)
        x = torch.randn(b, w, device=dev)
        y = torch.randint(0, 10, (b,), device=dev)
        # The tiny model's ops are too small to split across CPU threads; timing it on one thread
        # keeps thread-synchronisation noise of a shared machine out of a difference of microseconds.
        with num_threads(1 if name == "overhead-bound" and dev.type == "cpu" else None):
            steps = {"torch": _step(model, x, y, lambda: torch.autocast(dev.type, dtype=dtype)),
                     "ours": _step(model, x, y, lambda: region(dev.type, dtype=dtype))}
            times = compare(steps, device=dev, warmup=1, rounds=rounds, repeats=repeats, min_time_s=0.05)
            host = _host_time(steps["torch"], dev) if dev.type == "cuda" else times["torch"].median_s
        out.append(Result(name, w, b, times["torch"].median_s, times["ours"].median_s,
                          times["torch"].iqr_s, times["ours"].iqr_s,
                          min(times["torch"].times_s), min(times["ours"].times_s), dev.type, host,
                          times["torch"].cpu_share, times["ours"].cpu_share))
    return out


def _pair(results: list[Result]) -> tuple[Result, Result]:
    by = {r.model: r for r in results}
    if set(by) != set(MODELS):
        raise ValueError(f"predicted_ratio needs one result for each of {MODELS}, got {sorted(by)}")
    return by["matmul-bound"], by["overhead-bound"]


def predicted_ratio(results: list[Result]) -> float:
    """The matmul-bound ratio predicted from the small model's extra Python per step (fastest
    repeats), by the CPU or the GPU model of the module docstring; far less noisy than timing two
    long steps on a busy machine."""
    big, small = _pair(results)
    extra = max(small.ours_best_s - small.torch_best_s, 0.0)
    step = big.torch_best_s
    if big.device == "cuda":
        return max(step, big.torch_host_s + extra) / step
    return 1.0 + extra / step


def table(results: list[Result]) -> str:
    """The results as a table: medians and IQRs, the ratios, and the verdict word of each model
    (ours against torch's; ``no verdict`` when its repeats say the machine was busy, and then a
    line below saying why)."""
    lines = [f"{'model':15s} {'width':>5s} {'batch':>5s} {'torch.autocast: median (IQR)':>30s} "
             f"{'amp_edu.autocast: median (IQR)':>32s} {'ratio':>6s} {'fastest':>8s}  verdict on ours"]
    for r in results:
        lines.append(f"{r.model:15s} {r.width:5d} {r.batch:5d} {r.torch_s * 1e3:17.2f} ms ({r.torch_iqr_s * 1e3:7.2f}) "
                     f"{r.ours_s * 1e3:19.2f} ms ({r.ours_iqr_s * 1e3:7.2f}) {r.ratio:5.2f}x {r.best_ratio:7.2f}x  "
                     f"{r.verdict.word}")
    for r in results:
        if not r.verdict.concluded:
            lines.append(f"{r.model}: " + r.verdict.sentence("amp_edu.autocast", "torch.autocast"))
    if {r.model for r in results} == set(MODELS):
        big, small = _pair(results)
        how = ("GPU: hidden while the host is ahead of the kernels" if big.device == "cuda"
               else "CPU: adds to the step")
        lines.append(f"extra Python per step (small model, fastest repeats): "
                     f"{(small.ours_best_s - small.torch_best_s) * 1e3:.2f} ms -> predicted matmul-bound ratio "
                     f"{predicted_ratio(results):.3f}x ({how})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m amp_edu.bench.autocast_overhead", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--width", type=int, default=1024, help="width of the matmul-bound MLP (1024)")
    ap.add_argument("--batch", type=int, default=256, help="batch of the matmul-bound MLP (256)")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="which MLPs to time")
    args = ap.parse_args(argv)
    print(table(run(width=args.width, batch=args.batch, quick=args.quick, models=tuple(args.models))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
