"""A block-scaled fp8 GEMM: DeepSeek-V3's 1×128 activation tiles times 128×128 weight blocks.

:mod:`~amp_edu.fp8.blocks` measures what fine-grained scales do to a *round trip*; this module
multiplies with them. DeepSeek-V3 (arXiv:2412.19437, section 3.3.2) casts activations with one
scale per 1×128 tile (a row's 128 consecutive K-elements) and weights with one per 128×128 block.
A scale then changes along K, so it cannot be applied once after the whole product as per-tensor
and row-wise GEMMs do: it is applied **inside the K loop**, once per 128-element chunk::

    for each chunk k of 128 along K:
        P_k   = A8[:, k] @ B8[k, :]                  # fp8 products, summed on the Tensor Cores
        out  += P_k * (1/sa[:, k]) * (1/sb[k, :])     # promoted to fp32 and scaled on CUDA cores

which is also DeepSeek-V3's "promotion to CUDA cores": every 128 elements the Tensor Cores'
limited-precision partial sum is moved into a float32 accumulator. Here each ``P_k`` is summed in
float32 (the products of fp8 values are exact), or with a narrow running sum
(``significand_bits``, see :mod:`~amp_edu.fp8.accumulate`) to emulate the Tensor Cores.

Scales are quantization scales ``448 / amax`` (:func:`~amp_edu.fp8.scaling.amax_to_scale`), in
float32. :func:`block_cast` pads a tensor with zeros to whole tiles (zeros add nothing to the
sums; a GPU kernel would require the sizes instead) and remembers its shape, so any K and N work
here. ``Float8Linear`` with ``Granularity.BLOCKWISE`` runs its three GEMMs through this loop:
1×128 tiles along each GEMM's reduction dim for activations and gradients (128×1 tiles of ``x``
and ``dY`` for the weight gradient, whose K is the token count), 128×128 blocks for weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..validate import check_int
from .accumulate import narrow_accumulate_mm
from .cast import to_fp8_saturated
from .scaling import amax_to_scale

__all__ = ["TILE", "BlockFloat8", "block_cast", "block_scaled_mm"]

TILE = 128


@dataclass(frozen=True)
class BlockFloat8:
    """fp8 ``data`` (2-D, padded to whole tiles) with one float32 quantization ``scale`` per
    ``tile = (rows, cols)`` block; ``shape`` is the unpadded shape, ``orig_dtype`` the dtype cast from."""

    data: torch.Tensor
    scale: torch.Tensor
    tile: tuple[int, int]
    shape: tuple[int, int]
    orig_dtype: torch.dtype = torch.float32

    def dequantize(self) -> torch.Tensor:
        r, c = self.tile
        s = self.scale.repeat_interleave(r, 0).repeat_interleave(c, 1)
        return (self.data.float() / s)[:self.shape[0], :self.shape[1]]

    def t(self) -> "BlockFloat8":
        """The transpose: tiles and scales transposed with the data."""
        return BlockFloat8(self.data.t(), self.scale.t(), self.tile[::-1], self.shape[::-1], self.orig_dtype)


def block_cast(x: torch.Tensor, tile: tuple[int, int], fp8_dtype: torch.dtype = torch.float8_e4m3fn) -> BlockFloat8:
    """``x`` (2-D) cast with one scale per ``tile``: ``(1, 128)`` for activations, ``(128, 128)``
    for weights; padded with zeros to whole tiles."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise TypeError("x must be a 2-D floating-point tensor")
    r, c = (check_int(t, "tile", min=1) for t in tile)
    m, n = x.shape
    xp = torch.nn.functional.pad(x.float(), (0, -n % c, 0, -m % r))
    mp, np_ = xp.shape
    blocks = xp.reshape(mp // r, r, np_ // c, c)
    scale = amax_to_scale(blocks.abs().amax(dim=(1, 3)), fp8_dtype)            # (m/r, n/c)
    data = to_fp8_saturated(blocks * scale[:, None, :, None], fp8_dtype).reshape(mp, np_)
    return BlockFloat8(data, scale, (r, c), (m, n), x.dtype)


def block_scaled_mm(a: BlockFloat8, b: BlockFloat8, *, significand_bits: int | None = None) -> torch.Tensor:
    """``a @ b`` (float32) with ``a`` in (1, 128) tiles and ``b`` (K, N) in (128, bn) blocks, the
    scales applied per 128-element chunk of K inside the loop; ``significand_bits`` emulates a
    narrow Tensor Core accumulator within each chunk (None: float32)."""
    if not (isinstance(a, BlockFloat8) and isinstance(b, BlockFloat8)):
        raise TypeError("block_scaled_mm takes two BlockFloat8 operands (see block_cast)")
    if a.tile != (1, TILE) or b.tile[0] != TILE:
        raise ValueError(f"a needs (1, {TILE}) tiles and b ({TILE}, n) blocks, got {a.tile} and {b.tile}")
    (m, k), n = a.data.shape, b.data.shape[1]
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"block_scaled_mm needs (m, k) @ (k, n), got {a.shape} @ {b.shape}")
    inv_b = b.scale.reciprocal().repeat_interleave(b.tile[1], 1)               # (K/128, N)
    inv_a = a.scale.reciprocal()                                               # (M, K/128)
    out = torch.zeros(m, n)
    for j in range(k // TILE):
        a8 = a.data[:, j * TILE:(j + 1) * TILE].float()
        b8 = b.data[j * TILE:(j + 1) * TILE].float()
        part = a8 @ b8 if significand_bits is None else narrow_accumulate_mm(a8, b8, significand_bits)
        out += part * inv_a[:, j:j + 1] * inv_b[j:j + 1]
    return out[:a.shape[0], :b.shape[1]]
