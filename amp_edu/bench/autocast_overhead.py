"""How much does ``amp_edu.autocast`` (Python, a TorchFunctionMode) cost next to ``torch.autocast`` (C++)?

Our autocast runs a little Python for every torch call in the region: look the op up, check the
arguments, maybe cast. That cost is per *call*, not per FLOP, so it disappears behind big matmuls
and shows on a small model where every op is tiny. We time one training step (forward in the
region, loss, backward outside) of two MLPs, under each autocast, side by side in one run
(:func:`amp_edu.bench.timing.compare`), and report ``ours / torch`` per model:

* ``matmul-bound``: width 1024, batch 256 by default (milliseconds of matmul per layer);
* ``overhead-bound``: width 32, batch 8 (microseconds per op: Python overhead dominates; on a
  CPU timed on one thread, since its ops are too small to split and thread synchronisation on a
  shared machine would swamp the difference).

``python -m amp_edu.bench.autocast_overhead [--quick] [--width W --batch B]`` prints the table.
On a CPU without bf16 units (no AVX512_BF16/AMX) a bf16 matmul runs at about 1 GFLOP/s, so one
width-1024 step takes seconds there and the full run minutes; the lesson uses a smaller
matmul-bound MLP on such machines (still over 95% matmul time).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch

from ..autocast import autocast
from ..device import pick_device
from .timing import compare

__all__ = ["Result", "mlp", "run", "table", "predicted_ratio", "main"]


@dataclass
class Result:
    """Median step times (s) under each autocast, and their ratio ours/torch."""

    model: str
    width: int
    batch: int
    torch_s: float
    ours_s: float
    torch_iqr_s: float
    ours_iqr_s: float
    torch_best_s: float = float("nan")
    ours_best_s: float = float("nan")

    @property
    def ratio(self) -> float:
        """Ratio of the medians."""
        return self.ours_s / self.torch_s

    @property
    def best_ratio(self) -> float:
        """Ratio of the fastest repeats: noise on a busy machine only ever adds time, so the
        fastest repeats are the cleanest view of the intrinsic cost."""
        return self.ours_best_s / self.torch_best_s


def mlp(width: int, depth: int = 4, classes: int = 10) -> torch.nn.Sequential:
    """``depth`` Linear+GELU blocks of ``width``, then a classifier head."""
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    layers.append(torch.nn.Linear(width, classes))
    return torch.nn.Sequential(*layers)


def _step(model, x, y, region):
    def step():
        with region():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        model.zero_grad(set_to_none=True)
    return step


def run(*, width: int = 1024, batch: int = 256, quick: bool = False, device=None,
        dtype: torch.dtype | None = None) -> list[Result]:
    """Time the matmul-bound MLP (``width`` x ``batch``) and the small one under ``torch.autocast``
    and ``amp_edu.autocast``, side by side; one Result per model."""
    if width < 1 or batch < 1:
        raise ValueError(f"width and batch must be positive, got {width}, {batch}")
    dev = torch.device(device) if device is not None else pick_device()
    dtype = dtype or (torch.float16 if dev.type == "cuda" else torch.bfloat16)
    # the tiny model is cheap: give it more rounds, its difference is the per-step Python overhead
    configs = [("matmul-bound", width, batch, (2, 2) if quick else (6, 2)),
               ("overhead-bound", 32, 8, (2, 3) if quick else (7, 5))]
    torch.manual_seed(0)
    out = []
    for name, width, batch, (rounds, repeats) in configs:
        model = mlp(width).to(dev)
        x = torch.randn(batch, width, device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)
        # The tiny model's ops are too small to split across CPU threads; timing it on one thread
        # keeps thread-synchronisation noise of a shared machine out of a difference of microseconds.
        threads = torch.get_num_threads()
        if name == "overhead-bound" and dev.type == "cpu":
            torch.set_num_threads(1)
        try:
            times = compare({
                "torch": _step(model, x, y, lambda: torch.autocast(dev.type, dtype=dtype)),
                "ours": _step(model, x, y, lambda: autocast(dev.type, dtype=dtype)),
            }, device=dev, warmup=1, rounds=rounds, repeats=repeats, min_time_s=0.05)
        finally:
            torch.set_num_threads(threads)
        out.append(Result(name, width, batch, times["torch"].median_s, times["ours"].median_s,
                          times["torch"].iqr_s, times["ours"].iqr_s,
                          min(times["torch"].times_s), min(times["ours"].times_s)))
    return out


def predicted_ratio(results: list[Result]) -> float:
    """The matmul-bound ratio predicted from the small model: both MLPs make the same torch calls,
    so our extra Python per step (ours - torch on the small one) is the same on both; dividing it
    by the big model's step time is far less noisy than timing two long steps on a busy machine."""
    big, small = results
    return 1.0 + max(small.ours_best_s - small.torch_best_s, 0.0) / big.torch_best_s


def table(results: list[Result]) -> str:
    lines = [f"{'model':15s} {'width':>5s} {'batch':>5s} {'torch.autocast: median (IQR)':>30s} "
             f"{'amp_edu.autocast: median (IQR)':>32s} {'ratio':>6s} {'fastest':>8s}"]
    for r in results:
        lines.append(f"{r.model:15s} {r.width:5d} {r.batch:5d} {r.torch_s * 1e3:17.2f} ms ({r.torch_iqr_s * 1e3:7.2f}) "
                     f"{r.ours_s * 1e3:19.2f} ms ({r.ours_iqr_s * 1e3:7.2f}) {r.ratio:5.2f}x {r.best_ratio:7.2f}x")
    big, small = results
    lines.append(f"extra Python per step (small model, fastest repeats): "
                 f"{(small.ours_best_s - small.torch_best_s) * 1e3:.2f} ms -> predicted matmul-bound ratio "
                 f"{predicted_ratio(results):.3f}x")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m amp_edu.bench.autocast_overhead", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--width", type=int, default=1024, help="width of the matmul-bound MLP (1024)")
    ap.add_argument("--batch", type=int, default=256, help="batch of the matmul-bound MLP (256)")
    args = ap.parse_args(argv)
    print(table(run(width=args.width, batch=args.batch, quick=args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
