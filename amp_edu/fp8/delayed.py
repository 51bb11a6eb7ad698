"""Delayed scaling: the scale for this step comes from the amaxes of earlier steps.

Current (dynamic) scaling reads the whole tensor to find its amax *before* casting it: one extra
pass over memory per cast. Delayed scaling (Transformer Engine's ``DelayedScaling`` recipe)
instead keeps, per tensor, a short history of recent amaxes
and casts with a scale computed from it, recording the new amax as a by-product of the cast::

    scale_t   = fp8_max / max(history) / 2^margin      (from steps before t)
    x8        = saturate(x_t * scale_t)
    history   = [amax(x_t), history[:-1]]              (newest first; the oldest falls off)

* ``history_len``: how far back the max looks. Longer: a scale that forgets a one-off spike
  slowly (so the next steps lose precision). Shorter: the scale follows a growing tensor quickly.
* ``margin``: headroom of ``2^margin`` below fp8_max for values larger than any seen so far.
* A tensor that suddenly grows past ``fp8_max / scale_t`` **saturates** (clamps to ±max): the
  step that has the spike is the one the history did not see coming. Current scaling has no such
  step, by construction.

This follows Transformer Engine's rule (``transformer_engine/pytorch/quantization.py`` at TE
2.20.0.dev0, commit d0067d0: ``_default_sf_compute``, line 1092, and the state it starts from,
lines 1436-1437)::

    scale_0   = 1                                      (no warm start: the first cast uses 1)
    sf        = fp8_max / amax / 2^margin              (TE writes fp8_max / amax on a float32
                                                        tensor, which torch runs as
                                                        amax.reciprocal() * fp8_max: two roundings,
                                                        torch/_tensor.py lines 1111-1112; amp_edu
                                                        divides in float64 and rounds once, like
                                                        torchao's current scaling, so the scales
                                                        can differ in their last bit)
    scale_t   = sf   if amax is finite and > 0         (lines 1112-1113)
                scale_(t-1)  otherwise                 (a zero or NaN/inf amax keeps the old scale)
    scale_t   = float32 max  if sf is inf              (a tiny amax; line 1114)

So one all-zero step (a dead layer, a masked batch) leaves the scale alone instead of blowing
it up to ``fp8_max / EPS``, after which the next real tensor would saturate completely. With
``reduce_amax`` (TE's ``DelayedScaling.reduce_amax``, default True) each new amax is first
MAX-reduced across the ranks of ``torch.distributed`` (TE's ``reduce_tensor_across_group_op_max``,
lines 645-653), so every rank casts with the same scale.

Where amp_edu still differs from TE: TE records each amax during the cast and updates every
history and scale of the autocast region once per step (forward tensors at the next forward,
backward ones after backward), in one fused all-reduce over a buffer of all of them; amp_edu
updates one tensor right after its cast and all-reduces each amax by itself (same values when a
layer runs once per step). TE's default history is 1024 steps (amp_edu's lessons use 16).
"""

from __future__ import annotations

import torch
from torch import nn

from ..validate import check_bool, check_int
from .cast import Float8Tensor, cast_to_float8
from .gemm import scaled_mm
from .scaling import amax, fp8_max

__all__ = ["update_amax_history", "delayed_scale", "reduce_amax", "AmaxHistory", "DelayedMatmul"]

_F32_MAX = torch.finfo(torch.float32).max


def update_amax_history(history: torch.Tensor, new_amax: torch.Tensor) -> torch.Tensor:
    """``[new_amax, history[0], ..., history[-2]]``: a new tensor; ``history`` is not modified."""
    if not isinstance(history, torch.Tensor) or history.dim() != 1 or history.numel() == 0:
        raise ValueError("history must be a non-empty 1-D tensor (newest amax first)")
    if not isinstance(new_amax, torch.Tensor) or new_amax.numel() != 1:
        raise ValueError("new_amax must be a tensor holding one value")
    return torch.cat([new_amax.reshape(1).to(history.dtype), history[:-1]])


def delayed_scale(history: torch.Tensor, fp8_dtype: torch.dtype, scale: torch.Tensor,
                  margin: int = 0) -> torch.Tensor:
    """The next scale (float32, 0-dim): ``fp8_max / max(history) / 2^margin``, or ``scale`` (the
    previous one) when that max is 0 or not finite; float32's max when the quotient is inf."""
    margin = check_int(margin, "margin", min=0)
    if not isinstance(history, torch.Tensor) or history.numel() == 0:
        raise ValueError("history must be a non-empty tensor of amaxes")
    if not isinstance(scale, torch.Tensor) or scale.numel() != 1:
        raise TypeError("scale (the previous scale) must be a tensor holding one value")
    a = history.max().to(torch.float32)
    prev = scale.reshape(()).to(torch.float32)
    sf = (fp8_max(fp8_dtype) / a.double() / 2.0 ** margin).float()   # rounded once (TE: twice)
    sf = torch.where(a > 0, sf, prev)
    sf = torch.where(torch.isfinite(a), sf, prev)
    return torch.where(torch.isinf(sf), torch.full_like(sf, _F32_MAX), sf)


def reduce_amax(a: torch.Tensor) -> torch.Tensor:
    """``a`` MAX-reduced in place across the default process group, when one is initialized."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(a, op=dist.ReduceOp.MAX)
    return a


class AmaxHistory(nn.Module):
    """The delayed-scaling state of one tensor: its amax history and the scale for the next cast.

    Buffers (saved in ``state_dict``): ``history`` (float32, newest first), ``scale`` (float32),
    ``steps`` (how many amaxes were recorded), ``saturated`` (elements clamped at the last cast).
    """

    def __init__(self, fp8_dtype: torch.dtype, history_len: int = 16, margin: int = 0,
                 reduce_amax: bool = True):
        super().__init__()
        history_len = check_int(history_len, "history_len", min=1)
        fp8_max(fp8_dtype)                                     # validates the dtype
        self.fp8_dtype, self.margin = fp8_dtype, check_int(margin, "margin", min=0)
        self.reduce = check_bool(reduce_amax, "reduce_amax")
        self.register_buffer("history", torch.zeros(history_len))
        self.register_buffer("scale", torch.ones(()))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.register_buffer("saturated", torch.zeros((), dtype=torch.int64))

    @torch.no_grad()
    def reset(self) -> "AmaxHistory":
        """Back to the starting state: an empty (zero) history and scale 1."""
        self.history.zero_()
        self.scale.fill_(1.0)
        self.steps.zero_()
        self.saturated.zero_()
        return self

    @torch.no_grad()
    def cast(self, x: torch.Tensor) -> Float8Tensor:
        """Cast ``x`` with the delayed scale, then record its amax and compute the next scale."""
        a = amax(x).float().reshape(1)
        if self.reduce:
            reduce_amax(a)
        scale = self.scale.clone()
        self.saturated.fill_(int(((x.float() * scale).abs() > fp8_max(self.fp8_dtype)).sum()))
        out = cast_to_float8(x, self.fp8_dtype, scale)
        self.history.copy_(update_amax_history(self.history, a))
        self.scale.copy_(delayed_scale(self.history, self.fp8_dtype, self.scale, self.margin))
        self.steps += 1
        return out

    def extra_repr(self) -> str:
        return f"{self.fp8_dtype}, history_len={self.history.numel()}, margin={self.margin}"


class DelayedMatmul(torch.autograd.Function):
    """``input @ weight_t`` for a delayed-scaling :class:`~amp_edu.fp8.linear.Float8Linear` ``mod``."""

    @staticmethod
    def forward(ctx, input_hp, weight_t_hp, mod):
        ctx.mod = mod
        x8 = mod.amax_input.cast(input_hp.reshape(-1, input_hp.shape[-1]))
        w8 = mod.amax_weight.cast(weight_t_hp)
        pad = mod.config.pad_inner_dim
        out = scaled_mm(x8, w8, use_fast_accum=mod.config.fast_accum_output, pad_inner_dim=pad)
        # per-tensor scales: the same fp8 casts serve both backward GEMMs, so backward keeps
        # 1-byte copies of x and W instead of the high-precision ones
        ctx.save_for_backward(x8.data, x8.scale, w8.data, w8.scale)
        ctx.dtypes, ctx.pad = (x8.orig_dtype, w8.orig_dtype), pad
        return out.reshape(*input_hp.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        xd, xs, wd, ws = ctx.saved_tensors
        x8, w8 = Float8Tensor(xd, xs, ctx.dtypes[0]), Float8Tensor(wd, ws, ctx.dtypes[1])
        go8 = ctx.mod.amax_grad.cast(grad_output.reshape(-1, grad_output.shape[-1]))
        grad_input = scaled_mm(go8, w8.t(), pad_inner_dim=ctx.pad).reshape(*grad_output.shape[:-1], -1)
        grad_weight = scaled_mm(go8.t(), x8, pad_inner_dim=ctx.pad)
        return grad_input, grad_weight.t(), None
