"""One training loop, many precision recipes — so recipes are compared on equal terms.

Every lesson that trains calls :func:`train`; only the *recipe* changes. A recipe is an object
(:mod:`amp_edu.recipes`, which says what each one does) or its registered name (``fp32``,
``amp_fp16``, ``fp16_static_scale(S)``, ...: :func:`amp_edu.recipes.specs` lists them all, lesson
10's fp8 and NVFP4 recipes and lesson 12's optimizer recipes included). The loop calls the
recipe's methods at the loop's events, named as fastai names its callback events
(:mod:`amp_edu.recipes.base`)::

    opt = rec.before_fit(model, make_optimizer)           # once
    for each step:
        rec.zero_grad()
        for each micro-batch:                             # `accumulate` of them
            x = rec.before_batch(x)
            with rec.forward_context():
                logits = model(x)
            rec.before_backward(loss(logits, y) / accumulate).backward()
        rec.after_backward()
        finite, skipped = rec.before_step(clip_grad_norm)
        rec.optimizer_step(skipped)
        rec.after_step(skipped)

A run::

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

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn

from . import models as _models
from .recipes import Amp, Recipe, parse_recipe
from .validate import check_int, check_number

__all__ = ["Recipe", "parse_recipe", "History", "train", "make_optimizer"]


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
    scaler: object = field(default=None, repr=False)  # the enabled GradScaler (amp_fp16), else None

    @property
    def steps(self) -> int:
        return len(self.loss)

    @property
    def skipped_steps(self) -> int:
        return int(sum(self.skipped))

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
    lr = check_number(lr, "lr", positive=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, foreach=False)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=False)
    raise ValueError(f"unknown optimizer {name!r}; accepted: 'sgd', 'adam', 'adamw' or a callable(params)")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _check_options(steps, batch_size, accumulate, log_every, eval_every, clip_grad_norm) -> None:
    for nm, v, lo in (("steps", steps, 1), ("batch_size", batch_size, 1), ("accumulate", accumulate, 1),
                      ("log_every", log_every, 0)):
        check_int(v, nm, min=lo)
    if eval_every is not None and check_int(eval_every, "eval_every") < 0:
        raise ValueError(f"eval_every must be None or an int >= 0, got {eval_every!r}")
    if clip_grad_norm is not None:      # inf is torch's "measure the norm, clip nothing"
        check_number(clip_grad_norm, "clip_grad_norm", positive=True, finite=False)


def _recipe(recipe, scaler_factory, scaler_kwargs) -> Recipe:
    """The recipe object; ``scaler_factory``/``scaler_kwargs`` give ``amp_fp16`` its scaler."""
    rec = parse_recipe(recipe)
    if scaler_factory is None and not scaler_kwargs:
        return rec
    if rec.name != "amp_fp16":
        raise ValueError(f"scaler_factory/scaler_kwargs apply to amp_fp16 only, not {rec.name!r}")
    factory, kwargs = scaler_factory or torch.amp.GradScaler, dict(scaler_kwargs or {})
    return Amp(torch.float16, scaler=lambda device_type: factory(device_type, **kwargs))


def _task_and_model(task, model, device, seed):
    dev = torch.device(device) if device is not None else task.device
    if task.device != dev:
        task = task.to(dev)
    if model is None or isinstance(model, str):
        model = _models.build(model, task, seed=seed)
    elif not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, a model name or None, got {type(model).__name__}")
    return task, model.to(dev), dev


def _forward_backward(task, model, rec: Recipe, batch_size: int, accumulate: int, gen) -> tuple:
    """``accumulate`` micro-batches, each loss divided by ``accumulate``: (mean loss, mean accuracy)."""
    loss_sum = acc_sum = 0.0
    for _ in range(accumulate):
        x, y = task.batch(batch_size, gen)
        x = rec.before_batch(x)                                    # event
        with rec.forward_context():
            logits = model(x)
        loss = task.loss(logits, y)
        loss_sum += loss.item() / accumulate
        acc_sum += task.accuracy(logits.detach(), y) / accumulate
        rec.before_backward(loss / accumulate).backward()          # event, then backward
    return loss_sum, acc_sum


def _step(rec: Recipe, clip_grad_norm: float | None) -> tuple[bool, bool]:
    """After the micro-batches: the step's events around the optimizer step; ``(finite, skipped)``."""
    rec.after_backward()                                           # event: true gradients
    finite, skipped = rec.before_step(clip_grad_norm)              # event: inf/NaN? skip? clip
    rec.optimizer_step(skipped)
    rec.after_step(skipped)                                        # event: scale update, master copy back
    return finite, skipped


def _lost_fraction(weights, before, skipped: bool) -> float:
    """Fraction of the weights with a non-zero gradient that did not change in the step."""
    moved = had_grad = 0
    for w, b in zip(weights, before):
        if w.grad is not None:
            g = w.grad != 0
            had_grad += int(g.sum())
            moved += int((g & (w.detach() != b)).sum())
    return (had_grad - moved) / had_grad if had_grad and not skipped else 0.0


def _record_eval(hist: History, task, model, rec: Recipe, step: int) -> None:
    r = task.evaluate(model, input_dtype=rec.input_dtype, context=rec.forward_context)
    hist.eval_steps.append(step)
    hist.eval_loss.append(r["loss"])
    hist.eval_accuracy.append(r["accuracy"])


class _NoScheduler:
    def step(self) -> None:
        pass


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
    default model. ``device`` defaults to the task's device. ``recipe``: a name (see the module
    docstring) or an :class:`amp_edu.recipes.Recipe` object.

    ``accumulate=k`` sums gradients of ``k`` micro-batches of ``batch_size`` (each loss divided by
    ``k``) before each optimizer step. ``clip_grad_norm`` clips the *unscaled* gradients' total
    norm. ``scheduler(optimizer)`` returns an lr scheduler stepped after every optimizer step.
    ``scaler_factory(device_type, **scaler_kwargs)`` replaces ``torch.amp.GradScaler`` for
    ``amp_fp16`` (e.g. the course's own scaler). ``eval_every=N`` scores the eval set every N
    steps and at the end (``None``: only at the end; ``0``: never). ``log_every=N`` prints a
    progress line every N steps; ``callback(step, history)`` runs after every step.
    """
    _check_options(steps, batch_size, accumulate, log_every, eval_every, clip_grad_norm)
    rec = _recipe(recipe, scaler_factory, scaler_kwargs)
    task, model, dev = _task_and_model(task, model, device, seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = rec.before_fit(model, lambda params: make_optimizer(params, optimizer, lr=lr, momentum=momentum,
                                                              weight_decay=weight_decay))
    sched = scheduler(opt) if scheduler is not None else _NoScheduler()
    hist = History(rec.name, model=model, optimizer=opt,
                   scaler=rec.scaler if rec.scaler_enabled else None)
    for step in range(1, steps + 1):
        _sync(dev)
        t0 = time.perf_counter()
        rec.zero_grad()
        hist.scale.append(rec.scale)
        hist.lr.append(opt.param_groups[0]["lr"])
        loss, acc = _forward_backward(task, model, rec, batch_size, accumulate, gen)
        before = [w.detach().clone() for w in rec.weights] if track_updates else None
        finite, skipped = _step(rec, clip_grad_norm)
        if not skipped:
            sched.step()
        _sync(dev)
        hist.time_s.append(time.perf_counter() - t0)
        if track_updates:
            hist.lost_updates.append(_lost_fraction(rec.weights, before, skipped))
        hist.loss.append(loss if math.isfinite(loss) else float("nan"))
        hist.accuracy.append(acc)
        hist.skipped.append(skipped)
        hist.nonfinite_grads.append(not finite)
        if eval_every and step % eval_every == 0 and step != steps:
            _record_eval(hist, task, model, rec, step)
        if log_every and (step % log_every == 0 or step == steps):
            print(f"[{rec.name}] step {step:>5}/{steps}  loss {hist.loss[-1]:.4f}  acc {acc:.3f}"
                  f"  scale {hist.scale[-1]:g}  skipped {hist.skipped_steps}", flush=True)
        if callback is not None:
            callback(step, hist)
    if eval_every != 0:
        _record_eval(hist, task, model, rec, steps)
    return hist
