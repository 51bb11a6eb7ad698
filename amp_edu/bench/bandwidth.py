"""Memory bandwidth, measured: how fast this device streams bytes, the roofline's slope.

A copy ``dst.copy_(src)`` of a buffer much larger than the caches reads ``nbytes`` and writes
``nbytes``: bandwidth = ``2·nbytes / time``. It is what a memory-bound matmul (a skinny one) can at
best go at, and the slope of the roofline (:mod:`amp_edu.bench.roofline`).
"""

from __future__ import annotations

import torch

from ..validate import check_int
from ..measure.timing import measure

__all__ = ["copy_bandwidth"]


def copy_bandwidth(nbytes: int, *, device="cpu", repeats: int = 10, min_time_s: float = 0.1) -> dict:
    """Time copying ``nbytes`` bytes (float32, random) on ``device``; returns GB/s with the timing."""
    nbytes = check_int(nbytes, "nbytes", min=4)
    dev = torch.device(device)
    src = torch.rand(nbytes // 4, device=dev)
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src), device=dev, warmup=2, repeats=repeats, min_time_s=min_time_s)
    moved = 2 * src.numel() * 4
    return {"bytes": moved, "median_s": t.median_s, "iqr_s": t.iqr_s, "n_repeats": t.n,
            "gb_per_s": moved / t.median_s / 1e9}
