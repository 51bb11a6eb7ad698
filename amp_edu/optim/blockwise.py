"""Block-wise quantization of an optimizer state: codes, one scale per block, and a map back to floats.

Adam keeps two fp32 numbers per parameter (8 bytes). Quantizing them block-wise (Dettmers et al.
2021, "8-bit Optimizers via Block-wise Quantization", arXiv:2110.02861) stores each as a small code
and each block of ``block_size`` consecutive elements (in memory order) shares one fp32 scale, its
largest magnitude, so one outlier only coarsens its own block::

    blocks  = x.view(-1, block_size)
    scale   = blocks.abs().amax(-1).clip(1e-12)        # one fp32 per block
    codes   = nearest_code(blocks / scale, qmap)        # 8 or 4 bits per element
    x_back  = qmap[codes] * scale

Three kinds, as in torchao.optim 0.18 (``subclass_8bit.py``, ``subclass_4bit.py``, ``subclass_fp8.py``):

========  ==============================================  ==========  ====================
kind      codes                                           block       bytes per element
========  ==============================================  ==========  ====================
``8bit``  uint8 index into the 8-bit dynamic map          256         1 + 4/256
``4bit``  two 4-bit indices packed per uint8; first       128         0.5 + 4/128
          moment: 4-bit dynamic map, second: linear map
``fp8``   float8_e4m3fn values, scale = amax / 448        256         1 + 4/256
========  ==============================================  ==========  ====================

This module is the arithmetic only: :func:`quantize` (fp32 → codes and scales) and
:func:`dequantize` (back). :class:`~amp_edu.optim.state.QuantizedState` holds the result as a
tensor that PyTorch can save, move, slice and shard.
"""

from __future__ import annotations

import torch

from .qmaps import dynamic_map, linear_map, nearest_code

__all__ = ["QUANTIZED_STATES", "BLOCK_SIZES", "FP8", "qmap_for", "block_scale", "quantize", "dequantize", "codes_shape"]

#: The formats a quantized state comes in (the kinds of the table above); the optimizer recipes
#: ``states_<kind>`` (:mod:`amp_edu.recipes.optim`) are derived from them.
QUANTIZED_STATES = ("8bit", "4bit", "fp8")
BLOCK_SIZES = {"8bit": 256, "4bit": 128, "fp8": 256}   # torchao.optim 0.18's defaults (adam.py)
FP8 = torch.float8_e4m3fn


def qmap_for(kind: str, signed: bool) -> torch.Tensor | None:
    """The code book of ``kind`` (``None`` for fp8, whose code is the number itself)."""
    if kind == "8bit":
        return dynamic_map(signed)
    if kind == "4bit":
        return dynamic_map(True, 3, 4) if signed else linear_map(16)
    return None


def codes_shape(kind: str, shape: torch.Size) -> torch.Size:
    """The shape of the codes of a state of ``shape``: the same for 8 bits and fp8, a flat half
    for 4 bits (two codes in each byte, so the bytes cannot keep the state's shape)."""
    return torch.Size([shape.numel() // 2]) if kind == "4bit" else torch.Size(shape)


def block_scale(blocks: torch.Tensor) -> torch.Tensor:
    """Each row's largest magnitude, at least 1e-12 (so an all-zero block divides safely)."""
    return blocks.abs().amax(-1).clip(1e-12)


def quantize(x: torch.Tensor, kind: str, qmap: torch.Tensor | None, block_size: int):
    """``(codes, scale)`` of ``x`` (any float dtype, computed in fp32), blocks in memory order.

    ``codes`` has :func:`codes_shape`; ``scale`` is fp32, one per block. The same operations as
    torchao's ``copy_`` into its state subclasses, so the same bits."""
    blocks = x.float().reshape(-1, block_size)
    if kind == "fp8":
        scale = block_scale(blocks) / torch.finfo(FP8).max
        codes = (blocks / scale.view(-1, 1)).to(FP8).view(x.shape)
        return codes, scale
    scale = block_scale(blocks)
    codes = nearest_code(blocks / scale.view(-1, 1), qmap).view(-1)
    if kind == "4bit":
        codes = (codes[::2] << 4) | codes[1::2]                 # pack two per byte, high nibble first
        return codes, scale
    return codes.view(x.shape), scale


def dequantize(codes: torch.Tensor, scale: torch.Tensor, qmap: torch.Tensor | None, kind: str,
               block_size: int, shape: torch.Size) -> torch.Tensor:
    """fp32 values of ``shape``: ``qmap[code] * scale`` per block (fp8: ``code * scale``)."""
    if kind == "fp8":
        vals = codes.float().view(-1, block_size)
    else:
        if kind == "4bit":
            codes = torch.stack([codes >> 4, codes & 0b1111], dim=-1)   # unpack: high nibble first
        vals = qmap[codes.int()].view(-1, block_size)
    return (vals * scale.view(-1, 1)).view(shape)
