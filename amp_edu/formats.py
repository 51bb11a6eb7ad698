"""Floating-point formats bit by bit: fp32, tf32, fp16, bf16, the two fp8s, and the MX formats.

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

The OCP Microscaling (MX) formats, used for block-scaled fp8/fp4 training, stretch the layout:

* ``fp8_e8m0`` (``torch.float8_e8m0fnu``) is a *scale*: no sign bit, 8 exponent bits, no
  mantissa — every value is a power of two ``2^(field - 127)``, field 0 is ``2^-127`` (there is
  no zero and no subnormal), field 255 is NaN, there is no inf. torch's cast drops the sign,
  rounds to the nearer power of two (a tie, 1.5 × 2^e, goes up: the kept "last bit" is the
  implicit 1) and turns inf, NaN and overflow into NaN.
* ``fp4_e2m1`` is an MX *element*: 1 sign, 2 exponent and 1 mantissa bits, bias 1 — the 16
  values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}. No inf, no NaN: a cast saturates to ±6. torch has no
  one-value fp4 dtype (``float4_e2m1fn_x2`` packs two values in a byte and cannot be cast to), so
  its ``dtype`` is ``None`` and this module is how to round to it.

This module does that arithmetic on integers — no floating-point tricks — for one number
(:func:`decompose`) or a tensor (:func:`encode`, :func:`decode`, :func:`quantize`), and its tests
prove it equals torch's own casts bit for bit. Like torch, it stores a number as float32 first and
casts that (torch converts float64 to fp16/bf16/fp8 through float32 too).

It is also the one owner of every format fact the course uses: names and aliases
(:func:`get`, :func:`name_of`, :func:`dtype_name`, :func:`short_name`), a label and a colour per
format, the constants (``formats.FP16.max`` is 65504) and what storing a value does to it
(:func:`fate`). Other modules ask here instead of writing their own tables.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import torch

from .validate import check_int

__all__ = [
    "Format", "FORMATS", "MX_FORMATS", "ALL_FORMATS", "Decomposed", "decompose", "encode", "decode",
    "quantize", "get", "get_format", "name_of", "dtype_name", "short_name", "ulp", "representable",
    "neighbours", "running_sum", "OVERFLOW_POLICIES", "FATES", "fate", "fate_counts",
    "FP32", "TF32", "FP16", "BF16", "FP8_E4M3", "FP8_E5M2", "FP8_E8M0", "FP4_E2M1",
]

OVERFLOW_POLICIES = ("inf", "nan", "saturate")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: ``sign + exponent_bits + mantissa_bits`` bits.

    ``overflow`` says what a value too large for the format becomes, and with it the encoding:

    * ``"inf"``: IEEE 754 style (fp32, tf32, fp16, bf16, fp8 e5m2). The top exponent field is
      reserved for ±inf (mantissa 0) and NaN; overflow gives ±inf.
    * ``"nan"`` / ``"saturate"``: a *finite* format (fp8 e4m3fn): no inf, only the all-ones pattern
      is NaN. Overflow (and ±inf input) gives NaN (``"nan"``, torch < 2.12) or ±max
      (``"saturate"``, torch ≥ 2.12, pytorch/pytorch#178817).

    Three switches describe the MX formats (all True for the IEEE-like ones):

    * ``signed``: there is a sign bit. Without one (e8m0) torch's cast stores ``|x|``.
    * ``subnormals``: exponent field 0 holds zero and the subnormals. Without them (e8m0) field 0
      is an ordinary binade: its smallest value ``2^-bias`` and no zero.
    * ``nan``: some pattern means NaN. Without one (fp4 e2m1) ``overflow`` must be ``"saturate"``
      and a NaN cannot be stored (:func:`encode` raises).

    ``label`` is the short name plots and tables print, ``color`` the course's colour for it,
    ``aliases`` the other names (and torch dtypes) :func:`get` accepts for it.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    dtype: torch.dtype | None = None
    overflow: str = "inf"
    signed: bool = True
    subnormals: bool = True
    nan: bool = True
    label: str = ""
    color: str | None = None
    aliases: tuple = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        for field, lo, hi in (("exponent_bits", 2, 8), ("mantissa_bits", 0, 23)):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{field} must be an int, got {type(v).__name__}")
            if not lo <= v <= hi:
                raise ValueError(f"{field} must be in {lo}..{hi} (formats no wider than float32), got {v}")
        if self.dtype is not None and not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype or None, got {type(self.dtype).__name__}")
        if self.overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"overflow must be one of {OVERFLOW_POLICIES}, got {self.overflow!r}")
        for flag in ("signed", "subnormals", "nan"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if self.overflow == "inf" and self.mantissa_bits == 0:
            raise ValueError("overflow='inf' needs mantissa_bits >= 1: IEEE formats tell inf (mantissa 0) "
                             "from NaN (mantissa not 0) in the top exponent field")
        if self.overflow == "inf" and not self.nan:
            raise ValueError("an IEEE format (overflow='inf') has NaNs; use nan=True")
        if not self.nan and self.overflow != "saturate":
            raise ValueError(f"a format without NaN can only saturate on overflow (overflow='saturate'), "
                             f"got overflow={self.overflow!r}")
        if not isinstance(self.label, str) or (self.color is not None and not isinstance(self.color, str)):
            raise TypeError("label must be a str and color a str or None")
        if not isinstance(self.aliases, tuple) or not all(isinstance(a, (str, torch.dtype)) for a in self.aliases):
            raise TypeError("aliases must be a tuple of names (str) and torch dtypes")
        if not self.label:
            object.__setattr__(self, "label", self.name)

    # --- the numbers that follow from the field widths ---------------------------------------
    @property
    def bits(self) -> int:
        """Total width: sign (if any) + exponent + mantissa."""
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        """Stored exponent field = true exponent + bias; ``2^(E-1) - 1`` (15 for fp16)."""
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def has_inf(self) -> bool:
        return self.overflow == "inf"

    @property
    def has_zero(self) -> bool:
        """False only where exponent field 0 is a binade of its own (e8m0)."""
        return self.subnormals

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal: ``1 - bias`` (``-bias`` when field 0 is a normal binade)."""
        return 1 - self.bias if self.subnormals else -self.bias

    @property
    def max_code(self) -> int:
        """Bit pattern of the largest finite value (sign 0)."""
        all_ones = 2 ** (self.exponent_bits + self.mantissa_bits) - 1
        if self.has_inf:
            return ((2 ** self.exponent_bits - 1) << self.mantissa_bits) - 1
        return all_ones - 1 if self.nan else all_ones

    @property
    def inf_code(self) -> int | None:
        return (2 ** self.exponent_bits - 1) << self.mantissa_bits if self.has_inf else None

    @property
    def nan_code(self) -> int | None:
        """The NaN this module stores (sign 0): IEEE's quiet NaN, or the finite formats' single
        all-ones NaN; ``None`` for a format without NaN.

        torch's NaN payloads differ between formats and code paths; only NaN-ness is meaningful.
        """
        if not self.nan:
            return None
        if self.has_inf:
            return self.inf_code | (1 << (self.mantissa_bits - 1))
        return 2 ** (self.exponent_bits + self.mantissa_bits) - 1

    def _value_of_code(self, code: int) -> float:
        """The value of a positive, finite bit pattern (plain Python arithmetic)."""
        M = self.mantissa_bits
        field, frac = code >> M, code & (2 ** M - 1)
        if field == 0 and self.subnormals:
            return math.ldexp(frac, 1 - self.bias - M)
        return math.ldexp(2 ** M + frac, field - self.bias - M)

    @property
    def max(self) -> float:
        """Largest finite value: 1.11..1₂ × 2^emax (65504 for fp16, 57344 for e5m2); e4m3 keeps
        the top exponent for numbers but gives up 1.111₂ to NaN: 1.110₂ × 2^8 = 448."""
        return self._value_of_code(self.max_code)

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def smallest_subnormal(self) -> float:
        """The smallest positive value: ``2^(emin - M)``; without subnormals (e8m0) it is the
        smallest normal."""
        return 2.0 ** (self.emin - self.mantissa_bits) if self.subnormals else self.smallest_normal

    @property
    def eps(self) -> float:
        """The gap between 1 and the next value: ``2^-M``."""
        return 2.0 ** -self.mantissa_bits

    @property
    def overflow_threshold(self) -> float:
        """The tie between ``max`` and the next step up (``max + ulp(max)/2``: 65520 for fp16).

        Values above it overflow; a value exactly on it overflows when max's last kept bit is 1
        (IEEE formats: all ones, so 65520 → inf; e8m0: the implicit 1, so 1.5 × 2^127 → NaN) and
        rounds down to max when it is 0 (e4m3: 464).
        """
        return self.max + 2.0 ** (math.frexp(self.max)[1] - 1 - self.mantissa_bits) / 2

    @property
    def torch_name(self) -> str:
        """torch's name for the dtype (``"float16"``), or the format's name where torch has no
        one-value dtype for it (``"tf32"``, ``"fp4_e2m1"``): how benchmark results name formats."""
        return dtype_name(self.dtype) if self.dtype is not None else self.name

    @property
    def _tie_overflows(self) -> bool:
        return self.mantissa_bits == 0 or self.max_code & 1 == 1

    def __repr__(self) -> str:
        return (f"Format({self.name!r}, E={self.exponent_bits}, M={self.mantissa_bits}, "
                f"bias={self.bias}, max={self.max:g}, overflow={self.overflow!r})")


def _torch_e4m3_overflow() -> str:
    """Ask this torch what a too-large float32 becomes in float8_e4m3fn: 448 or NaN."""
    out = torch.tensor([1e4], dtype=torch.float32).to(torch.float8_e4m3fn).float()
    return "saturate" if out.item() == 448.0 else "nan"


# The one table. FORMATS holds the formats of lessons 01-09 (lesson 01 walks all of them);
# MX_FORMATS the OCP Microscaling scale and element formats of the fp8/fp4 lessons.
FP32 = Format("fp32", 8, 23, torch.float32, label="fp32", color="#1f77b4",
              aliases=("float32", "float", "single", torch.float32))
TF32 = Format("tf32", 8, 10, None, label="tf32", color="#17becf",      # fp32's range, fp16's precision:
              aliases=("tensorfloat32",))                               # a matmul input mode, no dtype
FP16 = Format("fp16", 5, 10, torch.float16, label="fp16", color="#d62728",
              aliases=("float16", "half", torch.float16))
BF16 = Format("bf16", 8, 7, torch.bfloat16, label="bf16", color="#2ca02c",
              aliases=("bfloat16", torch.bfloat16))
FP8_E4M3 = Format("fp8_e4m3", 4, 3, torch.float8_e4m3fn, overflow=_torch_e4m3_overflow(),
                  label="fp8 e4m3", color="#9467bd", aliases=("float8_e4m3fn", "e4m3", "fp8", torch.float8_e4m3fn))
FP8_E5M2 = Format("fp8_e5m2", 5, 2, torch.float8_e5m2, label="fp8 e5m2", color="#8c564b",
                  aliases=("float8_e5m2", "e5m2", torch.float8_e5m2))
FP8_E8M0 = Format("fp8_e8m0", 8, 0, torch.float8_e8m0fnu, overflow="nan", signed=False, subnormals=False,
                  label="e8m0", color="#e377c2", aliases=("float8_e8m0fnu", "e8m0", torch.float8_e8m0fnu))
FP4_E2M1 = Format("fp4_e2m1", 2, 1, None, overflow="saturate", nan=False, label="fp4 e2m1", color="#bcbd22",
                  aliases=("float4_e2m1fn", "e2m1", "fp4", "float4_e2m1fn_x2", torch.float4_e2m1fn_x2))

FORMATS: dict[str, Format] = {f.name: f for f in (FP32, TF32, FP16, BF16, FP8_E4M3, FP8_E5M2)}
MX_FORMATS: dict[str, Format] = {f.name: f for f in (FP8_E8M0, FP4_E2M1)}
ALL_FORMATS: dict[str, Format] = FORMATS | MX_FORMATS
_FP32 = FP32

_BY_ALIAS: dict = {}
for _f in ALL_FORMATS.values():
    for _key in (_f.name, *_f.aliases) + ((_f.dtype,) if _f.dtype is not None else ()):
        if _BY_ALIAS.setdefault(_key, _f) is not _f:
            raise RuntimeError(f"alias {_key!r} names two formats")
del _f, _key


def get(fmt) -> Format:
    """The :class:`Format` for a name (``"fp16"``), an alias (``"half"``, ``"float16"``,
    ``"bfloat16"``...), a torch dtype (``torch.float16``) or a Format itself."""
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        if fmt in _BY_ALIAS:
            return _BY_ALIAS[fmt]
        aliases = sorted(k for k in _BY_ALIAS if isinstance(k, str) and k not in ALL_FORMATS)
        raise ValueError(f"unknown format {fmt!r}; accepted: {', '.join(ALL_FORMATS)} "
                         f"(or an alias: {', '.join(aliases)}; or a Format object or a torch dtype)")
    if isinstance(fmt, torch.dtype):
        if fmt in _BY_ALIAS:
            return _BY_ALIAS[fmt]
        dts = [str(k) for k in _BY_ALIAS if isinstance(k, torch.dtype)]
        raise ValueError(f"no format for {fmt}; accepted dtypes: {', '.join(dts)}")
    raise TypeError(f"fmt must be a format name ({', '.join(ALL_FORMATS)}) or alias, a Format or a "
                    f"torch dtype, got {type(fmt).__name__}")


get_format = get


def name_of(fmt) -> str:
    """The course's name (a key of :data:`ALL_FORMATS`) for anything :func:`get` accepts:
    ``name_of(torch.bfloat16) == name_of("bfloat16") == "bf16"``."""
    return get(fmt).name


def dtype_name(dtype: torch.dtype) -> str:
    """torch's own name for a dtype without the ``torch.`` prefix: ``"float16"``, ``"int64"``."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    return str(dtype).removeprefix("torch.")


def short_name(dtype: torch.dtype) -> str:
    """A short name for any dtype: the format's name where there is one (``"bf16"``), else torch's
    name with ``float`` shortened to ``fp`` (``"fp64"``, ``"int32"``, ``"bool"``)."""
    name = dtype_name(dtype)
    if dtype in _BY_ALIAS:
        return _BY_ALIAS[dtype].name
    return "fp" + name[5:] if name.startswith("float") else name


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
    x32 = decode(_round_f64(_as_values(x), _FP32), _FP32)
    return _round_f64(x32, f)


def quantize(x, fmt) -> torch.Tensor:
    """The values (float64) that ``fmt`` stores for ``x``: what ``x.float().to(dtype)`` gives."""
    f = get(fmt)
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


def _past_max(a, f: Format):
    """``a`` (|float32 value|, a float or tensor) is beyond what rounds to ``f``'s max."""
    thr = f.overflow_threshold
    return (a > thr) | (a == thr) if f._tie_overflows else a > thr


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
    x32 = float(quantize(torch.tensor([xv], dtype=torch.float64), _FP32)[0])
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


# --- the fate of a value ----------------------------------------------------------------------
FATES = ("zero", "flush", "subnormal", "normal", "overflow", "nonfinite")
"""What storing a value does to it, in order of magnitude:

* ``zero``: it was 0 and stays 0 (e8m0 has no zero: there 0 becomes 2^-127, ``normal``);
* ``flush``: a nonzero value rounded to 0 (underflow: below half the smallest subnormal);
* ``subnormal``: it lands below the smallest normal, with fewer significant bits;
* ``normal``: a normal value, relative error at most eps/2 (in e8m0, whose smallest value is
  2^-127, tiny values are rounded *up* to it, and count as normal);
* ``overflow``: finite, but too large: it becomes inf, NaN or (saturating formats) ±max;
* ``nonfinite``: it was already inf or NaN.
"""


def _storable(x: torch.Tensor, f: Format) -> torch.Tensor:
    """``x`` (float32) stored in ``f`` and read back as float32, through torch's own cast where
    ``f`` has a castable dtype (fast, and equal to :func:`quantize`, which the tests prove)."""
    if f.dtype is not None and f.bits < 32:
        return x.to(f.dtype).to(torch.float32)
    if f is FP32:
        return x
    return quantize(torch.nan_to_num(x.double(), nan=0.0), f).to(torch.float32)


def fate(x, fmt="fp16", scale: float = 1.0):
    """What storing ``x × scale`` in ``fmt`` does to it: an entry of :data:`FATES`.

    ``x`` is a real number (the answer is a str) or a floating tensor (the answer is an int8
    tensor of indices into :data:`FATES`, one per element, same shape). The product ``x × scale``
    is formed in float32, like a scaled fp32 gradient, then cast to ``fmt`` (anything
    :func:`get` accepts).

    >>> fate(1e-8, "fp16"), fate(1e-6, "fp16"), fate(7e4, "fp16"), fate(7e4, "bf16")
    ('flush', 'subnormal', 'overflow', 'normal')
    """
    f = get(fmt)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a number, got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
        x = x.detach()
        return _fate_tensor(x, x.float() * float(scale), f)
    xv = torch.tensor([_as_float(x)], dtype=torch.float64)
    return FATES[int(_fate_tensor(xv, (xv * float(scale)).float(), f)[0])]


def _fate_tensor(x: torch.Tensor, y: torch.Tensor, f: Format) -> torch.Tensor:
    """Fates of the values ``x`` whose float32 product with the scale is ``y``."""
    q = _storable(torch.where(torch.isfinite(y), y, torch.zeros_like(y)), f)
    out = torch.full(x.shape, FATES.index("normal"), dtype=torch.int8, device=x.device)
    if f.subnormals:
        out[q.abs() < f.smallest_normal] = FATES.index("subnormal")
    out[(q == 0) & (x != 0)] = FATES.index("flush")
    if f.has_zero:                       # e8m0 has no zero: 0 is stored as 2^-127, a normal
        out[x == 0] = FATES.index("zero")
    out[_past_max(y.abs(), f) & torch.isfinite(x)] = FATES.index("overflow")
    out[~torch.isfinite(x)] = FATES.index("nonfinite")
    return out


def fate_counts(x, fmt="fp16", scale: float = 1.0) -> dict[str, int]:
    """``{fate: how many elements}`` of the tensor ``x × scale`` stored in ``fmt``, every fate
    of :data:`FATES` present (0 where none)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a floating-point tensor, got {type(x).__name__}")
    counts = torch.bincount(fate(x, fmt, scale).reshape(-1).long().cpu(), minlength=len(FATES)).tolist()
    return dict(zip(FATES, counts))
