"""Graders for exercise 01 (number formats): decode bits by hand; predict what fp16 stores.

The expected answers come from :mod:`amp_edu.formats` (proven equal to torch's casts). The cases
start with the lesson's examples and continue with the ones a nearly-right answer gets wrong:
subnormals, ±0, the tie at 2^-25, the normal/subnormal tie, the overflow tie at 65520, NaN and
the sign bit — then every pattern of fp16, bf16 and fp8 e5m2, so nothing slips through.
"""

from __future__ import annotations

import functools
import math

import torch

from ..formats import FORMATS, decode as _decode_codes, decompose
from ..plans.runner import each
from .core import Check, judge_each
from .rules import Rule

__all__ = ["check_decode", "check_fp16_fate"]

# "Use plain Python arithmetic — no torch casts" (the exercise's rule): the casts are the answer.
RULES = (Rule("torch", (), "plain Python arithmetic, no torch casts"),
         Rule("numpy", (), "plain Python arithmetic, no numpy casts"),
         Rule("struct", (), "plain Python arithmetic, no struct casts"),
         Rule("amp_edu.formats", (), "plain Python arithmetic: amp_edu.formats is what the check compares with"))

_BY_WIDTHS = {(f.exponent_bits, f.mantissa_bits): f for f in FORMATS.values() if f.has_inf and f.bits <= 16}


# --- part A: decode -------------------------------------------------------------------------
def _group(code: int, E: int, M: int) -> str:
    s = format(code, f"0{1 + E + M}b")
    return f"{s[0]} {s[1:1 + E]} {s[1 + E:]}"


@functools.lru_cache(maxsize=None)
def _all_values(E: int, M: int) -> list[float]:
    f = _BY_WIDTHS[(E, M)]
    return _decode_codes(torch.arange(2 ** f.bits), f).tolist()


def _reference_decode(bits: str, E: int, M: int) -> float:
    return _all_values(E, M)[int(bits.replace(" ", ""), 2)]


def _same_value(got, expected) -> bool:
    """Exactly equal floats, NaN matching NaN and -0.0 told apart from 0.0."""
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return False
    got = float(got)
    if math.isnan(expected):
        return math.isnan(got)
    return got == expected and math.copysign(1.0, got) == math.copysign(1.0, expected)


def _mistakes(bits: str, E: int, M: int):
    """What the usual wrong decoders give for ``bits``, each with the hint that fixes it."""
    b = bits.replace(" ", "")
    s = -1.0 if b[0] == "1" else 1.0
    field, frac = int(b[1:1 + E], 2), int(b[1 + E:], 2)
    bias = 2 ** (E - 1) - 1
    top = field == 2 ** E - 1
    out = []
    if field == 0:
        out.append((s * (1 + frac / 2 ** M) * 2.0 ** -bias,
                    "exponent field 0 is a subnormal: no implicit leading 1 (0.mantissa, not 1.mantissa)"))
        out.append((s * (1 + frac / 2 ** M) * 2.0 ** (1 - bias),
                    "exponent field 0 is a subnormal: no implicit leading 1 (0.mantissa, not 1.mantissa)"))
        out.append((s * frac * 2.0 ** (-bias - M),
                    f"subnormals use the exponent 1 - bias = {1 - bias} (the same as the smallest normal), not -bias"))
        if frac == 0:
            out.append((0.0, "the sign bit counts for zero too: '1 00000 0000000000' is -0.0"))
    if not top and field > 0:
        out.append((s * (1 + frac / 2 ** M) * 2.0 ** (field - 2 ** (E - 1)),
                    f"the bias is 2^(E-1) - 1 = {bias} for {E} exponent bits, not 2^(E-1) = {2 ** (E - 1)}"))
        out.append((s * (frac / 2 ** M) * 2.0 ** (field - bias),
                    "normal numbers have an implicit leading 1: 1.mantissa"))
        if (E, M) != (5, 10):
            out.append((s * (1 + frac / 2 ** M) * 2.0 ** (field - 15),
                        f"the bias depends on exponent_bits: 2^(E-1) - 1 = {bias} here, not fp16's 15"))
    if top:
        out.append((s * (1 + frac / 2 ** M) * 2.0 ** (field - bias),
                    "an exponent field of all ones is special: inf if the mantissa is 0, else NaN"))
        out.append((math.nan if frac == 0 else s * math.inf,
                    "all-ones exponent: mantissa 0 is ±inf, any other mantissa is NaN"))
    if field or frac:
        out.append((-_reference_decode(bits, E, M), "the first bit is the sign: 1 means negative"))
    return out


def _decode_hint(case, expected, got) -> str:
    bits, E, M = case
    for value, hint in _mistakes(bits, E, M):
        if _same_value(got, value):
            return hint
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return "return the value as a Python float"
    return ("value = (-1)^sign × 1.mantissa × 2^(field - bias) for normals, "
            "× 0.mantissa × 2^(1 - bias) for subnormals (field 0); bias = 2^(E-1) - 1")


def _decode_cases():
    named = [
        ("0 01111 0000000000", 5, 10), ("1 10000 0000000000", 5, 10), ("0 01101 0101010101", 5, 10),
        ("0 11110 1111111111", 5, 10), ("0 00001 0000000000", 5, 10),
        ("0 00000 0000000001", 5, 10), ("0 00000 1000000000", 5, 10), ("0 00000 1111111111", 5, 10),
        ("1 00000 0000000011", 5, 10), ("0 00000 0000000000", 5, 10), ("1 00000 0000000000", 5, 10),
        ("0 11111 0000000000", 5, 10), ("1 11111 0000000000", 5, 10), ("0 11111 0000000001", 5, 10),
        ("1 11111 1000000000", 5, 10),
        ("0 01111111 0000000", 8, 7), ("1 10000000 1000000", 8, 7), ("0 11111110 1111111", 8, 7),
        ("0 00000001 0000000", 8, 7), ("0 00000000 0000001", 8, 7), ("1 00000000 0000000", 8, 7),
        ("0 11111111 0000000", 8, 7), ("0 11111111 0000001", 8, 7),
        ("0 11110 11", 5, 2), ("0 00000 01", 5, 2), ("1 11111 00", 5, 2), ("0 11111 10", 5, 2),
    ]
    yield from named
    for (E, M) in [(5, 10), (8, 7), (5, 2)]:                      # then every pattern
        for code in range(2 ** (1 + E + M)):
            yield (_group(code, E, M), E, M)


def _judge_decode(cases, outcomes) -> str:
    return judge_each("decode", cases, outcomes, _reference_decode, compare=_same_value, hint=_decode_hint)


check_decode = Check("decode", cases=lambda seed: list(_decode_cases()), plan=each, judge=_judge_decode,
                     rules=RULES)
"""Grade ``decode(bits, exponent_bits, mantissa_bits) -> float`` on fp16, bf16 and fp8 e5m2."""


# --- part B: fp16_fate ----------------------------------------------------------------------
_FATES = ("zero", "subnormal", "normal", "inf", "nan")


def _f32(x: float) -> float:
    return torch.tensor(x, dtype=torch.float32).item()


def _next32(x: float, toward: float) -> float:
    return torch.nextafter(torch.tensor(x, dtype=torch.float32), torch.tensor(toward)).item()


def _reference_fate(x: float) -> str:
    return decompose(x, "fp16").kind


def _drawn_fates(seed: int, n: int = 64) -> list[float]:
    """``n`` float32 values drawn from ``seed``: magnitudes spread over 2^-30 .. 2^20 (both fp16
    edges and the subnormal range), either sign, and neighbours of the ties at 2^-25 and 65520."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.empty(n).uniform_(-30.0, 20.0, generator=g))
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    near = torch.tensor([2.0 ** -25, 65520.0]).repeat(4) * (1 + (torch.rand(8, generator=g) - 0.5) * 2.0 ** -9)
    return (torch.cat([mag * sign, near])).float().tolist()


def _fate_cases(seed: int):
    t25, t14 = 2.0 ** -25, 2.0 ** -14 - 2.0 ** -25                # the two low ties
    cases = [1.0, 1e-8, 1e5, 6e-5, 2.0 ** -24, t25, 3e-8, 65519.99, 65520.0,
             0.0, -0.0, 2.0 ** -26, _next32(t25, 1.0), _next32(t25, 0.0), 1.5 * 2.0 ** -24, 5.96e-8,
             t14, _next32(t14, 0.0), 2.0 ** -14, -3e-5, -1e-8, -65520.0, _next32(65520.0, 0.0),
             65504.0, 2.0 ** 16, math.inf, -math.inf, math.nan, -2.0 ** -25, -t14]
    return [(_f32(c),) for c in cases + _drawn_fates(seed)]


def _fate_hint(case, expected, got) -> str:
    (x,) = case
    a = abs(x)
    if got not in _FATES:
        return f"return one of {_FATES}"
    if math.isnan(x):
        return "NaN stays NaN: test math.isnan(x) first (every comparison with NaN is False)"
    if x < 0 and got == "zero" != expected:                     # x itself compared with the thresholds
        return "the sign does not change the fate: work with abs(x)"
    if math.isinf(x):
        return "inf stays inf"
    if a == 0:
        return "0.0 and -0.0 are both 'zero'"
    if a == 2.0 ** -25:
        return ("2^-25 is exactly halfway between 0 and 2^-24, a tie: ties go to the neighbour whose last "
                "mantissa bit is 0, and that is 0")
    if 2.0 ** -25 < a < 2.0 ** -24:
        return ("values above 2^-25 round UP to 2^-24, the smallest subnormal; only values up to 2^-25 become 0 "
                "(the '6e-8' is the smallest value fp16 stores, not where zero starts)")
    if a < 2.0 ** -14 and got == "zero" and expected == "subnormal":
        return ("from 2^-24 ≈ 5.96e-8, the smallest subnormal, up to 2^-14 fp16 stores nonzero subnormals: "
                "'about 6e-8' is the smallest value fp16 stores, so it does not become zero")
    if a < 2.0 ** -25:
        return "below half the smallest subnormal (2^-25) every value rounds to 0"
    if 2.0 ** -14 - 2.0 ** -24 < a < 2.0 ** -14 or a == 2.0 ** -14 - 2.0 ** -25:
        return ("the largest subnormal is 2^-14 - 2^-24 (mantissa all ones, odd); halfway between it and "
                "2^-14 is a tie that goes to 2^-14 (mantissa 0, even): normal from 2^-14 - 2^-25 on")
    if a < 2.0 ** -14:
        return "below the smallest normal 2^-14 (≈ 6.1e-5) a nonzero fp16 is subnormal"
    if 65504 < a < 65520:
        return "65504 is the max, but values below the tie at 65520 round DOWN to it: still normal"
    if a == 65520:
        return ("65520 is the tie between 65504 (mantissa all ones, odd) and the next step 65536, which does "
                "not exist: ties go to even, so it overflows to inf")
    if a > 65520:
        return "beyond 65520 every value overflows to inf"
    return "round x to the nearest fp16 value first (ties to even), then classify what you get"


def _judge_fate(cases, outcomes) -> str:
    return judge_each("fp16_fate", cases, outcomes, _reference_fate, hint=_fate_hint,
                      compare=lambda got, exp: type(got) is str and got == exp)


check_fp16_fate = Check("fp16_fate", cases=_fate_cases, plan=each, judge=_judge_fate, rules=RULES)
"""Grade ``fp16_fate(x) -> 'zero' | 'subnormal' | 'normal' | 'inf' | 'nan'`` for fp16's rounding of x."""
