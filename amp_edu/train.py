"""One training loop, many precision recipes — so recipes are compared on equal terms.

Every lesson that trains calls :func:`train`; only the *recipe* changes:

=============================== =================================================================
recipe                          what happens in one step
=============================== =================================================================
``fp32``                        everything float32 (the baseline)
``fp16_pure``                   ``model.half()``: weights, activations, gradients *and the optimizer
                                update* in fp16 (the seeds' "cast the model" approach). Updates
                                smaller than 2^-11 of a weight round away; small gradients flush.
``fp16_static_scale(S)``        ``fp16_pure`` + static loss scaling: backward from ``loss * S``,
                                skip the step if a gradient is inf/NaN, else unscale (× 1/S) and step
``fp16_master``                 fp16 model for forward/backward, an **fp32 master copy** of the
                                weights that the optimizer updates; fp16 weights re-copied from it
``fp16_master_scale(S)``        ``fp16_master`` + static loss scale S, unscaled in fp32 (the 2018
                                paper's recipe, with a constant scale)
``bf16_pure``                   ``model.to(bfloat16)``: like ``fp16_pure`` with bf16
``amp_fp16``                    fp32 weights, ``torch.amp.autocast(device, float16)`` forward,
                                ``torch.amp.GradScaler(device)`` dynamic loss scaling
``amp_bf16``                    fp32 weights, ``torch.amp.autocast(device, bfloat16)``, no scaler
                                (bf16 has fp32's exponent range)
=============================== =================================================================

::

    task = amp_edu.data.get_task("blobs")
    h = train(task, "mlp", "fp16_static_scale(1024)", steps=300, lr=0.05, optimizer="sgd")
    h.loss[-1], h.skipped_steps, h.final_eval["accuracy"], h.model

The loop is deterministic for a given ``seed`` (model weights, batch order). Options cover what
the recipe lesson needs: optimizer (``"sgd"``, ``"adam"``, ``"adamw"`` or a factory), lr, steps,
batch size, gradient clipping (after unscaling — ``scaler.unscale_(opt)`` first under AMP),
gradient accumulation, an lr scheduler, a per-step callback and a progress line every N steps.

The returned :class:`History` has one entry per optimizer step: ``loss`` and ``accuracy`` of the
training batch, the loss ``scale`` used, whether any gradient was non-finite (``nonfinite_grads``) and whether the
step was therefore ``skipped`` (only loss-scaled recipes skip; the others step regardless, as a
plain loop would, so NaN reaches the weights), ``time_s``, and — with ``track_updates=True`` — ``lost_updates``: the fraction of the weights the
optimizer updates (the fp32 master copy in ``fp16_master*``) that had a non-zero (unscaled)
gradient but did **not change** in the step: their update rounded away. Skipped steps record 0.
The lr scheduler is stepped only on steps that were not skipped.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn

from . import models as _models

__all__ = ["Recipe", "RECIPES", "parse_recipe", "History", "train", "make_optimizer"]

RECIPES = ("fp32", "fp16_pure", "fp16_static_scale(S)", "fp16_master", "fp16_master_scale(S)",
           "bf16_pure", "amp_fp16", "amp_bf16")


@dataclass(frozen=True)
class Recipe:
    """How one step handles precision; build it with :func:`parse_recipe`."""

    name: str                              # canonical spelling, e.g. "fp16_static_scale(1024)"
    param_dtype: torch.dtype               # dtype of the model's weights in forward/backward
    autocast_dtype: torch.dtype | None     # torch.amp.autocast dtype, or None for no autocast
    master_weights: bool = False           # optimizer updates an fp32 master copy
    static_scale: float | None = None      # constant loss scale S (None: no static scaling)
    dynamic_scaler: bool = False           # torch.amp.GradScaler

    @property
    def family(self) -> str:
        """The name without its scale: ``"fp16_static_scale"`` for ``"fp16_static_scale(8)"``."""
        return self.name.split("(")[0]


_SIMPLE = {
    "fp32": dict(param_dtype=torch.float32, autocast_dtype=None),
    "fp16_pure": dict(param_dtype=torch.float16, autocast_dtype=None),
    "fp16_master": dict(param_dtype=torch.float16, autocast_dtype=None, master_weights=True),
    "bf16_pure": dict(param_dtype=torch.bfloat16, autocast_dtype=None),
    "amp_fp16": dict(param_dtype=torch.float32, autocast_dtype=torch.float16, dynamic_scaler=True),
    "amp_bf16": dict(param_dtype=torch.float32, autocast_dtype=torch.bfloat16),
}
_SCALED = {"fp16_static_scale": False, "fp16_master_scale": True}
_SCALED_RE = re.compile(r"^(fp16_static_scale|fp16_master_scale)\(\s*([^)]+?)\s*\)$")


def parse_recipe(spec: "str | Recipe") -> Recipe:
    """``"fp32"``, ``"fp16_static_scale(1024)"``, ``"fp16_master_scale(2**10)"``, ... → :class:`Recipe`.

    The scale may be a number or ``2**k``; it must be finite and positive.
    """
    if isinstance(spec, Recipe):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"recipe must be a str or Recipe, got {type(spec).__name__}")
    s = spec.strip()
    if s in _SIMPLE:
        return Recipe(s, **_SIMPLE[s])
    m = _SCALED_RE.match(s)
    if not m:
        raise ValueError(f"unknown recipe {spec!r}; accepted: {', '.join(RECIPES)} (S a positive number or 2**k)")
    fam, arg = m.groups()
    pw = re.fullmatch(r"2\s*\*\*\s*(-?\d+)", arg)
    try:
        scale = 2.0 ** int(pw.group(1)) if pw else float(arg)
    except ValueError:
        raise ValueError(f"bad loss scale {arg!r} in recipe {spec!r}: give a number or 2**k") from None
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"the loss scale must be finite and > 0, got {scale} in {spec!r}")
    return Recipe(f"{fam}({scale:g})", torch.float16, None, master_weights=_SCALED[fam], static_scale=scale)


@dataclass
class History:
    """What happened at each optimizer step of one :func:`train` run (lists, one entry per step)."""

    recipe: str
    loss: list = field(default_factory=list)          # training-batch loss (nan if non-finite)
    accuracy: list = field(default_factory=list)      # training-batch accuracy
    scale: list = field(default_factory=list)         # loss scale used (1.0 without scaling)
    skipped: list = field(default_factory=list)       # True where inf/NaN gradients skipped the step
    nonfinite_grads: list = field(default_factory=list)  # True where a gradient held inf/NaN
    time_s: list = field(default_factory=list)        # wall time of the step
    lr: list = field(default_factory=list)            # learning rate used
    lost_updates: list = field(default_factory=list)  # with track_updates: fraction rounded away
    eval_steps: list = field(default_factory=list)    # steps at which the eval set was scored
    eval_loss: list = field(default_factory=list)
    eval_accuracy: list = field(default_factory=list)
    model: nn.Module | None = field(default=None, repr=False)
    optimizer: torch.optim.Optimizer | None = field(default=None, repr=False)
    scaler: object = field(default=None, repr=False)

    @property
    def steps(self) -> int:
        return len(self.loss)

    @property
    def skipped_steps(self) -> int:
        return int(sum(self.skipped))

    @property
    def total_time_s(self) -> float:
        return float(sum(self.time_s))

    @property
    def final_eval(self) -> dict:
        """``{"loss", "accuracy"}`` of the last evaluation (nan if none was run)."""
        if not self.eval_steps:
            return {"loss": float("nan"), "accuracy": float("nan")}
        return {"loss": self.eval_loss[-1], "accuracy": self.eval_accuracy[-1]}

    def final_loss(self, last: float = 0.1) -> float:
        """Mean training loss over the last ``last`` fraction of steps (nan if any is nan)."""
        if not self.loss:
            return float("nan")
        k = max(1, int(round(len(self.loss) * last)))
        return float(sum(self.loss[-k:]) / k)

    def to_dict(self) -> dict:
        """The per-step lists as plain Python (for JSON), without the model/optimizer/scaler."""
        skip = {"model", "optimizer", "scaler"}
        return {k: v for k, v in self.__dict__.items() if k not in skip}


def make_optimizer(params, name: "str | Callable" = "adam", *, lr: float = 1e-3, momentum: float = 0.0,
                   weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """``"sgd"`` (with ``momentum``), ``"adam"`` or ``"adamw"`` over ``params``; or call a factory
    ``name(params)``. ``foreach=False`` keeps the plain per-tensor code path on every device."""
    params = list(params)
    if callable(name):
        return name(params)
    if not (isinstance(lr, (int, float)) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, foreach=False)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=False)
    raise ValueError(f"unknown optimizer {name!r}; accepted: 'sgd', 'adam', 'adamw' or a callable(params)")


def _all_finite(tensors) -> bool:
    flags = [torch.isfinite(t).all() for t in tensors if t is not None]
    return bool(torch.stack(flags).all()) if flags else True


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(task, model: "nn.Module | str | None" = None, recipe: "str | Recipe" = "fp32", *,
          steps: int = 200, batch_size: int = 64, lr: float = 1e-3, optimizer: "str | Callable" = "adam",
          momentum: float = 0.0, weight_decay: float = 0.0, seed: int = 0, device=None,
          clip_grad_norm: float | None = None, accumulate: int = 1, scheduler: Callable | None = None,
          scaler_factory: Callable | None = None, scaler_kwargs: dict | None = None,
          eval_every: int | None = None, track_updates: bool = False, log_every: int = 0,
          callback: Callable | None = None) -> History:
    """Train ``model`` on ``task`` for ``steps`` optimizer steps with precision ``recipe``.

    ``model``: an ``nn.Module`` (trained in place and, for fp16/bf16 recipes, cast in place), a
    model name for :func:`amp_edu.models.build` (built with ``seed``), or ``None`` for the task's
    default model. ``device`` defaults to the task's device.

    ``accumulate=k`` sums gradients of ``k`` micro-batches of ``batch_size`` (each loss divided by
    ``k``) before each optimizer step. ``clip_grad_norm`` clips the *unscaled* gradients' total
    norm. ``scheduler(optimizer)`` returns an lr scheduler stepped after every optimizer step.
    ``scaler_factory(device_type, **scaler_kwargs)`` replaces ``torch.amp.GradScaler`` for
    ``amp_fp16`` (e.g. the course's own scaler). ``eval_every=N`` scores the eval set every N
    steps and at the end (``None``: only at the end; ``0``: never). ``log_every=N`` prints a
    progress line every N steps; ``callback(step, history)`` runs after every step.
    """
    rec = parse_recipe(recipe)
    for nm, v, lo in (("steps", steps, 1), ("batch_size", batch_size, 1), ("accumulate", accumulate, 1),
                      ("log_every", log_every, 0)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{nm} must be an int >= {lo}, got {v!r}")
    if eval_every is not None and (not isinstance(eval_every, int) or eval_every < 0):
        raise ValueError(f"eval_every must be None or an int >= 0, got {eval_every!r}")
    if clip_grad_norm is not None and not clip_grad_norm > 0:
        raise ValueError(f"clip_grad_norm must be None or > 0, got {clip_grad_norm!r}")
    dev = torch.device(device) if device is not None else task.device
    if task.device != dev:
        task = task.to(dev)
    if model is None or isinstance(model, str):
        model = _models.build(model, task, seed=seed)
    elif not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, a model name or None, got {type(model).__name__}")
    model.to(dev)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    # --- precision set-up -----------------------------------------------------------------
    if rec.param_dtype != torch.float32:
        model.to(rec.param_dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    if rec.master_weights:
        master = [p.detach().float().clone() for p in params]
        opt = make_optimizer(master, optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay)
    else:
        master = None
        opt = make_optimizer(params, optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay)
    sched = scheduler(opt) if scheduler is not None else None
    scaler = None
    if rec.dynamic_scaler:
        factory = scaler_factory or torch.amp.GradScaler
        scaler = factory(dev.type, **(scaler_kwargs or {}))
    elif scaler_factory is not None or scaler_kwargs:
        raise ValueError(f"scaler_factory/scaler_kwargs apply to amp_fp16 only, not {rec.name!r}")
    input_dtype = rec.param_dtype if rec.param_dtype != torch.float32 else None
    if rec.autocast_dtype is not None:
        ctx = lambda: torch.amp.autocast(dev.type, dtype=rec.autocast_dtype)  # noqa: E731
    else:
        ctx = contextlib.nullcontext
    S = rec.static_scale or 1.0

    hist = History(rec.name, model=model, optimizer=opt, scaler=scaler)
    evaluate = lambda: task.evaluate(model, input_dtype=input_dtype, context=ctx)  # noqa: E731

    def record_eval(step):
        r = evaluate()
        hist.eval_steps.append(step)
        hist.eval_loss.append(r["loss"])
        hist.eval_accuracy.append(r["accuracy"])

    for step in range(1, steps + 1):
        _sync(dev)
        t0 = time.perf_counter()
        for p in params:
            p.grad = None
        loss_sum, acc_sum = 0.0, 0.0
        scale_used = scaler.get_scale() if scaler is not None else S
        lr_used = opt.param_groups[0]["lr"]
        for _ in range(accumulate):
            x, y = task.batch(batch_size, gen)
            if input_dtype is not None and x.is_floating_point():
                x = x.to(input_dtype)
            with ctx():
                logits = model(x)
            loss = task.loss(logits, y)
            loss_sum += loss.item() / accumulate
            acc_sum += task.accuracy(logits.detach(), y) / accumulate
            micro = loss / accumulate
            if scaler is not None:
                micro = scaler.scale(micro)
            elif S != 1.0:
                micro = micro * S
            micro.backward()

        # --- unscale, check, clip, step ------------------------------------------------------
        if master is not None:                      # fp16 grads -> fp32 master grads, unscaled there
            for p, m in zip(params, master):
                m.grad = None if p.grad is None else p.grad.float().mul_(1.0 / S)
            step_params = master
        else:
            step_params = params
            if scaler is not None:
                scaler.unscale_(opt)
            elif S != 1.0:
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(1.0 / S)
        finite = _all_finite([p.grad for p in step_params])
        # Only a recipe with loss scaling checks and skips; the others step whatever the grads
        # hold, as a plain loop would (so NaN gradients reach the weights).
        skip = not finite and (scaler is not None or rec.static_scale is not None)
        before = [p.detach().clone() for p in step_params] if track_updates else None
        if clip_grad_norm is not None and not skip:
            torch.nn.utils.clip_grad_norm_(step_params, clip_grad_norm)
        if scaler is not None:
            scaler.step(opt)                        # skips by itself when it found inf/NaN
            scaler.update()
        elif not skip:
            opt.step()
        if master is not None and not skip:
            with torch.no_grad():
                for p, m in zip(params, master):
                    p.copy_(m)
        if sched is not None and not skip:
            sched.step()
        _sync(dev)
        hist.time_s.append(time.perf_counter() - t0)

        if track_updates:
            moved = had_grad = 0
            for p, b in zip(step_params, before):
                if p.grad is None:
                    continue
                g = p.grad != 0
                had_grad += int(g.sum())
                moved += int((g & (p.detach() != b)).sum())
            hist.lost_updates.append((had_grad - moved) / had_grad if had_grad and not skip else 0.0)
        hist.loss.append(loss_sum if math.isfinite(loss_sum) else float("nan"))
        hist.accuracy.append(acc_sum)
        hist.scale.append(float(scale_used))
        hist.skipped.append(skip)
        hist.nonfinite_grads.append(not finite)
        hist.lr.append(lr_used)
        if eval_every and step % eval_every == 0 and step != steps:
            record_eval(step)
        if log_every and (step % log_every == 0 or step == steps):
            print(f"[{rec.name}] step {step:>5}/{steps}  loss {hist.loss[-1]:.4f}  acc {acc_sum:.3f}"
                  f"  scale {scale_used:g}  skipped {hist.skipped_steps}", flush=True)
        if callback is not None:
            callback(step, hist)
    if eval_every != 0:
        record_eval(steps)
    return hist
