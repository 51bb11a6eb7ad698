"""Floating-point formats bit by bit: fp32, tf32, fp16, bf16 and the two fp8s.

A binary float is three bit fields, ``sign | exponent (E bits) | mantissa (M bits)``::

    exponent field 1 .. top   normal     (-1)^s × 1.mantissa × 2^(field - bias)   bias = 2^(E-1) - 1
    exponent field 0          subnormal  (-1)^s × 0.mantissa × 2^(1 - bias)       (no implicit 1)
    both fields 0             ±0
    exponent field all ones   IEEE formats: mantissa 0 is ±inf, anything else NaN.
                              fp8 e4m3 ("fn": finite) has no inf: only S.1111.111 is NaN,
                              so its top binade holds numbers and its max is 448.

So each binade [2^e, 2^(e+1)) holds 2^M evenly spaced values, ``ulp = 2^(e-M)`` apart: the
spacing doubles with every binade and *relative* precision stays about 2^-M (``eps``). Below the
smallest normal 2^(1-bias) the spacing stops shrinking — the subnormals — so relative precision
drains away until the smallest subnormal 2^(1-bias-M) (2^-24 ≈ 5.96e-8 in fp16).

Storing a number (a cast) keeps M mantissa bits and looks at the bits it drops: more than half an
ulp rounds up, less rounds down, exactly half — a *tie* — goes to the neighbour whose last kept bit
is 0 ("round to nearest, ties to even"). A carry out of the mantissa bumps the exponent; past the
largest exponent the value overflows: to inf in IEEE formats, and in e4m3 to NaN or to the max
(448), depending on the torch version (see :attr:`Format.overflow`). Half the smallest subnormal is
the last tie: it rounds to the even neighbour, 0, and anything smaller is 0 too.

This module does that arithmetic on integers — no floating-point tricks — for one number
(:func:`decompose`) or a tensor (:func:`encode`, :func:`decode`, :func:`quantize`), and its tests
prove it equals torch's own casts bit for bit. Like torch, it stores a number as float32 first and
casts that (torch converts float64 to fp16/bf16/fp8 through float32 too).
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import torch

__all__ = [
    "Format", "FORMATS", "Decomposed", "decompose", "encode", "decode", "quantize",
    "get_format", "ulp", "representable", "neighbours", "running_sum", "OVERFLOW_POLICIES",
]

OVERFLOW_POLICIES = ("inf", "nan", "saturate")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: ``1 + exponent_bits + mantissa_bits`` bits.

    ``overflow`` says what a value too large for the format becomes, and with it the encoding:

    * ``"inf"``: IEEE 754 style (fp32, tf32, fp16, bf16, fp8 e5m2). The top exponent field is
      reserved for ±inf (mantissa 0) and NaN; overflow gives ±inf.
    * ``"nan"`` / ``"saturate"``: a *finite* format (fp8 e4m3fn): no inf, only the all-ones pattern
      is NaN. Overflow (and ±inf input) gives NaN (``"nan"``, torch < 2.12) or ±max
      (``"saturate"``, torch ≥ 2.12, pytorch/pytorch#178817).
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    dtype: torch.dtype | None = None
    overflow: str = "inf"

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        for field, lo, hi in (("exponent_bits", 2, 8), ("mantissa_bits", 1, 23)):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{field} must be an int, got {type(v).__name__}")
            if not lo <= v <= hi:
                raise ValueError(f"{field} must be in {lo}..{hi} (formats no wider than float32), got {v}")
        if self.dtype is not None and not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype or None, got {type(self.dtype).__name__}")
        if self.overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"overflow must be one of {OVERFLOW_POLICIES}, got {self.overflow!r}")

    # --- the numbers that follow from the two field widths -----------------------------------
    @property
    def bits(self) -> int:
        """Total width: sign + exponent + mantissa."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        """Stored exponent field = true exponent + bias; ``2^(E-1) - 1`` (15 for fp16)."""
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def has_inf(self) -> bool:
        return self.overflow == "inf"

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal (and of every subnormal): ``1 - bias``."""
        return 1 - self.bias

    @property
    def max_code(self) -> int:
        """Bit pattern of the largest finite value (sign 0)."""
        top = (2 ** self.exponent_bits - 1) << self.mantissa_bits
        return top - 1 if self.has_inf else top + 2 ** self.mantissa_bits - 2

    @property
    def inf_code(self) -> int | None:
        return (2 ** self.exponent_bits - 1) << self.mantissa_bits if self.has_inf else None

    @property
    def nan_code(self) -> int:
        """The NaN this module stores (sign 0): IEEE's quiet NaN, or e4m3's single all-ones NaN.

        torch's NaN payloads differ between formats and code paths; only NaN-ness is meaningful.
        """
        if self.has_inf:
            return self.inf_code | (1 << (self.mantissa_bits - 1))
        return 2 ** (self.bits - 1) - 1

    @property
    def max(self) -> float:
        """Largest finite value: 1.11..1₂ × 2^emax (65504 for fp16, 57344 for e5m2); e4m3 keeps
        the top exponent for numbers but gives up 1.111₂ to NaN: 1.110₂ × 2^8 = 448."""
        M, top = self.mantissa_bits, 2 ** self.exponent_bits - 1 - self.bias
        if self.has_inf:
            return math.ldexp(2 - 2.0 ** -M, top - 1)
        return math.ldexp(2 - 2.0 ** (1 - M), top)

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """The gap between 1 and the next value: ``2^-M``."""
        return 2.0 ** -self.mantissa_bits

    @property
    def overflow_threshold(self) -> float:
        """The tie between ``max`` and the next step up (``max + ulp(max)/2``: 65520 for fp16).

        Values above it overflow; a value exactly on it overflows when max's last mantissa bit is
        1 (IEEE formats: all ones, so 65520 → inf) and rounds down to max when it is 0 (e4m3: 464).
        """
        return self.max + 2.0 ** (math.frexp(self.max)[1] - 1 - self.mantissa_bits) / 2

    def __repr__(self) -> str:
        return (f"Format({self.name!r}, E={self.exponent_bits}, M={self.mantissa_bits}, "
                f"bias={self.bias}, max={self.max:g}, overflow={self.overflow!r})")


def _torch_e4m3_overflow() -> str:
    """Ask this torch what a too-large float32 becomes in float8_e4m3fn: 448 or NaN."""
    out = torch.tensor([1e4], dtype=torch.float32).to(torch.float8_e4m3fn).float()
    return "saturate" if out.item() == 448.0 else "nan"


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("fp32", 8, 23, torch.float32),
    Format("tf32", 8, 10, None),          # fp32's range, fp16's precision: a matmul input mode
    Format("fp16", 5, 10, torch.float16),
    Format("bf16", 8, 7, torch.bfloat16),
    Format("fp8_e4m3", 4, 3, torch.float8_e4m3fn, overflow=_torch_e4m3_overflow()),
    Format("fp8_e5m2", 5, 2, torch.float8_e5m2),
)}
_FP32 = FORMATS["fp32"]


def get_format(fmt) -> Format:
    """The :class:`Format` for a name in :data:`FORMATS`, a torch dtype, or a Format itself."""
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        if fmt in FORMATS:
            return FORMATS[fmt]
        raise ValueError(f"unknown format {fmt!r}; accepted: {', '.join(FORMATS)} (or a Format object)")
    if isinstance(fmt, torch.dtype):
        for f in FORMATS.values():
            if f.dtype == fmt:
                return f
        raise ValueError(f"no format for {fmt}; accepted dtypes: "
                         f"{', '.join(str(f.dtype) for f in FORMATS.values() if f.dtype)}")
    raise TypeError(f"fmt must be a format name ({', '.join(FORMATS)}), a Format or a torch dtype, "
                    f"got {type(fmt).__name__}")


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
    # |x| = sig × 2^(e - 52) with an integer significand sig (implicit 1 only for normals).
    normal = field > 0
    sig = torch.where(normal, frac | (1 << 52), frac)
    e = torch.where(normal, field - 1023, torch.full_like(field, -1022))
    # The target grid near |x| has spacing 2^(e_grid - M); below the smallest normal it stops
    # shrinking (e_grid = emin): that is the subnormal range. Count the bits that fall off.
    M = f.mantissa_bits
    e_grid = torch.clamp(e, min=f.emin)
    drop = torch.clamp(52 - M + (e_grid - e), max=54)  # sig < 2^53: past 53 dropped bits x rounds to 0
    kept = sig >> drop
    rest = sig - (kept << drop)
    half = torch.ones_like(drop) << (drop - 1)
    up = (rest > half) | ((rest == half) & ((kept & 1) == 1))  # ties to even
    kept = kept + up.long()
    # Exponent field (e_grid - emin) above the 2^M-scaled significand: the implicit 1 of a normal
    # lands in the exponent field's lowest bit, and a carry out of the mantissa bumps the exponent.
    code = ((e_grid - f.emin) << M) + kept
    overflow = (code > f.max_code) | is_inf
    special = {"inf": f.inf_code, "nan": f.nan_code, "saturate": f.max_code}[f.overflow]
    code = torch.where(overflow, torch.full_like(code, special), code)
    code = torch.where(is_nan, torch.full_like(code, f.nan_code), code)
    return code | (sign << (f.bits - 1))


def decode(codes, fmt) -> torch.Tensor:
    """The float64 values of bit patterns ``codes`` (ints, or an integer tensor) in ``fmt``."""
    f = get_format(fmt)
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
    normal = field > 0
    sig = torch.where(normal, frac + 2 ** M, frac)                   # 1.mantissa or 0.mantissa, × 2^M
    exp = torch.where(normal, field, torch.ones_like(field)) - f.bias - M
    pow2 = ((exp + 1023) << 52).view(torch.float64)                  # 2^exp, built from its bits
    val = sig.to(torch.float64) * pow2
    top = field == 2 ** E - 1
    if f.has_inf:
        val = torch.where(top & (frac == 0), math.inf, val)
        val = torch.where(top & (frac != 0), math.nan, val)
    else:
        val = torch.where(top & (frac == 2 ** M - 1), math.nan, val)
    return torch.where(s == 1, -val, val)


def _as_values(x) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"x must hold real numbers, got dtype {t.dtype}")
    return t.to(torch.float64)


def encode(x, fmt) -> torch.Tensor:
    """Bit patterns (int64) that ``fmt`` stores for each value of ``x``: float32 first, then ``fmt``."""
    f = get_format(fmt)
    x32 = decode(_round_f64(_as_values(x), _FP32), _FP32)
    return _round_f64(x32, f)


def quantize(x, fmt) -> torch.Tensor:
    """The values (float64) that ``fmt`` stores for ``x``: what ``x.float().to(dtype)`` gives."""
    f = get_format(fmt)
    return decode(encode(x, f), f)


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
    bits: str         # sign, exponent, mantissa bits

    @property
    def fields(self) -> tuple[str, str, str]:
        """The bits split into (sign, exponent, mantissa)."""
        E = self.format.exponent_bits
        return self.bits[0], self.bits[1:1 + E], self.bits[1 + E:]

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
        f = self.format
        a = abs(self.x32)
        past = a > f.overflow_threshold or (a == f.overflow_threshold and f.max_code & 1 == 1)
        return math.isfinite(self.x) and past

    @property
    def rounded_to_zero(self) -> bool:
        """A nonzero finite x stored as ±0 (underflow)."""
        return self.x != 0 and math.isfinite(self.x) and self.value == 0

    def equation(self) -> str:
        """How the fields give the value, e.g. ``+1.0000000000₂ × 2^0 = 1``."""
        s, _, m = self.fields
        sign = "-" if s == "1" else "+"
        if self.kind == "inf":
            return f"{sign}inf (exponent all ones, mantissa 0)"
        if self.kind == "nan":
            return "nan (exponent all ones, mantissa not 0)" if self.format.has_inf else "nan (all ones)"
        lead, exp = ("1", self.true_exponent) if self.kind == "normal" else ("0", self.format.emin)
        return f"{sign}{lead}.{m}₂ × 2^{exp} = {self.value!r}"


def decompose(x, fmt) -> Decomposed:
    """How ``fmt`` stores the number ``x``: sign, exponent and mantissa fields, kind, value, bits.

    ``x`` is a real number (float or int; not bool, not a tensor). Like torch, ``x`` is first
    stored as float32 and then rounded to ``fmt`` (nearest, ties to even), with ``fmt``'s
    overflow behaviour. ``fmt`` is a key of :data:`FORMATS`, a :class:`Format` or a torch dtype.

    >>> d = decompose(2.0 ** -25, "fp16")      # the tie between 0 and 2^-24
    >>> d.kind, d.value, d.bits
    ('zero', 0.0, '0000000000000000')
    """
    f = get_format(fmt)
    xv = _as_float(x)
    x32 = float(quantize(torch.tensor([xv], dtype=torch.float64), _FP32)[0])
    code = int(encode(torch.tensor([xv], dtype=torch.float64), f)[0])
    value = float(decode(torch.tensor([code]), f)[0])
    E, M = f.exponent_bits, f.mantissa_bits
    sign, field, frac = code >> (E + M), (code >> M) & (2 ** E - 1), code & (2 ** M - 1)
    if math.isnan(value):
        kind = "nan"
    elif math.isinf(value):
        kind = "inf"
    elif field == 0:
        kind = "zero" if frac == 0 else "subnormal"
    else:
        kind = "normal"
    return Decomposed(f, xv, x32, sign, field, frac, kind, value, format(code, f"0{f.bits}b"))


def ulp(x, fmt) -> float:
    """The spacing of ``fmt``'s grid at magnitude ``|x|``: ``2^(max(e, emin) - M)`` for ``2^e ≤ |x|``.

    Within the subnormal range (and at 0) it is the smallest subnormal. An update smaller than
    half of it vanishes: ``w + u == w`` when ``|u| < ulp(w) / 2``.
    """
    f = get_format(fmt)
    a = abs(_as_float(x))
    if not math.isfinite(a):
        raise ValueError(f"x must be finite, got {x!r}")
    if a > f.max:
        raise ValueError(f"|x| = {a:g} is beyond {f.name}'s max {f.max:g}: no grid there, it overflows")
    if a < f.smallest_normal:
        return f.smallest_subnormal
    e = math.frexp(a)[1] - 1            # a = 1.xxx × 2^e
    return 2.0 ** (max(e, f.emin) - f.mantissa_bits)


@functools.lru_cache(maxsize=None)
def _all_finite(f: Format) -> torch.Tensor:
    vals = decode(torch.arange(2 ** f.bits), f)
    vals = vals[torch.isfinite(vals)] + 0.0          # + 0.0 turns -0.0 into +0.0
    return torch.unique(vals)                         # sorted, one zero


def representable(fmt, lo=-math.inf, hi=math.inf) -> torch.Tensor:
    """Every finite value of a format of at most 16 bits in ``[lo, hi]``, sorted (float64).

    Zero appears once. fp32 and tf32 have too many values to list; use :func:`ulp` for them.
    """
    f = get_format(fmt)
    if f.bits > 16:
        small = ", ".join(k for k, v in FORMATS.items() if v.bits <= 16)
        raise ValueError(f"{f.name} has {f.bits} bits, too many values to list; accepted: "
                         f"formats of at most 16 bits ({small})")
    lo, hi = _as_float(lo, "lo"), _as_float(hi, "hi")
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise ValueError(f"need lo <= hi (not NaN), got lo={lo!r}, hi={hi!r}")
    vals = _all_finite(f)
    return vals[(vals >= lo) & (vals <= hi)].clone()


def neighbours(x, fmt, count: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``count`` representable values just below-or-at ``x`` and just above it (≤16-bit formats)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int, got {count!r}")
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
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
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
