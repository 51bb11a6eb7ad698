"""The :class:`Format` description and the one table of the course's formats, with lookups.

A format is its field widths plus a few switches (overflow policy, sign bit, subnormals, NaN);
every number about it (bias, max, smallest normal and subnormal, eps, the overflow tie) follows
from those. The table below is the only place a format is written down: its name, torch dtype,
label, colour and aliases. :func:`get` turns any of those back into the format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["OVERFLOW_POLICIES", "Format", "FP32", "TF32", "FP16", "BF16", "FP8_E4M3", "FP8_E5M2", "FP8_E8M0",
           "FP4_E2M1", "FORMATS", "MX_FORMATS", "ALL_FORMATS", "get", "name_of", "dtype_name",
           "short_name"]

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
