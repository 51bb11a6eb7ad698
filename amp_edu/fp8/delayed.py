"""Delayed scaling: the scale for this step comes from the amaxes of earlier steps.

Current (dynamic) scaling reads the whole tensor to find its amax *before* casting it: one extra
pass over memory per cast. Delayed scaling (the FP8 paper, arXiv:2209.05433; Transformer
Engine's ``DelayedScaling`` recipe) instead keeps, per tensor, a short history of recent amaxes
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

Transformer Engine's defaults are ``margin=0``, ``amax_history_len=1024``,
``amax_compute_algo="max"``. Here the first call, with an empty history, takes its scale from
the current amax (a warm start), and an all-zero history gives ``fp8_max / EPS`` like
:func:`amp_edu.fp8.scaling.amax_to_scale`.
"""

from __future__ import annotations

import torch
from torch import nn

from ..validate import check_int
from .cast import Float8Tensor, cast_to_float8
from .gemm import scaled_mm
from .scaling import EPS, amax, fp8_max

__all__ = ["update_amax_history", "delayed_scale", "AmaxHistory", "DelayedFloat8Linear"]


def update_amax_history(history: torch.Tensor, new_amax: torch.Tensor) -> torch.Tensor:
    """``[new_amax, history[0], ..., history[-2]]``: a new tensor; ``history`` is not modified."""
    if not isinstance(history, torch.Tensor) or history.dim() != 1 or history.numel() == 0:
        raise ValueError("history must be a non-empty 1-D tensor (newest amax first)")
    if not isinstance(new_amax, torch.Tensor) or new_amax.numel() != 1:
        raise ValueError("new_amax must be a tensor holding one value")
    return torch.cat([new_amax.reshape(1).to(history.dtype), history[:-1]])


def delayed_scale(history: torch.Tensor, fp8_dtype: torch.dtype, margin: int = 0) -> torch.Tensor:
    """``fp8_max / max(max(history), EPS) / 2^margin`` in float64, returned as float32 (0-dim)."""
    margin = check_int(margin, "margin", min=0)
    a = torch.clamp(history.max().to(torch.float64), min=EPS)
    return (fp8_max(fp8_dtype) / a / 2.0 ** margin).to(torch.float32)


class AmaxHistory(nn.Module):
    """The delayed-scaling state of one tensor: its amax history and the scale for the next cast.

    Buffers (saved in ``state_dict``): ``history`` (float32, newest first), ``scale`` (float32),
    ``steps`` (how many amaxes were recorded), ``saturated`` (elements clamped at the last cast).
    """

    def __init__(self, fp8_dtype: torch.dtype, history_len: int = 16, margin: int = 0):
        super().__init__()
        history_len = check_int(history_len, "history_len", min=1)
        fp8_max(fp8_dtype)                                     # validates the dtype
        delayed_scale(torch.zeros(1), fp8_dtype, margin)       # validates the margin
        self.fp8_dtype, self.margin = fp8_dtype, margin
        self.register_buffer("history", torch.zeros(history_len))
        self.register_buffer("scale", torch.ones(()))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.register_buffer("saturated", torch.zeros((), dtype=torch.int64))

    @torch.no_grad()
    def cast(self, x: torch.Tensor) -> Float8Tensor:
        """Cast ``x`` with the delayed scale, then record its amax and compute the next scale."""
        a = amax(x)
        if int(self.steps) == 0:                               # warm start: nothing seen yet
            self.scale.copy_(delayed_scale(a.reshape(1).float(), self.fp8_dtype, self.margin))
        scale = self.scale.clone()
        self.saturated.fill_(int(((x.float() * scale).abs() > fp8_max(self.fp8_dtype)).sum()))
        out = cast_to_float8(x, self.fp8_dtype, scale)
        self.history.copy_(update_amax_history(self.history, a.float()))
        self.scale.copy_(delayed_scale(self.history, self.fp8_dtype, self.margin))
        self.steps += 1
        return out

    def extra_repr(self) -> str:
        return f"{self.fp8_dtype}, history_len={self.history.numel()}, margin={self.margin}"


class _DelayedMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_hp, weight_t_hp, mod):
        ctx.mod = mod
        x8 = mod.amax_input.cast(input_hp.reshape(-1, input_hp.shape[-1]))
        w8 = mod.amax_weight.cast(weight_t_hp)
        out = scaled_mm(x8, w8, use_fast_accum=True)
        # per-tensor scales: the same fp8 casts serve both backward GEMMs, so backward keeps
        # 1-byte copies of x and W instead of the high-precision ones
        ctx.save_for_backward(x8.data, x8.scale, w8.data, w8.scale)
        ctx.dtypes = (x8.orig_dtype, w8.orig_dtype)
        return out.reshape(*input_hp.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        xd, xs, wd, ws = ctx.saved_tensors
        x8, w8 = Float8Tensor(xd, xs, ctx.dtypes[0]), Float8Tensor(wd, ws, ctx.dtypes[1])
        go8 = ctx.mod.amax_grad.cast(grad_output.reshape(-1, grad_output.shape[-1]))
        grad_input = scaled_mm(go8, w8.t()).reshape(*grad_output.shape[:-1], -1)
        grad_weight = scaled_mm(go8.t(), x8)
        return grad_input, grad_weight.t(), None


class DelayedFloat8Linear(nn.Linear):
    """``nn.Linear`` with per-tensor fp8 GEMMs whose scales come from amax histories.

    e4m3 for input and weight, e5m2 for the output gradient (TE's HYBRID format); one
    :class:`AmaxHistory` each (``amax_input``, ``amax_weight``, ``amax_grad``).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 history_len: int = 16, margin: int = 0, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
        self.amax_input = AmaxHistory(e4, history_len, margin).to(device)
        self.amax_weight = AmaxHistory(e4, history_len, margin).to(device)
        self.amax_grad = AmaxHistory(e5, history_len, margin).to(device)

    @classmethod
    def from_float(cls, mod: nn.Linear, history_len: int = 16, margin: int = 0) -> "DelayedFloat8Linear":
        if not isinstance(mod, nn.Linear):
            raise TypeError(f"from_float takes an nn.Linear, got {type(mod).__name__}")
        new = cls(mod.in_features, mod.out_features, bias=False, history_len=history_len,
                  margin=margin, device=mod.weight.device)
        new.weight = mod.weight
        new.bias = mod.bias
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = _DelayedMatmul.apply(input, self.weight.t(), self)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out
