"""Arithmetic intensity and the roofline: is a matmul limited by arithmetic or by memory?

A matmul ``C = A @ B`` with A of shape m×k and B of shape k×n does ``m·n`` dot products of length
``k``: one multiply and one add each, so **2·m·k·n** floating-point operations (FLOPs). To do it,
the device must at least read A and B and write C once: **(m·k + k·n + m·n) · itemsize** bytes.

Their ratio is the *arithmetic intensity* (FLOP per byte). A device that does ``peak`` FLOP/s and
moves ``bandwidth`` bytes/s can sustain at most::

    attainable = min(peak, intensity × bandwidth)            # the roofline (Williams et al., 2009)

Below the *ridge point* ``peak / bandwidth`` the matmul is **memory-bound** (faster arithmetic,
e.g. Tensor Cores, does not help; fewer bytes, e.g. fp16 instead of fp32, does); above it the
matmul is **compute-bound**. A large square matmul is far above the ridge; a skinny one (m = 1..16,
a batch of one token) is far below it.

All sizes are counted with the *minimum* traffic (each operand touched once); real kernels move
more, so the roofline is an upper bound.
"""

from __future__ import annotations

import math

import torch

from .. import formats
from ..validate import check_int, check_number

__all__ = ["itemsize", "matmul_flops", "matmul_bytes", "arithmetic_intensity", "ridge_point",
           "attainable_tflops", "bound", "tile_waves"]

# Every name amp_edu.formats knows for the course's formats (tf32 has no dtype: stored as float32), and fp64.
_ALIASES = {k: f.dtype or torch.float32 for f in formats.FORMATS.values() for k in (f.name, *f.aliases)
            if isinstance(k, str)} | {"fp64": torch.float64, "float64": torch.float64}


def itemsize(dtype) -> int:
    """Bytes per element of ``dtype``: a ``torch.dtype`` or a name such as ``"bf16"`` or ``"tf32"``.

    tf32 is stored as fp32 (4 bytes): it is a Tensor Core *input mode*, not a storage format.
    """
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
        return dtype.itemsize
    if isinstance(dtype, str):
        key = dtype.replace("torch.", "")
        if key in _ALIASES:
            return _ALIASES[key].itemsize
        raise ValueError(f"unknown dtype name {dtype!r}; accepted: {', '.join(sorted(_ALIASES))}")
    raise TypeError(f"dtype must be a torch.dtype or a name such as 'bf16', got {type(dtype).__name__}")


def _dims(m, k, n) -> tuple[int, int, int]:
    return check_int(m, "m", min=1), check_int(k, "k", min=1), check_int(n, "n", min=1)


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of an (m×k) @ (k×n) matmul: 2·m·k·n (a multiply and an add per term)."""
    m, k, n = _dims(m, k, n)
    return 2 * m * k * n


def matmul_bytes(m: int, k: int, n: int, dtype, out_dtype=None) -> int:
    """Minimum bytes moved: read A (m×k) and B (k×n), write C (m×n).

    ``out_dtype`` defaults to ``dtype`` (fp8 matmuls usually write bf16: pass it).
    """
    m, k, n = _dims(m, k, n)
    out = itemsize(out_dtype if out_dtype is not None else dtype)
    return (m * k + k * n) * itemsize(dtype) + m * n * out


def arithmetic_intensity(m: int, k: int, n: int, dtype, out_dtype=None) -> float:
    """FLOP per byte of the matmul: :func:`matmul_flops` / :func:`matmul_bytes`."""
    return matmul_flops(m, k, n) / matmul_bytes(m, k, n, dtype, out_dtype)


def _positive(name, v) -> float:
    return check_number(v, name, positive=True)


def ridge_point(peak_tflops: float, bandwidth_gbs: float) -> float:
    """Intensity (FLOP/byte) where the roofline bends: peak FLOP/s ÷ bandwidth bytes/s."""
    return _positive("peak_tflops", peak_tflops) * 1e12 / (_positive("bandwidth_gbs", bandwidth_gbs) * 1e9)


def attainable_tflops(intensity: float, peak_tflops: float, bandwidth_gbs: float) -> float:
    """The roofline: ``min(peak, intensity × bandwidth)`` in TFLOP/s."""
    ai = _positive("intensity", intensity)
    return min(_positive("peak_tflops", peak_tflops), ai * _positive("bandwidth_gbs", bandwidth_gbs) * 1e9 / 1e12)


def bound(intensity: float, peak_tflops: float, bandwidth_gbs: float) -> str:
    """``"memory"`` if ``intensity`` is below the ridge point, else ``"compute"``."""
    return "memory" if _positive("intensity", intensity) < ridge_point(peak_tflops, bandwidth_gbs) else "compute"


def tile_waves(m: int, n: int, *, sm_count: int, tile: tuple[int, int] = (128, 128)) -> dict:
    """Wave quantization: a GPU matmul kernel cuts C (m×n) into tiles, one per thread block, and
    runs them in *waves* of ``sm_count`` tiles (one per streaming multiprocessor, SM).

    The last wave may be almost empty: with 132 SMs, 133 tiles take two waves, like 264 would.
    Returns ``tiles``, ``waves`` and ``efficiency`` = tiles / (waves × sm_count), the fraction of the
    SM-time that does useful work. (Real kernels pick other tile shapes and may run several tiles
    per SM; this is the simplest model that shows the staircase.)
    """
    _dims(m, 1, n)
    sm_count = check_int(sm_count, "sm_count", min=1)
    if not isinstance(tile, (tuple, list)) or len(tile) != 2:
        raise ValueError(f"tile must be (rows, cols) of positive ints, got {tile!r}")
    tile = (check_int(tile[0], "tile rows", min=1), check_int(tile[1], "tile cols", min=1))
    tiles = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    waves = math.ceil(tiles / sm_count)
    return {"tiles": tiles, "waves": waves, "efficiency": tiles / (waves * sm_count)}
