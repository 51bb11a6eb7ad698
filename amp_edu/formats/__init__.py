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

The package: :mod:`.format` (the :class:`Format` description, the table, the lookups),
:mod:`.rounding` (the integer arithmetic), :mod:`.grid` (ulp, representable values, the
lost-update band, the squared-gradient flush cut-off, and :func:`round_to_grid`: nearest or
stochastic rounding onto a small format's grid by table), :mod:`.fate` and :mod:`.fields` (one
number field by field); every name is importable from ``amp_edu.formats``.
"""

from .fate import FATES, fate, fate_counts
from .fields import Decomposed, decompose
from .format import (ALL_FORMATS, BF16, FORMATS, FP4_E2M1, FP8_E4M3, FP8_E5M2, FP8_E8M0, FP16, FP32, MX_FORMATS,
                     OVERFLOW_POLICIES, TF32, Format, dtype_name, get, name_of, short_name)
from .grid import (ROUNDINGS, lost_update_band, neighbours, representable, round_to_grid, running_sum,
                   square_flush_cutoff, ulp)
from .rounding import decode, encode, quantize

__all__ = [
    "Format", "FORMATS", "MX_FORMATS", "ALL_FORMATS", "Decomposed", "decompose", "encode", "decode",
    "quantize", "get", "name_of", "dtype_name", "short_name", "ulp", "representable",
    "neighbours", "running_sum", "lost_update_band", "square_flush_cutoff", "ROUNDINGS", "round_to_grid",
    "OVERFLOW_POLICIES", "FATES", "fate", "fate_counts",
    "FP32", "TF32", "FP16", "BF16", "FP8_E4M3", "FP8_E5M2", "FP8_E8M0", "FP4_E2M1",
]
