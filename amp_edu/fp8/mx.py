"""MX block scaling (OCP Microscaling Formats v1.0): 32 elements share one power-of-two scale.

Per-tensor and per-row scales are float32 numbers chosen for thousands of values at once; one
outlier shrinks the scale for all of them. The OCP MX specification (v1.0, 2023) makes the
block small and the scale cheap: every run of ``k = 32`` consecutive elements along the last
dim shares one scale stored as **e8m0** — 8 exponent bits, no sign, no mantissa: a power of two
``2^(e - 127)`` (``torch.float8_e8m0fnu``; the field 255 is NaN). Elements are fp8 (e4m3/e5m2),
fp6 or **fp4 e2m1** (±{0, 0.5, 1, 1.5, 2, 3, 4, 6}).

The spec's conversion (section 6.3), for one block ``V``::

    shared_exp = floor(log2(max |V|)) - emax_elem      # emax_elem: 8 (e4m3), 15 (e5m2), 2 (e2m1)
    X          = 2^shared_exp                          # clamped to e8m0's range 2^-127 .. 2^127
    P_i        = quantize_elem(V_i / X)                # round to nearest even, saturate at ±max

so the largest element lands in the element format's top binade ``[2^emax, 2^(emax+1))``.
Values between the format's max (448, 57344 or 6) and ``2^(emax+1)`` saturate: that is the
spec's choice, ``scale_mode="floor"`` (torchao's ``ScaleCalculationMode.FLOOR``, the default of
``to_mx``). The other rule, ``scale_mode="rceil"`` (torchao's ``RCEIL``, cuBLAS's documented
block-scaling rule and the default of torchao 0.18's MX configs, e.g.
``inference_workflow.py`` line 112), rounds the scale *up* so nothing saturates::

    X          = 2^ceil(log2(max|V| / max_elem))       # max_elem: 448, 57344, 6
    P_i        = quantize_elem(V_i / X)

Both are built here bit for bit as torchao 0.18's ``to_mx`` computes them
(``torchao/prototype/mx_formats/mx_tensor.py``), quirks included:

* FLOOR reads ``floor(log2(max|V|))`` from the float32 exponent field, so a subnormal amax
  counts as 2^-127; and it divides by ``max(X, 2^-126)`` (line 359, a Triton workaround): a
  block whose scale is 2^-127 stores elements twice too small (only blocks with amax below
  2^(-127 + emax_elem) are affected).
* RCEIL multiplies by ``1 / X``, except for the smallest scale (field 0), where it multiplies
  by 1 (line 198), and an inf amax, which gets field 254.
* A block holding a NaN gets the NaN scale (field 255) in both: every value of it
  dequantizes to NaN (torchao's ``test_exponent_nan_in`` and ``test_all_nan_blocks``).

fp4 e2m1 elements are rounded by :func:`amp_edu.formats.quantize` (nearest, ties to even,
saturating at 6), which equals torchao's integer rounding for every finite or infinite value;
in a NaN block the elements are kept NaN (torchao stores whatever its integer rounding makes of
NaN's bits, e.g. 1.5; the block dequantizes to NaN either way).

Format facts (maxima, the e2m1 grid) come from :mod:`amp_edu.formats`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import formats
from ..validate import check_int

__all__ = ["MX_ELEMENTS", "SCALE_MODES", "MXTensor", "e8m0_scale", "mx_quantize", "mx_dequantize",
           "mx_roundtrip", "E8M0_BIAS", "E8M0_NAN"]

E8M0_BIAS = formats.get("fp8_e8m0").bias          # 127: e8m0's field e stands for 2^(e - 127)
E8M0_NAN = 255                                     # e8m0's only NaN pattern
MX_ELEMENTS = ("fp8_e4m3", "fp8_e5m2", "fp4_e2m1")
SCALE_MODES = ("floor", "rceil")
_F32_MIN_NORMAL = formats.FP32.smallest_normal


def _elem(elem: str):
    if elem not in MX_ELEMENTS:
        raise ValueError(f"elem must be one of {MX_ELEMENTS}, got {elem!r}")
    return formats.get(elem)


def _emax(fmt) -> int:
    """Exponent of the largest normal binade: floor(log2(max)) (8 for e4m3, 15 e5m2, 2 e2m1)."""
    return math.frexp(fmt.max)[1] - 1


@dataclass(frozen=True)
class MXTensor:
    """``elements`` (float32 values on the element grid), ``scale_bits`` (uint8 e8m0 field of each
    block's scale, 255 = NaN), the element format name, the block size and the scale rule."""

    elements: torch.Tensor
    scale_bits: torch.Tensor
    elem: str
    block_size: int
    scale_mode: str = "floor"

    @property
    def exponents(self) -> torch.Tensor:
        """Each block's shared exponent (int32, ``field - 127``; 128 marks a NaN scale)."""
        return self.scale_bits.to(torch.int32) - E8M0_BIAS

    @property
    def scales_e8m0(self) -> torch.Tensor:
        """The shared scales as torch's e8m0 dtype."""
        return self.scale_bits.view(torch.float8_e8m0fnu)

    def scales(self) -> torch.Tensor:
        """The shared scales as float32 (``2^exponent``, NaN for field 255)."""
        s = torch.exp2(self.exponents.to(torch.float32))
        return torch.where(self.scale_bits == E8M0_NAN, torch.nan, s)

    def bits_per_element(self) -> float:
        """Storage cost: the element width plus 8 scale bits spread over the block."""
        return formats.get(self.elem).bits + 8 / self.block_size


def e8m0_scale(block_amax: torch.Tensor, elem: str, scale_mode: str = "floor") -> torch.Tensor:
    """The e8m0 field (uint8) of the shared scale of blocks with these amaxes, as torchao's ``to_mx``."""
    f = _elem(elem)
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"scale_mode must be one of {SCALE_MODES}, got {scale_mode!r}")
    a = block_amax.to(torch.float32)
    if scale_mode == "floor":
        field = (a.view(torch.int32) >> 23) & 0xFF                     # float32's biased exponent
        unbiased = torch.clamp(field - 127 - _emax(f), min=-E8M0_BIAS, max=E8M0_BIAS + 1)
        bits = (unbiased + E8M0_BIAS).to(torch.uint8)
    else:
        descale = a / f.max
        e = torch.clamp(torch.ceil(torch.log2(descale)), min=-E8M0_BIAS, max=E8M0_BIAS) + E8M0_BIAS
        bits = torch.where(torch.isinf(descale), 254, e.to(torch.uint8)).to(torch.uint8)
    return torch.where(torch.isnan(a), E8M0_NAN, bits).to(torch.uint8)


def _scaled_elements(blocks: torch.Tensor, bits: torch.Tensor, f, scale_mode: str) -> torch.Tensor:
    """``V_i / X`` as torchao computes it, clamped to the element format's range."""
    if scale_mode == "floor":
        x = (bits.to(torch.int32) << 23).view(torch.float32)           # 2^(field-127); 255 -> inf
        scaled = blocks / torch.clamp(x, min=_F32_MIN_NORMAL)
    else:
        rcp = torch.where(bits == 0, 1.0, torch.exp2(E8M0_BIAS - bits.to(torch.float32)))
        rcp = torch.where(bits == 254, 2.0 ** -127, rcp)
        scaled = blocks * torch.where(bits == E8M0_NAN, torch.nan, rcp)
    return scaled.clamp(-f.max, f.max)                                 # clamp keeps NaN


def mx_quantize(x: torch.Tensor, elem: str = "fp8_e4m3", block_size: int = 32,
                scale_mode: str = "floor") -> MXTensor:
    """Blocks of ``block_size`` along the last dim (which it must divide), one e8m0 scale each."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point tensor")
    block_size = check_int(block_size, "block_size", min=1)
    if x.dim() == 0 or x.shape[-1] % block_size:
        raise ValueError(f"the last dim of shape {tuple(x.shape)} must be a multiple of block_size={block_size}")
    f = _elem(elem)
    blocks = x.to(torch.float32).reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)
    bits = e8m0_scale(blocks.abs().amax(dim=-1, keepdim=True), elem, scale_mode)
    scaled = _scaled_elements(blocks, bits, f, scale_mode)
    if f.dtype is not None:                    # fp8 elements: torch's own cast
        elements = scaled.to(f.dtype).to(torch.float32)
    else:                                      # fp4 e2m1 has no castable torch dtype
        nan = torch.isnan(scaled)
        elements = torch.where(nan, torch.nan, formats.quantize(scaled.masked_fill(nan, 0), f).float())
    return MXTensor(elements.reshape(x.shape), bits.squeeze(-1), elem, block_size, scale_mode)


def mx_dequantize(q: MXTensor) -> torch.Tensor:
    """``P_i * 2^shared_exp`` for every element (float32, the original shape; NaN-scale blocks NaN)."""
    k = q.block_size
    blocks = q.elements.reshape(*q.elements.shape[:-1], -1, k)
    return (blocks * q.scales().unsqueeze(-1)).reshape(q.elements.shape)


def mx_roundtrip(x: torch.Tensor, elem: str = "fp8_e4m3", block_size: int = 32,
                 scale_mode: str = "floor") -> torch.Tensor:
    """``x`` after an MX cast and back (float32)."""
    return mx_dequantize(mx_quantize(x, elem, block_size, scale_mode))
