"""A format's grid of values: the spacing at a magnitude (:func:`ulp`), every value of a small
format (:func:`representable`), the neighbours of a number, a rounding accumulator, and the two
thresholds the grid sets for training: which updates a weight stored in the format drops
(:func:`lost_update_band`) and below which gradient a squared gradient flushes to zero
(:func:`square_flush_cutoff`, Adam's second moment)."""

from __future__ import annotations

import functools
import math

import torch

from ..validate import check_int, check_number
from .format import ALL_FORMATS, Format, get
from .rounding import _as_float, decode

__all__ = ["ulp", "representable", "neighbours", "running_sum", "lost_update_band", "square_flush_cutoff",
           "ROUNDINGS", "round_to_grid"]


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


def lost_update_band(fmt) -> tuple[float, float]:
    """The band of update/weight ratios ``(lo, hi)`` where a weight stored in ``fmt`` drops updates.

    ``w + u`` rounds back to ``w`` when ``|u|`` is below half the gap to ``w``'s neighbour (an exact
    half is a tie, decided by the last kept bit). Within a binade ``[2^e, 2^(e+1))`` the gap is
    ``2^(e-M)``, so half an ulp relative to ``w`` runs from ``2^-(M+1)`` (``w = 2^e``) down to just
    over ``2^-(M+2)`` (``w`` just below ``2^(e+1)``); and just below ``w = 2^e`` the gap is half as
    wide, so a *downward* update there is already kept above ``2^-(M+2)``. Hence, for any normal
    weight:

    * ``|u| < lo·|w|`` with ``lo = 2^-(M+2) = eps/4``: the update is lost, wherever ``w`` sits;
    * ``|u| > hi·|w|`` with ``hi = 2^-(M+1) = eps/2``: it always changes ``w``;
    * in between it depends on where ``w`` sits in its binade.

    fp16 (M = 10): ``(2^-12, 2^-11)``; bf16 (M = 7): ``(2^-9, 2^-8)``; fp32 (M = 23):
    ``(2^-25, 2^-24)``. Subnormal weights have a fixed gap, so there the ratio grows as ``w``
    shrinks; the band is for normal weights.
    """
    f = get(fmt)
    return f.eps / 4, f.eps / 2


def square_flush_cutoff(fmt, weight: float = 1.0) -> float:
    """The ``|g|`` below which ``weight · g²`` stored in ``fmt`` is 0.

    A value rounds to 0 when its magnitude is at most half the smallest subnormal (below it it is
    nearer 0; exactly half is a tie that goes to the even neighbour, 0). So the cut-off is
    ``sqrt(smallest_subnormal / 2 / weight)``. With ``weight = 1 - beta2`` (0.001 for Adam's
    default ``beta2 = 0.999``) it is where Adam's first second-moment estimate ``(1 - beta2)·g²``
    vanishes in fp16: ``sqrt(2^-25 / 0.001) ≈ 5.5e-3``. (Rounding ``weight · g`` before the second
    multiply, as an op-by-op fp16 computation does, moves the edge by at most a few ulps.)
    """
    f = get(fmt)
    weight = check_number(weight, "weight", positive=True)
    return math.sqrt(f.smallest_subnormal / 2 / weight)


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


# --- rounding onto a format's grid with the grid's spacing (nearest-even or stochastic) ---------
ROUNDINGS = ("nearest", "stochastic")


def round_to_grid(x: torch.Tensor, fmt, rounding: str = "nearest", *, generator: torch.Generator | None = None,
                  rand: torch.Tensor | None = None, bits: int = 53, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``x`` rounded onto ``fmt``'s grid (a signed format with zero and subnormals: all but
    e8m0), as values of ``dtype`` (float64, or float32, which holds every value of a format of at
    most 16 bits but bf16's subnormals), fast: by the grid's spacing instead of bit fields.

    Between ``2^e`` and ``2^(e+1)`` the grid is the multiples of ``step = 2^(max(e, emin) - M)``
    (:func:`ulp`), and a value's last mantissa bit is the parity of its multiple, so
    ``k = |x| / step`` (exact: ``step`` is a power of two) says everything: its integer part is
    the lower neighbour, its fraction the distance to it. ``x`` is stored as float32 first (as
    :func:`~amp_edu.formats.quantize` does). Magnitudes beyond ``fmt.max`` saturate to ``±max``
    ("satfinite", what e2m1 always does and what the fp8 training casts do); inside the range:

    * ``rounding="nearest"``: ``round(k) · step``, ties to the even multiple: the same values as
      :func:`~amp_edu.formats.quantize` (``tests/recipes/test_fp4.py`` checks every midpoint).
    * ``rounding="stochastic"``: to one of the two neighbours, *up* with probability
      ``p = frac(k)``, the fractional distance between them, so the mean over draws is ``x``
      itself: rounding is unbiased (round-to-nearest is not: every value between two midpoints
      goes to the same neighbour). The draw is ``bits`` random bits ``r`` per element (``rand``,
      ints in ``[0, 2^bits)`` of ``x``'s shape, or drawn from ``generator``, which is then
      required); ``|x|`` rounds up when ``r + floor(p · 2^bits) >= 2^bits``, i.e. with
      probability ``floor(p · 2^bits) / 2^bits``: "add ``bits`` random bits below the last kept
      one and truncate". With the default 53 bits the mean is ``x`` to within ``2^-53`` of a
      step. Blackwell's ``cvt.rs`` instruction takes 8 random bits per element, so its rounding
      is biased toward zero by up to ``1/256`` of a step: Transformer Engine's software version of
      it (``stochastic_round_fp4_e2m1``, ``transformer_engine/common/util/ptx.cuh`` lines 526-547
      at commit d0067d0) adds ``u · step`` with ``u = rbits / 256`` and floors, and ``bits=8``
      with the same ``rand`` gives its values wherever its float32 sum ``|x| + u · step`` is
      exact (the tests check every multiple of 2^-10 with all 256 draws). Where that sum rounds
      (``|x|`` with bits below the sum's last place, e.g. ``2^-9 - 2^-30`` with ``u = 255/256``)
      TE's result can go up where this rule, exact in integers, stays down. A value on the grid
      never moves.

    NaN stays NaN where ``fmt`` has one; a format without NaN (e2m1) raises ``ValueError``.
    """
    f = get(fmt)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point torch.Tensor, got {type(x).__name__}"
                        + (f" of dtype {x.dtype}" if isinstance(x, torch.Tensor) else ""))
    if dtype not in (torch.float64, torch.float32):
        raise TypeError(f"dtype must be torch.float64 or torch.float32, got {dtype!r}")
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    if not f.signed or not f.subnormals:
        raise ValueError(f"round_to_grid needs a signed format with zero and subnormals; got {f.name}")
    # Work in float32 where every step is exact there: |x| / step is |x| times a power of two and
    # the grid's smallest step 2^(emin - M) is a normal float32 (e2m1, the fp8s, fp16); bf16's
    # subnormal steps are not (2^-133), so bf16 (and anything wider) works in float64.
    wide = f.emin - f.mantissa_bits < -126
    dt, ibits, idt, fbits = ((torch.float64, 52, torch.int64, 1023) if wide else (torch.float32, 23, torch.int32, 127))
    xw = x.float().to(dt)
    nan = torch.isnan(xw)
    has_nan = bool(nan.any())
    if has_nan and not f.nan:
        raise ValueError(f"{f.name} has no NaN: a NaN cannot be stored in it; got {int(nan.sum())} NaN value(s)")
    a = xw.abs().clamp(max=f.max)                                 # saturate (also ±inf)
    e = (a.view(idt) >> ibits) - fbits                            # 2^e <= |x| < 2^(e+1), from the exponent bits
    step = ((e.clamp(min=f.emin) - f.mantissa_bits + fbits) << ibits).view(dt)   # 2^(max(e, emin) - M)
    k = a / step
    if rounding == "nearest":
        q = torch.round(k)                                        # ties to even
    else:
        bits = check_int(bits, "bits", min=1, max=53)
        if rand is None:
            if not isinstance(generator, torch.Generator):
                raise TypeError("stochastic rounding draws from an explicit generator: pass "
                                "generator=torch.Generator(...).manual_seed(s) (or rand=)")
            rand = torch.randint(0, 2 ** bits, x.shape, generator=generator, device=x.device, dtype=torch.int64)
        elif not isinstance(rand, torch.Tensor) or rand.is_floating_point() or rand.shape != x.shape:
            raise ValueError(f"rand must be an integer tensor of x's shape {tuple(x.shape)} with values in "
                             f"[0, 2**{bits})")
        lo = torch.floor(k)
        q = lo + (rand.long() + torch.floor((k - lo) * 2.0 ** bits).long() >= 2 ** bits)   # exact: a power-of-two scaling
    out = torch.copysign((q * step).clamp(max=f.max), xw)
    return (torch.where(nan, xw, out) if has_nan else out).to(dtype)
