"""Rounding to a format on integers: bit patterns in (:func:`decode`), out (:func:`encode`) and
values (:func:`quantize`); :mod:`.fields` shows one number field by field on top of these.

No floating-point tricks: a float64 is split into sign, exponent and an integer significand, the
bits the target format cannot keep are dropped and rounded (nearest, ties to even), and the
fields are put back together — the same steps torch's casts take, which the tests prove bit for bit.
"""

from __future__ import annotations

import math
import numbers

import torch

from .format import FP32, Format, get

__all__ = ["decode", "encode", "quantize"]

def _as_float(x, what: str = "x") -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        hint = " (for a one-element tensor pass t.item())" if isinstance(x, torch.Tensor) else ""
        raise TypeError(f"{what} must be a real number (a Python float or int), "
                        f"got {type(x).__name__}{hint}")
    try:
        return float(x)
    except OverflowError:  # an int too large for a float64 is an overflow everywhere
        return math.inf if x > 0 else -math.inf


# --- the rounding, on integers ----------------------------------------------------------------
def _round_f64(x: torch.Tensor, f: Format) -> torch.Tensor:
    """Bit patterns (int64) of float64 values ``x`` rounded to ``f``, nearest-even, by integer math."""
    b = x.to(torch.float64).contiguous().view(torch.int64)
    sign = (b >> 63) & 1
    mag = b & 0x7FFF_FFFF_FFFF_FFFF
    field, frac = mag >> 52, mag & ((1 << 52) - 1)
    is_nan = (field == 2047) & (frac != 0)
    is_inf = (field == 2047) & (frac == 0)
    if not f.nan and bool(is_nan.any()):
        raise ValueError(f"{f.name} has no NaN: a NaN cannot be stored in it (the OCP MX spec leaves "
                         f"that conversion to the implementation); got {int(is_nan.sum())} NaN value(s)")
    # |x| = sig × 2^(e - 52) with an integer significand sig (implicit 1 only for normals).
    normal = field > 0
    sig = torch.where(normal, frac | (1 << 52), frac)
    e = torch.where(normal, field - 1023, torch.full_like(field, -1022))
    # The target grid near |x| has spacing 2^(e_grid - M); below 2^(1 - bias) it stops shrinking
    # (e_grid = 1 - bias): that is the subnormal range. Count the bits that fall off.
    # (e8m0 has no subnormals, yet torch rounds below 2^-126 on this same grid — as if field 0
    # meant 0 — and then reads field 0 as 2^-127: so x <= 2^-127 is stored as 2^-127, and a
    # float32 subnormal above 2^-127 as 2^-126. The same integer steps give the same bits.)
    M, grid_emin = f.mantissa_bits, 1 - f.bias
    e_grid = torch.clamp(e, min=grid_emin)
    drop = torch.clamp(52 - M + (e_grid - e), max=54)  # sig < 2^53: past 53 dropped bits x rounds to 0
    kept = sig >> drop
    rest = sig - (kept << drop)
    half = torch.ones_like(drop) << (drop - 1)
    up = (rest > half) | ((rest == half) & ((kept & 1) == 1))  # ties to even
    kept = kept + up.long()
    # Exponent field (e_grid - grid_emin) above the 2^M-scaled significand: the implicit 1 of a
    # normal lands in the exponent field's lowest bit, and a carry out of the mantissa bumps it.
    code = ((e_grid - grid_emin) << M) + kept
    overflow = (code > f.max_code) | is_inf
    special = {"inf": f.inf_code, "nan": f.nan_code, "saturate": f.max_code}[f.overflow]
    code = torch.where(overflow, torch.full_like(code, special), code)
    if f.nan:
        code = torch.where(is_nan, torch.full_like(code, f.nan_code), code)
    if not f.signed:                    # no sign bit: torch stores |x|
        return code
    return code | (sign << (f.bits - 1))


def decode(codes, fmt) -> torch.Tensor:
    """The float64 values of bit patterns ``codes`` (ints, or an integer tensor) in ``fmt``."""
    f = get(fmt)
    codes = torch.as_tensor(codes)
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
        raise TypeError(f"codes must be integers (bit patterns), got dtype {codes.dtype}")
    codes = codes.to(torch.int64)
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= 2 ** f.bits):
        raise ValueError(f"{f.name} bit patterns are 0 .. 2^{f.bits}-1 = {2 ** f.bits - 1}; "
                         f"got {int(codes.min())} .. {int(codes.max())}")
    E, M = f.exponent_bits, f.mantissa_bits
    s = (codes >> (E + M)) & 1
    field = (codes >> M) & (2 ** E - 1)
    frac = codes & (2 ** M - 1)
    normal = (field > 0) if f.subnormals else torch.ones_like(field, dtype=torch.bool)
    sig = torch.where(normal, frac + 2 ** M, frac)                   # 1.mantissa or 0.mantissa, × 2^M
    exp = torch.where(field > 0, field, torch.full_like(field, int(f.subnormals))) - f.bias - M
    pow2 = ((exp + 1023) << 52).view(torch.float64)                  # 2^exp, built from its bits
    val = sig.to(torch.float64) * pow2
    top = field == 2 ** E - 1
    if f.has_inf:
        val = torch.where(top & (frac == 0), math.inf, val)
        val = torch.where(top & (frac != 0), math.nan, val)
    elif f.nan:
        val = torch.where(top & (frac == 2 ** M - 1), math.nan, val)
    return torch.where(s == 1, -val, val)


def _as_values(x) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"x must hold real numbers, got dtype {t.dtype}")
    return t.to(torch.float64)


def encode(x, fmt) -> torch.Tensor:
    """Bit patterns (int64) that ``fmt`` stores for each value of ``x``: float32 first, then ``fmt``."""
    f = get(fmt)
    x32 = decode(_round_f64(_as_values(x), FP32), FP32)
    return _round_f64(x32, f)


def quantize(x, fmt) -> torch.Tensor:
    """The values (float64) that ``fmt`` stores for ``x``: what ``x.float().to(dtype)`` gives."""
    f = get(fmt)
    return decode(encode(x, f), f)


def _past_max(a, f: Format):
    """``a`` (|float32 value|, a float or tensor) is beyond what rounds to ``f``'s max."""
    thr = f.overflow_threshold
    return (a > thr) | (a == thr) if f._tie_overflows else a > thr
