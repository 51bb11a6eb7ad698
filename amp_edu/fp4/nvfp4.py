"""NVFP4: fp4 e2m1 elements in 16-element blocks, an e4m3 scale per block and an fp32 scale per tensor.

NVIDIA's 4-bit format for Blackwell GPUs differs from OCP MXFP4 (:mod:`~amp_edu.fp8.mx`) in two
ways: blocks of 16 instead of 32, and a block scale that is an **e4m3** number (3 mantissa bits)
instead of a bare power of two. e4m3's own range (2^-9 .. 448) is small, so a second, per-tensor
float32 scale moves the block scales into it (two-level scaling)::

    per_tensor = amax(x) / (448 * 6)                     # e4m3's max times e2m1's max
    block      = e4m3( amax(block) / 6 / per_tensor )    # clamped to [2^-6, 448]
    P_i        = e2m1( V_i * ((1 / per_tensor) / block) )   # saturate at ±6, nearest even
    V_i       ≈ P_i * per_tensor * block

Without a per-tensor scale the block scale is ``e4m3(amax(block) / 6)`` and the elements are
``V_i * (1 / block)``. The arithmetic is written exactly as torchao 0.18's ``nvfp4_quantize`` and
``NVFP4Tensor.dequantize`` (``torchao/prototype/mx_formats/nvfp4_tensor.py``) compute it,
reciprocals included, so the bits agree (``tests/recipes/test_fp4.py``). The e2m1 rounding is
:func:`amp_edu.formats.round_to_grid` (the values of :func:`amp_edu.formats.quantize`, faster);
the block scales use torch's own e4m3 cast.

Two options go beyond torchao 0.18's ``nvfp4_quantize``, for NVFP4 *training*
(:mod:`~amp_edu.fp4.linear`), following Transformer Engine's ``NVFP4BlockScaling`` recipe
(torchao 0.18 has both in another prototype, ``torchao/prototype/moe_training/nvfp4_training/``,
as Triton kernels for Blackwell GPUs only):

* ``rounding="stochastic"`` rounds each scaled element to one of its two e2m1 neighbours at
  random, up with probability equal to its fractional distance (unbiased; TE does it for
  gradients). ``generator`` is then required: the draws are reproducible.
* ``tile=(16, 16)`` gives one block scale to each 16×16 tile instead of each 1×16 row piece
  (TE's 2-D weight quantization, ``quant_tile_shape=(16, 16)`` in its reference quantizer,
  ``transformer_engine/pytorch/custom_recipes/reference_nvfp4.py`` lines 34-46 and 672-686 at
  commit d0067d0). A tile's amax is symmetric in its two axes, so the quantized ``W`` and the
  quantized ``W.T`` are transposes of each other: forward and backward see one weight.
  ``block_scales`` keeps its per-row layout, each tile's scale repeated on its 16 rows (as TE's
  reference stores it).

``rounding="nearest"`` with the default ``tile=(1, 16)`` is the torchao computation above, unchanged.

e2m1 has no NaN. Blackwell's saturating conversion turns a NaN into +6 (TE's software version
says so, ``ptx.cuh`` lines 528-530 at d0067d0). Here a NaN stays NaN in the float32
``elements``, so a run that diverges shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import formats

__all__ = ["NVFP4_BLOCK", "TILES", "NVFP4Tensor", "per_tensor_scale", "nvfp4_quantize"]

NVFP4_BLOCK = 16
TILES = ((1, NVFP4_BLOCK), (NVFP4_BLOCK, NVFP4_BLOCK))   # elements sharing one block scale: 1×16 or 16×16
_E4 = torch.float8_e4m3fn
_E4_MAX = formats.FP8_E4M3.max                 # 448
_E4_TINY = formats.FP8_E4M3.smallest_normal    # 2^-6: torchao's floor under a block scale
_F4_MAX = formats.FP4_E2M1.max                 # 6


@dataclass(frozen=True)
class NVFP4Tensor:
    """``elements`` (float32 values on the e2m1 grid), ``block_scales`` (e4m3, one per 16 along the
    last dim), ``per_tensor`` (float32 0-dim, or None for one-level scaling)."""

    elements: torch.Tensor
    block_scales: torch.Tensor
    per_tensor: torch.Tensor | None = None

    def scales(self) -> torch.Tensor:
        """The float32 scale of each block: ``per_tensor * block`` (torchao's ``get_hp_scales``)."""
        s = self.block_scales.to(torch.float)
        return s if self.per_tensor is None else self.per_tensor * s

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        e = self.elements
        blocks = e.reshape(*e.shape[:-1], -1, NVFP4_BLOCK) * self.scales().unsqueeze(-1).to(torch.float32)
        return blocks.reshape(e.shape).to(dtype)

    @staticmethod
    def bits_per_element() -> float:
        """4 element bits plus an 8-bit scale per 16 (the per-tensor scale is negligible)."""
        return formats.FP4_E2M1.bits + 8 / NVFP4_BLOCK


def per_tensor_scale(amax: torch.Tensor) -> torch.Tensor:
    """``amax / (448 * 6)`` in float32: lets the largest block scale use all of e4m3's range."""
    return amax.to(torch.float32) / (_E4_MAX * _F4_MAX)


def nvfp4_quantize(x: torch.Tensor, per_tensor: torch.Tensor | None = None, *, rounding: str = "nearest",
                   generator: torch.Generator | None = None, tile: tuple = (1, NVFP4_BLOCK)) -> NVFP4Tensor:
    """``x`` (2-D or 3-D, last dim a multiple of 16) in NVFP4; ``per_tensor`` from
    :func:`per_tensor_scale` for two-level scaling, or None for block scales only.

    ``rounding``: ``"nearest"`` (ties to even, torchao's) or ``"stochastic"`` (with ``generator``,
    a ``torch.Generator``). ``tile``: ``(1, 16)`` or ``(16, 16)`` (2-D ``x`` whose row count is a
    multiple of 16)."""
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError("x must be a float32 or bfloat16 tensor")
    if x.dim() not in (2, 3) or x.shape[-1] % NVFP4_BLOCK:
        raise ValueError(f"x must be 2-D or 3-D with a last dim that is a multiple of {NVFP4_BLOCK}, "
                         f"got shape {tuple(x.shape)}")
    if per_tensor is not None and (not isinstance(per_tensor, torch.Tensor) or per_tensor.numel() != 1):
        raise TypeError("per_tensor must be a tensor holding one value (see per_tensor_scale), or None")
    if rounding not in formats.ROUNDINGS:
        raise ValueError(f"rounding must be one of {formats.ROUNDINGS}, got {rounding!r}")
    if rounding == "stochastic" and not isinstance(generator, torch.Generator):
        raise TypeError("rounding='stochastic' needs generator=torch.Generator(...) (its draws are reproducible)")
    tile = tuple(tile) if isinstance(tile, (tuple, list)) else tile
    if tile not in TILES:
        raise ValueError(f"tile must be one of {TILES}, got {tile!r}")
    if tile == TILES[1] and (x.dim() != 2 or x.shape[0] % NVFP4_BLOCK):
        raise ValueError(f"tile=(16, 16) needs a 2-D x with a row count that is a multiple of {NVFP4_BLOCK}, "
                         f"got shape {tuple(x.shape)}")
    data = x.float().reshape(x.shape[0], -1, NVFP4_BLOCK)
    if tile == TILES[0]:
        amax = torch.amax(torch.abs(data), dim=-1)
    else:                                                   # one amax per 16×16 tile, repeated on its rows
        tiles = data.reshape(x.shape[0] // NVFP4_BLOCK, NVFP4_BLOCK, -1, NVFP4_BLOCK)
        amax = torch.amax(torch.abs(tiles), dim=(1, 3)).repeat_interleave(NVFP4_BLOCK, dim=0)
    block = amax / _F4_MAX
    if per_tensor is None:
        block8 = torch.clamp(block, min=_E4_TINY, max=_E4_MAX).to(_E4)
        scaled = data * (1.0 / block8.to(torch.float32)).unsqueeze(-1)
    else:
        block8 = torch.clamp(block / per_tensor, min=_E4_TINY, max=_E4_MAX).to(_E4)
        scaled = data * ((1.0 / per_tensor) / block8.to(torch.float32)).unsqueeze(-1)
    scaled = torch.clamp(scaled, -_F4_MAX, _F4_MAX).reshape(x.shape)
    nan = torch.isnan(scaled)
    has_nan = bool(nan.any())           # e2m1 has no NaN: keep NaN in the float32 elements, round the rest
    elements = formats.round_to_grid(scaled.masked_fill(nan, 0) if has_nan else scaled, formats.FP4_E2M1, rounding,
                                     generator=generator, dtype=torch.float32)
    if has_nan:
        elements = torch.where(nan, torch.nan, elements)
    return NVFP4Tensor(elements, block8.reshape(*x.shape[:-1], -1), per_tensor)
