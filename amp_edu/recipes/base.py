"""The base recipe: one method per event of the training loop, each doing what a plain fp32 loop does.

:class:`Recipe` is the ``fp32`` recipe and the class every other recipe extends, overriding only
the events it changes. The events, in the order :func:`amp_edu.train.train` calls them (the names
are fastai's callback events; its ``MixedPrecision`` callback intervenes at the same ones: it
scales the loss in ``before_backward``, unscales and checks for inf/NaN in ``before_step`` and
updates the loss scale in ``after_step``):

``before_fit(model, optimizer)``
    Once per run: :meth:`~Recipe.cast_model` (the weights in the dtype they train in), the tensors
    the optimizer updates (:meth:`~Recipe.optimizer_weights`: the model's parameters, or an fp32
    master copy), the optimizer (``optimizer`` is a factory ``optimizer(params)``, or an optimizer
    already built over the model's parameters, impossible with a master copy, which the optimizer
    must own) and the loss scaler (:meth:`~Recipe.default_scaler`). Returns the optimizer.
``before_batch(x)``
    Each micro-batch: the input as the model's first layer needs it (cast to fp16/bf16 for the
    pure recipes).
``before_backward(loss)``
    Each micro-batch: the tensor to call ``.backward()`` on, the loss times the loss scale.
``after_backward()``
    Once per step, after the last micro-batch's backward: the gradients of the weights the
    optimizer updates become their true, unscaled values.
``before_step(clip_grad_norm)``
    Checks those gradients for inf/NaN and decides whether the step is skipped (only a recipe that
    scales the loss skips: the others step whatever the gradients hold, as a plain loop would, so
    NaN reaches the weights); unless skipping, clips them to ``clip_grad_norm``. Returns a
    :class:`StepResult` ``(finite, skipped)``.
``after_step(skipped)``
    After the optimizer step (or the skip): the loss scaler updates its scale; a master copy is
    copied back into the model.

Between the events the loop calls three methods that are not events but the actions the events
frame: :meth:`~Recipe.zero_grad` (each step, first), :meth:`~Recipe.forward_context` (the region
the forward runs in: ``torch.autocast`` for AMP; fastai's callback enters autocast in
``before_batch`` and leaves it in ``after_loss``, a context manager leaves it on an exception too)
and :meth:`~Recipe.optimizer_step` (between ``before_step`` and ``after_step``: the step itself,
through the loss scaler, or nothing when skipped). For a loop written by hand,
:meth:`~Recipe.backward` and :meth:`~Recipe.step` run the backward events and the step events in
one call each; a recipe overrides the events and actions, never these two (``train`` calls the
events one by one).
"""

from __future__ import annotations

import contextlib
import enum
from typing import NamedTuple

import torch
import torch.nn as nn

__all__ = ["Family", "StepResult", "Recipe", "all_finite"]


class Family(enum.Enum):
    """What a recipe changes about fp32 training. A recipe's family is a class attribute
    (``Recipe.family``), and it is what :func:`amp_edu.viz.color_for` colours by, so a newly
    registered recipe always has a colour."""

    FP32 = "fp32"              # the baseline
    AMP = "amp"                # fp32 weights, an autocast forward
    PURE = "pure"              # the whole model in 16 bits
    SCALED = "scaled"          # pure fp16 + a constant loss scale
    MASTER = "master"          # fp16 model, fp32 master weights
    FP8 = "fp8"                # fp8 GEMMs in the linear layers (lesson 10)
    FP4 = "fp4"                # NVFP4 GEMMs in the linear layers, emulated (lesson 10)
    OPTIMIZER = "optimizer"    # low-precision weights or optimizer states (lesson 12)


class StepResult(NamedTuple):
    """What :meth:`Recipe.before_step` decided: were the (unscaled) gradients finite, and is the
    step skipped."""

    finite: bool
    skipped: bool


def all_finite(tensors) -> bool:
    """``True`` if no tensor in ``tensors`` (``None`` entries ignored) holds an inf or NaN."""
    flags = [torch.isfinite(t).all() for t in tensors if t is not None]
    return bool(torch.stack(flags).all()) if flags else True


def _build_optimizer(optimizer, weights: list, model_params: list, recipe: str) -> torch.optim.Optimizer:
    if isinstance(optimizer, torch.optim.Optimizer):
        owned = {id(p) for g in optimizer.param_groups for p in g["params"]}
        if not {id(w) for w in weights} <= owned:
            what = ("the fp32 master copy, which does not exist yet: pass a factory optimizer(params)"
                    if weights is not model_params else "the model's parameters")
            raise ValueError(f"recipe {recipe!r}: the optimizer must update {what}")
        return optimizer
    if not callable(optimizer):
        raise TypeError("optimizer must be a torch.optim.Optimizer or a factory optimizer(params), "
                        f"got {type(optimizer).__name__}")
    return optimizer(weights)


class Recipe:
    """The ``fp32`` recipe, and the base class: every event does what a plain fp32 loop does.

    Its loss scaler is ``scaler`` when one is given (a GradScaler-like object, or a factory
    ``scaler(device_type)``), else a *disabled* ``torch.amp.GradScaler``: every call a no-op
    (``scale`` returns the loss, ``step`` just calls ``optimizer.step()``), as in nanoGPT's
    ``GradScaler(enabled=...)``, so a recipe without loss scaling needs no branch of its own.
    ``Recipe(scaler=torch.amp.GradScaler("cpu"))`` is fp32 with dynamic loss scaling.

    One recipe object serves one run at a time: :meth:`before_fit` (re)binds it to a model.
    """

    name = "fp32"
    family = Family.FP32
    param_dtype = torch.float32      # dtype of the model's weights in forward and backward
    scaler_spec = None               # the ``scaler`` argument

    def __init__(self, scaler=None) -> None:
        self.scaler_spec = scaler

    def __repr__(self) -> str:
        return f"<recipe {self.name}>"

    # --- event: before_fit, once per run, and its three parts --------------------------------
    def before_fit(self, model: nn.Module, optimizer) -> torch.optim.Optimizer:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        self.cast_model(model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.device_type = self.params[0].device.type if self.params else "cpu"
        self.weights = self.optimizer_weights(self.params)
        self.optimizer = _build_optimizer(optimizer, self.weights, self.params, self.name)
        spec = self.scaler_spec
        self.scaler = (self.default_scaler(self.device_type) if spec is None
                       else spec(self.device_type) if callable(spec) else spec)
        return self.optimizer

    def cast_model(self, model: nn.Module) -> None:
        """Put the model's weights in the dtype they train in (fp32: leave them)."""

    def optimizer_weights(self, params: list) -> list:
        """The tensors the optimizer updates: the model's own parameters."""
        return params

    def default_scaler(self, device_type: str):
        return torch.amp.GradScaler(device_type, enabled=False)

    # --- what the events read -----------------------------------------------------------------
    @property
    def scale(self) -> float:
        """The loss scale the next backward uses (1.0 without loss scaling)."""
        return float(self.scaler.get_scale())

    @property
    def input_dtype(self) -> torch.dtype | None:
        """The dtype float inputs are cast to before the forward, or ``None`` (left as they are)."""
        return None

    @property
    def scaler_enabled(self) -> bool:
        """Does the loss scaler do anything? A scaler without ``is_enabled`` (one built from
        scratch, with only ``scale``/``unscale_``/``step``/``update``/``get_scale``) is enabled."""
        is_enabled = getattr(self.scaler, "is_enabled", None)
        return bool(is_enabled()) if is_enabled is not None else True

    @property
    def skips_nonfinite(self) -> bool:
        """Whether a step with an inf/NaN gradient is skipped (only recipes that scale the loss)."""
        return self.scaler_enabled

    # --- every step, in the loop's order ------------------------------------------------------
    def zero_grad(self) -> None:
        """Drop the model's gradients (``p.grad = None``), first thing in a step."""
        for p in self.params:
            p.grad = None

    def before_batch(self, x: torch.Tensor) -> torch.Tensor:
        """Event: the input as the model's first layer needs it."""
        return x

    def forward_context(self):
        """The context manager the forward runs in (not an event: a region). Whether the loss is
        computed inside it is the caller's choice (``train`` computes it outside)."""
        return contextlib.nullcontext()

    def before_backward(self, loss: torch.Tensor) -> torch.Tensor:
        """Event: the tensor to call ``backward`` on, the loss times the loss scale."""
        return self.scaler.scale(loss)

    def after_backward(self) -> None:
        """Event: make the gradients of :attr:`weights` the true (unscaled) gradients."""
        self.scaler.unscale_(self.optimizer)

    def before_step(self, clip_grad_norm: float | None = None) -> StepResult:
        """Event: check the unscaled gradients for inf/NaN, decide the skip, clip unless skipping."""
        finite = all_finite([w.grad for w in self.weights])
        skip = self.skips_nonfinite and not finite
        if clip_grad_norm is not None and not skip:
            torch.nn.utils.clip_grad_norm_(self.weights, clip_grad_norm)
        return StepResult(finite, skip)

    def optimizer_step(self, skip: bool) -> None:
        """The step itself, through the scaler: it decides by itself (it skips on the inf it
        found in ``unscale_``; a disabled one always steps), so ``skip`` agrees with it."""
        self.scaler.step(self.optimizer)

    def after_step(self, skip: bool) -> None:
        """Event: the scaler adjusts its scale (a disabled one does nothing). A recipe that
        overrides this event calls ``super().after_step(skip)``: without the update, the next
        step's ``scaler.step`` fails (torch: "step() has already been called since the last update()")."""
        self.scaler.update()

    # --- the events of one step in two calls, for a loop written by hand ----------------------
    def backward(self, loss: torch.Tensor) -> None:
        """``before_backward(loss).backward()``."""
        self.before_backward(loss).backward()

    def step(self, clip_grad_norm: float | None = None) -> StepResult:
        """``after_backward``, ``before_step``, the optimizer step, ``after_step``: what
        :func:`amp_edu.train.train` runs after the backward of each step."""
        self.after_backward()
        result = self.before_step(clip_grad_norm)
        self.optimizer_step(result.skipped)
        self.after_step(result.skipped)
        return result
