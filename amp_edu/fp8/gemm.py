"""The scaled fp8 matmul: ``torch._scaled_mm`` with the layouts, scales and shapes it expects.

``torch._scaled_mm(a, b, scale_a, scale_b, out_dtype)`` multiplies two fp8 matrices, accumulates
in float32 and multiplies the result by ``scale_a * scale_b``. Its scales are *dequantization*
factors (cuBLAS's convention), so we pass the reciprocals of the quantization scales we cast
with: ``a ≈ a_fp8 / sa`` and ``b ≈ b_fp8 / sb`` give ``a @ b ≈ (a_fp8 @ b_fp8) * (1/sa) * (1/sb)``.

Rules the GPU kernel imposes, which :func:`scaled_mm` enforces on every device (the CPU kernel
accepts more; we follow the GPU's so a run that works here works there):

* ``a`` row-major, ``b`` column-major (copied into those layouts when they are not);
* shapes: ``a``'s K and both of ``b``'s dims divisible by 16 (torch 2.13's shape rules for
  ``_scaled_mm``, ``torch/_meta_registrations.py`` lines 6985-7001, applied to every device but
  the CPU: "Expected self.size(1) to be divisible by 16", "Expected both dimensions of mat2 to be
  divisible by 16"; the same lines require the row- and column-major layouts). ``pad_inner_dim=True`` pads K with zeros up to a multiple of 16 instead,
  as torchao's ``Float8LinearConfig.pad_inner_dim`` does (``pad_tensor_for_matmul`` in
  ``torchao/float8/float8_utils.py``); zeros add nothing to the sums. ``b``'s N is never padded,
  so it must be a multiple of 16 either way. For a linear layer that means in- and
  out-features divisible by 16; the token count only needs padding (it is K of grad_weight);
* scales: both per tensor (0-dim), or ``a`` per row ``(M, 1)`` and ``b`` per column ``(1, N)``.
  A mixed pair (one operand axiswise, the other per tensor, as in torchao's
  ``rowwise_with_gw_hp`` grad_input GEMM) gets its per-tensor scale repeated along the needed
  axis, so the row-wise kernel runs (torchao's ``preprocess_addmm``). The granularity is read
  from each :class:`~amp_edu.fp8.cast.Float8Tensor` (``axiswise_dim``), never guessed from shapes.

What torchao 0.18 does in ``addmm_float8_unwrapped`` (``torchao/float8/float8_ops.py``), which
we copy so the bits agree:

* Row-wise scales without ``use_fast_accum`` (the backward GEMMs): the GPU's row-wise kernel is
  slow then, so the matmul runs with unit scales and ``1/sa * 1/sb`` is applied afterwards, in
  the output dtype.
* Row-wise scales with a float32 or float16 output: the kernel is asked for bfloat16 and the
  result converted, because the row-wise kernel has no float32 output (pytorch/pytorch#156771).
  So a row-wise Float8Linear in float32 still rounds its GEMM results to bfloat16.

``use_fast_accum`` (torchao sets it for the forward GEMM only) selects the GPU's fast fp8
accumulation. On Hopper that accumulator keeps only about 14 bits (DeepSeek-V3 technical report,
arXiv:2412.19437, section 3.3.2, which therefore promotes partial sums to fp32 every 128
elements). The CPU kernel ignores the flag and accumulates in float32;
:mod:`~amp_edu.fp8.accumulate` emulates a narrow accumulator to measure what it costs.
"""

from __future__ import annotations

import torch

from .blockgemm import TILE, BlockFloat8, block_cast, block_scaled_mm
from .cast import Float8Tensor, cast_to_float8
from .config import CastConfig, Float8LinearConfig, Granularity
from .mxgemm import MXOperand, mx_cast, mx_mm

__all__ = ["scaled_mm", "is_row_major", "pad_to_16", "GEMM_ALIGNMENT", "cast_operand", "gemm"]

GEMM_ALIGNMENT = 16   # torch's CUDA _scaled_mm: K and N multiples of 16


def is_row_major(stride) -> bool:
    """A 2-D stride is row-major when rows are far apart and elements of a row adjacent."""
    return stride[0] > stride[1] and stride[1] == 1


def pad_to_16(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t`` (2-D) with zeros appended along ``dim`` up to a multiple of 16 (torchao's
    ``pad_tensor_for_matmul``)."""
    extra = -t.shape[dim] % GEMM_ALIGNMENT
    if not extra:
        return t
    pad = (0, extra, 0, 0) if dim == 1 else (0, 0, 0, extra)
    return torch.nn.functional.pad(t, pad)


def _check_shapes(a: Float8Tensor, b: Float8Tensor, pad_inner_dim: bool) -> None:
    m, k = a.shape
    n = b.shape[1]
    bad = [f"{what}={v}" for what, v in (("K", k), ("N", n)) if v % GEMM_ALIGNMENT
           and not (what == "K" and pad_inner_dim)]
    if bad:
        fix = "" if pad_inner_dim or n % GEMM_ALIGNMENT else " (or pad_inner_dim=True, which pads K)"
        raise ValueError(f"fp8 GEMM ({m}, {k}) @ ({k}, {n}): {', '.join(bad)} must be a multiple of "
                         f"{GEMM_ALIGNMENT}, as the GPU's _scaled_mm requires{fix}")


def _kernel_scales(a: Float8Tensor, b: Float8Tensor):
    """The two scales as the kernel takes them, and whether the row-wise kernel runs."""
    ga, gb = a.axiswise_dim, b.axiswise_dim
    if ga not in (None, 1) or gb not in (None, 0):
        raise ValueError("scales must be per tensor, or one per row of a (axiswise_dim=1, shape (M, 1)) "
                         f"and one per column of b (axiswise_dim=0, shape (1, N)); got axiswise_dim "
                         f"{ga} and {gb}")
    sa, sb = a.scale, b.scale
    if ga is None and gb is None:
        return sa, sb, False
    if ga is None:                                   # mixed: repeat the per-tensor scale
        sa = sa.repeat(a.shape[0]).reshape(-1, 1)
    if gb is None:
        sb = sb.repeat(b.shape[1]).reshape(1, -1)
    return sa, sb, True


def scaled_mm(a: Float8Tensor, b: Float8Tensor, *, out_dtype: torch.dtype | None = None,
              use_fast_accum: bool = False, pad_inner_dim: bool = False) -> torch.Tensor:
    """``a @ b`` for two :class:`Float8Tensor` matrices, in ``out_dtype`` (default ``a``'s original).

    Shapes, layouts and scale granularities as the module docstring says; anything else is a
    ValueError that names the rule.
    """
    if not (isinstance(a, Float8Tensor) and isinstance(b, Float8Tensor)):
        raise TypeError("scaled_mm takes two Float8Tensor operands (see amp_edu.fp8.cast_to_float8)")
    if a.data.dim() != 2 or b.data.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_mm needs matrices (m, k) @ (k, n), got {tuple(a.shape)} @ {tuple(b.shape)}")
    _check_shapes(a, b, pad_inner_dim)
    out_dtype = a.orig_dtype if out_dtype is None else out_dtype
    sa, sb, rowwise = _kernel_scales(a, b)
    a_data, b_data = a.data, b.data
    if pad_inner_dim:
        a_data, b_data = pad_to_16(a_data, 1), pad_to_16(b_data, 0)
    a_data = a_data if is_row_major(a_data.stride()) else a_data.contiguous()
    b_data = b_data.t().contiguous().t() if is_row_major(b_data.stride()) else b_data
    inv_a, inv_b = sa.reciprocal(), sb.reciprocal()
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


# --- one entry point per step of a linear layer's GEMM, whatever the granularity -------------------
def cast_operand(t: torch.Tensor, cast: CastConfig, config: Float8LinearConfig, dim: int, *,
                 weight: bool = False):
    """``t`` (2-D) cast as ``cast`` says for a GEMM that reduces over ``dim``; or ``t`` itself when
    the cast is disabled. Tensorwise: one scale; axiswise: one per slice along ``dim``;
    blockwise: 1×128 tiles along ``dim`` (128×128 blocks for a ``weight``); MX: 32-element blocks
    along ``dim`` with e8m0 scales."""
    if not cast.enabled:
        return t
    g = cast.granularity
    if g is Granularity.BLOCKWISE:
        tile = (TILE, TILE) if weight else ((1, TILE) if dim % 2 == 1 else (TILE, 1))
        return block_cast(t, tile, cast.dtype)
    if g is Granularity.MX:
        return mx_cast(t, dim % 2, cast.dtype, config.mx_scale_mode)
    axis = dim if g is Granularity.AXISWISE else None
    return cast_to_float8(t, cast.dtype, dim=axis, power_of_2=config.power_of_2)


def gemm(a, b, config: Float8LinearConfig, fast_accum: bool) -> torch.Tensor:
    """``a @ b`` for two operands from :func:`cast_operand`: the block-scaled loop, the scaled
    matmul, or a plain ``torch.mm`` when both were left in high precision."""
    if isinstance(a, BlockFloat8):
        return block_scaled_mm(a, b).to(a.orig_dtype)
    if isinstance(a, MXOperand):
        return mx_mm(a, b)
    if isinstance(a, Float8Tensor):
        return scaled_mm(a, b, use_fast_accum=fast_accum, pad_inner_dim=config.pad_inner_dim)
    return torch.mm(a, b)
