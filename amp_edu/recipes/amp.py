"""The fp32 baseline and the 16-bit recipes of lessons 02-08: pure fp16/bf16, loss scaling, master weights, AMP.

Each recipe is a subclass of :class:`~amp_edu.recipes.base.Recipe` that overrides only the events
it changes:

=============================== ============================ ==========================================
recipe                          class                        what it changes
=============================== ============================ ==========================================
``fp32``                        :class:`Recipe`              nothing: the baseline
``fp16_pure`` / ``bf16_pure``   :class:`Pure`                ``model.to(dtype)`` and the inputs too:
                                                             weights, activations, gradients *and the
                                                             optimizer update* in 16 bits
``fp16_static_scale(S)``        :class:`StaticScale`         + backward from ``loss * S``; skip the step
                                                             if a gradient is inf/NaN, else × 1/S, step
``fp16_master``                 :class:`Master`              fp16 model, an **fp32 master copy** the
                                                             optimizer updates, fp16 weights copied back
``fp16_master_scale(S)``        :class:`Master`              + a constant loss scale, unscaled in fp32
                                                             (the 2018 mixed-precision paper's recipe)
``amp_fp16`` / ``amp_bf16``     :class:`Amp`                 fp32 weights, ``torch.autocast`` forward,
                                                             a ``torch.amp.GradScaler`` — *enabled* for
                                                             fp16 and disabled (every call a no-op) for
                                                             bf16, which has fp32's exponent range
``amp_fp16_noscaler``           :class:`AmpWithoutScaler`    fp16 autocast, the GradScaler left out
=============================== ============================ ==========================================

This module owns these names: it writes them in its :func:`~amp_edu.recipes.registry.register`
calls, in the order studies, tables and plots list them, with the sets they belong to.

A loss-scaled recipe skips exactly the steps whose unscaled gradients hold an inf or NaN; with a
dynamic scaler the scaler itself decides (``scaler.step`` skips on the inf it found while
unscaling, ``scaler.update`` adjusts the scale).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .. import formats
from ..validate import check_number
from .base import Family, Recipe
from .registry import register

__all__ = ["Pure", "StaticScale", "Master", "Amp", "AmpWithoutScaler"]


class Pure(Recipe):
    """``fp16_pure`` / ``bf16_pure``: the model cast to ``dtype``; everything happens in it,
    including the optimizer's update (an update below 2^-11 of a weight rounds away in fp16)."""

    family = Family.PURE

    def __init__(self, dtype: torch.dtype = torch.float16) -> None:
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"Pure trains in torch.float16 or torch.bfloat16, got {dtype!r}")
        self.param_dtype = dtype
        self.name = f"{formats.name_of(dtype)}_pure"

    def cast_model(self, model: nn.Module) -> None:
        model.to(self.param_dtype)

    @property
    def input_dtype(self) -> torch.dtype:
        return self.param_dtype

    def before_batch(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.param_dtype) if x.is_floating_point() else x


def _check_scale(scale) -> float:
    return check_number(scale, "the loss scale", positive=True)   # TypeError for '8' or True, ValueError for 0 or inf


class StaticScale(Pure):
    """``fp16_static_scale(S)``: ``fp16_pure`` + a constant loss scale ``S``: backward from
    ``loss * S``; a step whose gradients overflowed is skipped, the others are multiplied by 1/S
    (in fp16) and stepped."""

    family = Family.SCALED

    def __init__(self, scale: float) -> None:
        super().__init__(torch.float16)
        self.loss_scale = _check_scale(scale)
        self.name = f"fp16_static_scale({self.loss_scale:g})"

    @property
    def scale(self) -> float:
        return self.loss_scale

    @property
    def skips_nonfinite(self) -> bool:
        return True

    def before_backward(self, loss):
        return loss * self.loss_scale

    def after_backward(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.mul_(1.0 / self.loss_scale)

    def optimizer_step(self, skip: bool) -> None:
        if not skip:
            self.optimizer.step()


class Master(StaticScale):
    """``fp16_master`` / ``fp16_master_scale(S)``: an fp16 model for forward and backward, and an
    fp32 **master copy** of the weights that the optimizer updates. The fp16 gradients are copied
    to fp32 and unscaled there (× 1/S); after the step the fp16 weights are re-copied from the
    master copy. ``scale=None``: no loss scaling (S = 1, and no skipped steps)."""

    family = Family.MASTER

    def __init__(self, scale: float | None = None) -> None:
        super().__init__(1.0 if scale is None else scale)
        self.scaled = scale is not None
        self.name = f"fp16_master_scale({self.loss_scale:g})" if self.scaled else "fp16_master"

    def optimizer_weights(self, params: list) -> list:
        return [p.detach().float().clone() for p in params]

    @property
    def skips_nonfinite(self) -> bool:
        return self.scaled

    # before_backward: loss * S (× 1.0 without a scale: exact, so no branch)

    def after_backward(self) -> None:
        for p, m in zip(self.params, self.weights):
            m.grad = None if p.grad is None else p.grad.float().mul_(1.0 / self.loss_scale)

    def after_step(self, skip: bool) -> None:
        super().after_step(skip)
        if not skip:
            with torch.no_grad():
                for p, m in zip(self.params, self.weights):
                    p.copy_(m)


class Amp(Recipe):
    """``amp_fp16`` / ``amp_bf16``: fp32 weights, the forward under ``torch.autocast(device, dtype)``,
    and ``torch.amp.GradScaler(device, enabled=(dtype is torch.float16))`` unless ``scaler`` is
    given (e.g. the course's own :class:`amp_edu.scaler.GradScaler`). bf16 has fp32's exponent
    range, so its scaler is disabled and does nothing."""

    family = Family.AMP

    def __init__(self, dtype: torch.dtype = torch.float16, scaler=None) -> None:
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"autocast runs in torch.float16 or torch.bfloat16, got {dtype!r}")
        super().__init__(scaler)
        self.autocast_dtype = dtype
        self.name = f"amp_{formats.name_of(dtype)}"

    def default_scaler(self, device_type: str):
        return torch.amp.GradScaler(device_type, enabled=self.autocast_dtype == torch.float16)

    def forward_context(self):
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)


class AmpWithoutScaler(Amp):
    """``amp_fp16_noscaler``: fp16 autocast with the GradScaler left out (disabled), the way a loop
    copied from a bf16 recipe runs fp16. Gradients below fp16's 2^-24 flush to zero in backward."""

    def __init__(self) -> None:
        super().__init__(torch.float16)
        self.name = "amp_fp16_noscaler"

    def default_scaler(self, device_type: str):
        return torch.amp.GradScaler(device_type, enabled=False)


# Registration order is the order studies, tables and plots list the recipes in.
register("fp32", Recipe, sets=("everyday", "precision", "timed"))
register("amp_fp16", lambda: Amp(torch.float16), sets=("everyday", "timed"))
register("amp_bf16", lambda: Amp(torch.bfloat16), sets=("everyday", "precision", "timed"))
register("amp_fp16_noscaler", AmpWithoutScaler, sets=("precision",))
register("bf16_pure", lambda: Pure(torch.bfloat16), sets=("precision",))
register("fp16_pure", lambda: Pure(torch.float16), sets=("everyday", "precision"))
register("fp16_static_scale(S)", StaticScale)
register("fp16_master", Master)
register("fp16_master_scale(S)", Master)
