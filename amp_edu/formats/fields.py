"""One number as a format stores it, field by field: :func:`decompose` and :class:`Decomposed`.

Built on :mod:`.rounding` (the bit patterns) and :mod:`.fate` (what storing did to the number),
so the explorer in lesson 01 and the fate tables agree by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .fate import fate
from .format import FP32, Format, get
from .rounding import _as_float, _past_max, decode, encode, quantize

__all__ = ["Decomposed", "decompose"]


@dataclass(frozen=True)
class Decomposed:
    """One number as a format stores it: the raw fields, the kind and the value."""

    format: Format
    x: float          # the number asked for
    x32: float        # ... as float32, which is what gets cast
    sign: int
    exponent: int     # raw exponent field
    mantissa: int     # raw mantissa field
    kind: str         # zero, subnormal, normal, inf, nan
    value: float      # the stored value
    bits: str         # sign, exponent, mantissa bits (no sign bit in an unsigned format)

    @property
    def fields(self) -> tuple[str, str, str]:
        """The bits split into (sign, exponent, mantissa); the sign is ``""`` without a sign bit."""
        s = int(self.format.signed)
        E = self.format.exponent_bits
        return self.bits[:s], self.bits[s:s + E], self.bits[s + E:]

    @property
    def true_exponent(self) -> int | None:
        """The power of two of the leading bit's place: field - bias, or 1 - bias for subnormals."""
        if self.kind in ("inf", "nan", "zero"):
            return None
        return self.format.emin if self.kind == "subnormal" else self.exponent - self.format.bias

    @property
    def abs_error(self) -> float:
        """``|value - x|`` (inf when a finite x overflowed, NaN when x or value is NaN)."""
        if math.isinf(self.x) and self.value == self.x:
            return 0.0
        return abs(self.value - self.x)

    @property
    def rel_error(self) -> float:
        """``|value - x| / |x|``: 1.0 when a nonzero x became 0; 0 for x = 0."""
        if self.x == 0:
            return 0.0 if self.value == 0 else math.inf
        return self.abs_error / abs(self.x)

    @property
    def overflowed(self) -> bool:
        """A finite x too large for the format: it became inf, NaN or (saturating) ±max."""
        return math.isfinite(self.x) and _past_max(abs(self.x32), self.format)

    @property
    def rounded_to_zero(self) -> bool:
        """A nonzero finite x stored as ±0 (underflow)."""
        return self.x != 0 and math.isfinite(self.x) and self.value == 0

    @property
    def fate(self) -> str:
        """What storing did to x: one of :data:`FATES` (see :func:`fate`)."""
        return fate(self.x, self.format)

    def equation(self) -> str:
        """How the fields give the value, e.g. ``+1.0000000000₂ × 2^0 = 1``."""
        s, _, m = self.fields
        sign = "-" if s == "1" else "+"
        if self.kind == "inf":
            return f"{sign}inf (exponent all ones, mantissa 0)"
        if self.kind == "nan":
            return "nan (exponent all ones, mantissa not 0)" if self.format.has_inf else "nan (all ones)"
        lead, exp = ("1", self.true_exponent) if self.kind == "normal" else ("0", self.format.emin)
        if not m:                               # no mantissa bits (e8m0): a bare power of two
            return f"{sign}2^{exp} = {self.value!r}"
        return f"{sign}{lead}.{m}₂ × 2^{exp} = {self.value!r}"



def decompose(x, fmt) -> Decomposed:
    """How ``fmt`` stores the number ``x``: sign, exponent and mantissa fields, kind, value, bits.

    ``x`` is a real number (float or int; not bool, not a tensor). Like torch, ``x`` is first
    stored as float32 and then rounded to ``fmt`` (nearest, ties to even), with ``fmt``'s
    overflow behaviour. ``fmt`` is anything :func:`get` accepts: a key of :data:`ALL_FORMATS`, an
    alias, a :class:`Format` or a torch dtype.

    >>> d = decompose(2.0 ** -25, "fp16")      # the tie between 0 and 2^-24
    >>> d.kind, d.value, d.bits
    ('zero', 0.0, '0000000000000000')
    >>> decompose(3.0, "fp8_e8m0").value       # a tie between 2 and 4: e8m0 rounds it up
    4.0
    """
    f = get(fmt)
    xv = _as_float(x)
    x32 = float(quantize(torch.tensor([xv], dtype=torch.float64), FP32)[0])
    code = int(encode(torch.tensor([xv], dtype=torch.float64), f)[0])
    value = float(decode(torch.tensor([code]), f)[0])
    E, M = f.exponent_bits, f.mantissa_bits
    sign, field, frac = code >> (E + M), (code >> M) & (2 ** E - 1), code & (2 ** M - 1)
    if math.isnan(value):
        kind = "nan"
    elif math.isinf(value):
        kind = "inf"
    elif field == 0 and f.subnormals:
        kind = "zero" if frac == 0 else "subnormal"
    else:
        kind = "normal"
    return Decomposed(f, xv, x32, sign, field, frac, kind, value, format(code, f"0{f.bits}b"))
