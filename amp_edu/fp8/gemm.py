"""The scaled fp8 matmul: ``torch._scaled_mm`` with the layouts and scales it expects.

``torch._scaled_mm(a, b, scale_a, scale_b, out_dtype)`` multiplies two fp8 matrices, accumulates
in float32 and multiplies the result by ``scale_a * scale_b``. Its scales are *dequantization*
factors (cuBLAS's convention), so we pass the reciprocals of the quantization scales we cast
with: ``a ≈ a_fp8 / sa`` and ``b ≈ b_fp8 / sb`` give ``a @ b ≈ (a_fp8 @ b_fp8) * (1/sa) * (1/sb)``.

Rules the kernel imposes (on GPUs; the CPU kernel accepts more, we follow the GPU's so one code
path runs everywhere): ``a`` row-major, ``b`` column-major; scales either both per tensor (0-dim)
or per row of ``a`` (shape ``(M, 1)``) and per column of ``b`` (``(1, N)``).

What torchao 0.18 does, which we copy so the bits agree:

* Per-row scales without ``use_fast_accum`` (the two backward GEMMs): the GPU's row-wise kernel
  is slow then, so the matmul runs with unit scales and the ``1/sa * 1/sb`` product is applied
  afterwards, in the output dtype.
* Per-row scales with a float32 or float16 output: the kernel is asked for bfloat16 and the
  result converted, because the row-wise kernel has no float32 output (pytorch/pytorch#156771).
  So a row-wise Float8Linear in float32 still rounds its GEMM results to bfloat16.
"""

from __future__ import annotations

import torch

from .cast import Float8Tensor

__all__ = ["scaled_mm", "is_row_major"]


def is_row_major(stride) -> bool:
    """A 2-D stride is row-major when rows are far apart and elements of a row adjacent."""
    return stride[0] > stride[1] and stride[1] == 1


def scaled_mm(a: Float8Tensor, b: Float8Tensor, *, out_dtype: torch.dtype | None = None,
              use_fast_accum: bool = False) -> torch.Tensor:
    """``a @ b`` for two :class:`Float8Tensor` matrices, in ``out_dtype`` (default ``a``'s original).

    Both operands per tensor, or ``a`` per row and ``b`` per column; anything else is a ValueError.
    """
    if not (isinstance(a, Float8Tensor) and isinstance(b, Float8Tensor)):
        raise TypeError("scaled_mm takes two Float8Tensor operands (see amp_edu.fp8.cast_to_float8)")
    if a.data.dim() != 2 or b.data.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_mm needs matrices (m, k) @ (k, n), got {tuple(a.shape)} @ {tuple(b.shape)}")
    out_dtype = a.orig_dtype if out_dtype is None else out_dtype
    a_data = a.data if is_row_major(a.data.stride()) else a.data.contiguous()
    b_data = b.data.t().contiguous().t() if is_row_major(b.data.stride()) else b.data
    inv_a, inv_b = a.scale.reciprocal(), b.scale.reciprocal()
    rowwise = a.scale.shape == (a.shape[0], 1) and b.scale.shape == (1, b.shape[1])
    if not rowwise and (a.scale.dim() != 0 or b.scale.dim() != 0):
        raise ValueError("scales must be both per tensor (0-dim) or per row of a (m, 1) and per "
                         f"column of b (1, n); got {tuple(a.scale.shape)} and {tuple(b.scale.shape)}")
    post = None
    if rowwise and not use_fast_accum:
        post = inv_a * inv_b                        # applied after the GEMM, in the output dtype
        inv_a = inv_b = inv_a.new_ones(())
    kernel_dtype = torch.bfloat16 if rowwise and out_dtype in (torch.float16, torch.float32) else out_dtype
    out = torch._scaled_mm(a_data, b_data, scale_a=inv_a, scale_b=inv_b, out_dtype=kernel_dtype,
                           use_fast_accum=use_fast_accum)
    if post is not None:
        out *= post
    return out.to(out_dtype)
