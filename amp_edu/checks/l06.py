"""Graders for lesson 06 (Tensor Cores): arithmetic intensity and the roofline prediction.

The cases go beyond the lesson's example: every dtype's byte size (fp8 is 1 byte), skinny and
non-square shapes, and shapes chosen close to a device's ridge point so that a nearly-right
formula (mnk instead of 2mnk FLOPs, forgetting to write C, TFLOP/s against GB/s) lands on the
wrong side of the roofline — then shapes, dtypes and devices drawn from the seed. Every case is
plain numbers and a dtype: the generic plan :func:`amp_edu.plans.runner.each` calls the learner's
function on each.
"""

from __future__ import annotations

import math

import torch

from ..bench import roofline
from ..bench.peaks import KNOWN_GPUS
from ..plans.runner import each
from .core import Check, judge_each

__all__ = ["check_arithmetic_intensity", "check_predict_bound"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)


def _randint(g: torch.Generator, lo: int, hi: int) -> int:
    """An int in [lo, hi) drawn from ``g``."""
    return int(torch.randint(lo, hi, (1,), generator=g))


def _log_uniform_int(g: torch.Generator, lo: int, hi: int) -> int:
    """An int in [lo, hi], log-uniformly drawn from ``g``."""
    return max(lo, min(hi, round(math.exp(math.log(lo) + float(torch.rand(1, generator=g)) * math.log(hi / lo)))))


def _intensity_hint(case, expected, got):
    m, k, n, dtype = case
    size = dtype.itemsize
    flops = 2 * m * k * n
    wrong = {
        "count 2·m·k·n FLOPs: each term of a dot product is a multiply AND an add":
            (m * k * n) / ((m * k + k * n + m * n) * size),
        "the matmul also writes C (m×n elements): bytes = (m·k + k·n + m·n) · itemsize":
            flops / ((m * k + k * n) * size),
        **{f"bytes per element depend on the dtype: {dtype} has {size} (dtype.itemsize), not {w}":
           flops / ((m * k + k * n + m * n) * w) for w in (1, 2, 4) if w != size},
        "itemsize is in bytes, not bits": flops / ((m * k + k * n + m * n) * size * 8),
    }
    for hint, value in wrong.items():
        if type(got) in (int, float) and abs(got - value) <= 1e-9 * abs(value):
            return hint
    return "intensity = FLOPs / bytes = 2·m·k·n / ((m·k + k·n + m·n) · itemsize)"


_INTENSITY_CASES = [(1, 4096, 4096, torch.float32), (512, 64, 2048, torch.float8_e4m3fn),
                    (4096, 4096, 4096, torch.float16), (16, 8192, 8192, torch.bfloat16), (3, 5, 7, torch.float32),
                    (8192, 128, 8192, torch.float16), (1000, 1000, 1, torch.bfloat16),
                    (64, 64, 64, torch.float8_e4m3fn)]


def _drawn_shapes(seed: int, n: int = 8) -> list[tuple]:
    """``n`` matmuls drawn from ``seed``: m, k, n log-uniform in 1 .. 16384, any of the dtypes."""
    g = torch.Generator().manual_seed(seed)
    return [(_log_uniform_int(g, 1, 16384), _log_uniform_int(g, 1, 16384), _log_uniform_int(g, 1, 16384),
             _DTYPES[_randint(g, 0, len(_DTYPES))]) for _ in range(n)]


def _intensity_cases(seed: int) -> list[tuple]:
    return _INTENSITY_CASES + _drawn_shapes(seed)


def _same_intensity(got, expected) -> bool:
    return type(got) in (int, float) and math.isclose(float(got), expected, rel_tol=1e-9, abs_tol=0.0)


def _judge_intensity(cases, result) -> str:
    return judge_each("arithmetic_intensity", cases, result,
                      lambda m, k, n, dt: roofline.arithmetic_intensity(m, k, n, dt),
                      compare=_same_intensity, hint=_intensity_hint)


check_arithmetic_intensity = Check("arithmetic_intensity", cases=_intensity_cases, plan=each,
                                   judge=_judge_intensity, echo=True)
"""``fn(m, k, n, dtype)`` must return FLOP per byte of an (m×k)@(k×n) matmul stored in dtype."""


def _near_ridge_cases():
    """Square and skinny shapes whose intensity lies within 2× of each GPU's ridge point, both sides."""
    cases = []
    for name in ("H100 SXM", "A100 80GB", "T4"):
        gpu = KNOWN_GPUS[name]
        peak, bw = gpu.fp16, gpu.bandwidth_gbs
        ridge = roofline.ridge_point(peak, bw)
        for dtype in (torch.float16, torch.float32):
            size = dtype.itemsize
            # a square n³ matmul has intensity 2n/(3·size): pick n at 0.8× and 1.3× the ridge
            for f in (0.8, 1.3, 0.6, 1.8):
                n = max(8, int(f * ridge * 3 * size / 2))
                cases.append((n, n, n, dtype, peak, bw))
            # a skinny one: m rows against a large k = n
            for m in (int(0.8 * ridge * size), int(1.3 * ridge * size)):
                cases.append((max(1, m), 8192, 8192, dtype, peak, bw))
    # on the ridge itself: a 300³ fp16 matmul has intensity exactly 100 FLOP/byte; a device of
    # 100 TFLOP/s and 1000 GB/s has its ridge exactly there (compute-bound: not below the ridge);
    # a hair more peak puts the ridge just above (memory-bound); a ridge of 100.5 is not an integer
    cases += [(300, 300, 300, torch.float16, 100.0, 1000.0),
              (300, 300, 300, torch.float16, 100.0 + 3e-11, 1000.0),
              (300, 300, 300, torch.float16, 100.5, 1000.0)]
    return cases


def _drawn_near_ridge(seed: int, n: int = 8) -> list[tuple]:
    """``n`` cases drawn from ``seed``: a device of the table (its fp16 peak and bandwidth), a dtype,
    and a square or skinny matmul whose intensity lies within 2× of its ridge point, either side."""
    g = torch.Generator().manual_seed(seed)
    names = sorted(KNOWN_GPUS)
    cases = []
    for _ in range(n):
        gpu = KNOWN_GPUS[names[_randint(g, 0, len(names))]]
        peak, bw = gpu.fp16, gpu.bandwidth_gbs
        ridge = roofline.ridge_point(peak, bw)
        dtype = _DTYPES[_randint(g, 0, len(_DTYPES))]
        size = dtype.itemsize
        f = math.exp((float(torch.rand(1, generator=g)) * 2 - 1) * math.log(2.0))      # 0.5 .. 2
        if _randint(g, 0, 2):
            side = max(8, int(f * ridge * 3 * size / 2))
            cases.append((side, side, side, dtype, peak, bw))
        else:
            cases.append((max(1, int(f * ridge * size)), 8192, 8192, dtype, peak, bw))
    return cases


def _bound_cases(seed: int) -> list[tuple]:
    return _near_ridge_cases() + _drawn_near_ridge(seed)


def _bound_hint(case, expected, got):
    m, k, n, dtype, peak, bw = case
    if got not in ("memory", "compute"):
        return 'return exactly the string "memory" or "compute"'
    ai = roofline.arithmetic_intensity(m, k, n, dtype)
    ridge = roofline.ridge_point(peak, bw)
    if ai == ridge:
        return (f"the intensity {ai!r} FLOP/byte is exactly the ridge point {ridge!r}: only an intensity "
                "strictly BELOW the ridge is memory-bound (use <, not <=)")
    if abs(ai - ridge) < 1e-9 * ridge or math.floor(ridge) <= ai < ridge:
        return (f"the intensity {ai!r} FLOP/byte is just below the ridge point {ridge!r}: compute the ridge "
                "exactly, peak_tflops × 1e12 / (bandwidth_gbs × 1e9), with true division (not //) "
                "and the exact powers of ten")
    return (f"intensity here is {ai:.1f} FLOP/byte and the ridge point peak/bandwidth is "
            f"{roofline.ridge_point(peak, bw):.1f} FLOP/byte (convert both to FLOP/s and byte/s: "
            f"TFLOP/s ×1e12, GB/s ×1e9); below the ridge the matmul is memory-bound")


def _reference_bound(m, k, n, dt, peak, bw) -> str:
    return roofline.bound(roofline.arithmetic_intensity(m, k, n, dt), peak, bw)


def _judge_bound(cases, result) -> str:
    return judge_each("predict_bound", cases, result, _reference_bound, hint=_bound_hint,
                      compare=lambda got, expected: type(got) is str and got == expected)


check_predict_bound = Check("predict_bound", cases=_bound_cases, plan=each, judge=_judge_bound, echo=True)
"""``fn(m, k, n, dtype, peak_tflops, bandwidth_gbs)`` must return ``"memory"`` or ``"compute"``."""
