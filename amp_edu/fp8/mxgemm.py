"""An MX-scaled GEMM, emulated: OCP microscaling (32-element blocks along K, an e8m0 scale each)
inside a linear layer's three GEMMs.

An MX tensor keeps one power-of-two scale per 32 consecutive elements of the GEMM's reduction dim
(:mod:`~amp_edu.fp8.mx` casts it, bit-identical to torchao's ``to_mx`` under either scale rule).
Blackwell's block-scaled Tensor Cores multiply fp8 elements, whose products are exact, apply each
block's two scales and accumulate in float32. Applied to the *dequantized* operands — each element
times its block's ``2^e``, exact in float32 — a float32 matmul computes the same sum, which is how
this module emulates it on any device::

    a = mx_cast(x, dim=1, ...)            # blocks of 32 along x's K (its columns)
    b = mx_cast(w_t, dim=0, ...)          # blocks of 32 along w_t's K (its rows)
    out = mx_mm(a, b)                     # dequantized a @ dequantized b, in float32

K is padded with zeros to a multiple of 32 (zeros add nothing); the real kernels require it.
``Float8Linear`` with ``Granularity.MX`` (the ``mxfp8`` recipe) runs its three GEMMs this way, with
the config's ``mx_scale_mode`` ("rceil", torchao's ``MXFP8Linear`` default, or "floor", the OCP
spec's rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import formats
from .mx import mx_dequantize, mx_quantize

__all__ = ["MX_BLOCK", "MXOperand", "mx_cast", "mx_mm"]

MX_BLOCK = 32


@dataclass
class MXOperand:
    """A GEMM operand after an MX cast: its dequantized values (float32, the original shape) and
    the dtype the product goes back to."""

    values: torch.Tensor
    orig_dtype: torch.dtype

    def t(self) -> "MXOperand":
        """The transpose (its blocks stay along the dim they were made on)."""
        return MXOperand(self.values.t(), self.orig_dtype)


def mx_cast(t: torch.Tensor, dim: int, fp8_dtype: torch.dtype, scale_mode: str) -> MXOperand:
    """``t`` (2-D) cast to MX ``fp8_dtype`` elements with one e8m0 scale per 32 elements along ``dim``
    (the GEMM's reduction dim), and back to float32."""
    if dim not in (0, 1) or t.dim() != 2:
        raise ValueError(f"mx_cast takes a 2-D tensor and dim 0 or 1, got shape {tuple(t.shape)}, dim {dim!r}")
    along = t if dim == 1 else t.t()                        # the reduction dim last
    k = along.shape[1]
    padded = torch.nn.functional.pad(along.float(), (0, -k % MX_BLOCK))
    q = mx_quantize(padded, formats.name_of(fp8_dtype), MX_BLOCK, scale_mode)
    values = mx_dequantize(q)[:, :k]
    return MXOperand(values if dim == 1 else values.t(), t.dtype)


def mx_mm(a: MXOperand, b: MXOperand) -> torch.Tensor:
    """``a @ b`` of two MX operands: exact block products accumulated in float32."""
    return (a.values @ b.values).to(a.orig_dtype)
