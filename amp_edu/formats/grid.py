"""A format's grid of values: the spacing at a magnitude (:func:`ulp`), every value of a small
format (:func:`representable`), the neighbours of a number, and a rounding accumulator."""

from __future__ import annotations

import functools
import math

import torch

from ..validate import check_int
from .format import ALL_FORMATS, Format, get
from .rounding import _as_float, decode

__all__ = ["ulp", "representable", "neighbours", "running_sum"]


def ulp(x, fmt) -> float:
    """The spacing of ``fmt``'s grid at magnitude ``|x|``: ``2^(max(e, emin) - M)`` for ``2^e ≤ |x|``.

    Within the subnormal range (and at 0) it is the smallest subnormal. An update smaller than
    half of it vanishes: ``w + u == w`` when ``|u| < ulp(w) / 2``.
    """
    f = get(fmt)
    a = abs(_as_float(x))
    if not math.isfinite(a):
        raise ValueError(f"x must be finite, got {x!r}")
    if a > f.max:
        raise ValueError(f"|x| = {a:g} is beyond {f.name}'s max {f.max:g}: no grid there, it overflows")
    if a < f.smallest_normal:
        if not f.subnormals:
            raise ValueError(f"|x| = {a:g} is below {f.name}'s smallest value {f.smallest_normal:g}: "
                             f"it has no zero or subnormals, so no grid there")
        return f.smallest_subnormal
    e = math.frexp(a)[1] - 1            # a = 1.xxx × 2^e
    return 2.0 ** (max(e, f.emin) - f.mantissa_bits)


@functools.lru_cache(maxsize=None)
def _sorted_finite_values(f: Format) -> torch.Tensor:
    """Every finite value of ``f``, sorted, one zero (a cache behind :func:`representable`)."""
    vals = decode(torch.arange(2 ** f.bits), f)
    vals = vals[torch.isfinite(vals)] + 0.0          # + 0.0 turns -0.0 into +0.0
    return torch.unique(vals)


def representable(fmt, lo=-math.inf, hi=math.inf) -> torch.Tensor:
    """Every finite value of a format of at most 16 bits in ``[lo, hi]``, sorted (float64).

    Zero appears once. fp32 and tf32 have too many values to list; use :func:`ulp` for them.
    """
    f = get(fmt)
    if f.bits > 16:
        small = ", ".join(k for k, v in ALL_FORMATS.items() if v.bits <= 16)
        raise ValueError(f"{f.name} has {f.bits} bits, too many values to list; accepted: "
                         f"formats of at most 16 bits ({small})")
    lo, hi = _as_float(lo, "lo"), _as_float(hi, "hi")
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise ValueError(f"need lo <= hi (not NaN), got lo={lo!r}, hi={hi!r}")
    vals = _sorted_finite_values(f)
    return vals[(vals >= lo) & (vals <= hi)].clone()


def neighbours(x, fmt, count: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``count`` representable values just below-or-at ``x`` and just above it (≤16-bit formats)."""
    count = check_int(count, "count", min=1)
    xv = _as_float(x)
    if not math.isfinite(xv):
        raise ValueError(f"x must be finite, got {x!r}")
    vals = representable(fmt)
    i = int(torch.searchsorted(vals, torch.tensor([xv], dtype=torch.float64), right=True)[0])
    return vals[max(0, i - count):i], vals[i:i + count]


def running_sum(x, steps: int, *, acc_dtype: torch.dtype, input_dtype: torch.dtype | None = None):
    """Add ``x`` to an accumulator ``steps`` times, rounding after every add, as a loop would.

    ``x`` is stored in ``input_dtype`` (default ``acc_dtype``), converted to ``acc_dtype`` and added
    to an ``acc_dtype`` accumulator. Returns the float64 tensor of the running sums (one per step).
    """
    xv = _as_float(x)
    steps = check_int(steps, "steps", min=1)
    for name, dt in (("acc_dtype", acc_dtype), ("input_dtype", input_dtype)):
        if dt is not None and (not isinstance(dt, torch.dtype) or not dt.is_floating_point):
            raise TypeError(f"{name} must be a floating torch dtype, got {dt!r}")
    inc = torch.tensor(xv, dtype=input_dtype or acc_dtype).to(acc_dtype)
    acc = torch.zeros((), dtype=acc_dtype)
    out = []
    for _ in range(steps):
        acc = acc + inc
        out.append(acc.item())
    return torch.tensor(out, dtype=torch.float64)
