"""Exercise 08's plan: run the learner's AMP training loop in each situation the check describes.

A model, an optimizer and a ``GradScaler`` cannot travel to the judge, so a situation describes
them — the seed of the model's weights, the scaler's first scale and growth interval, whether the
model arrives with stale gradients (:func:`setup`) — next to the batches (plain tensors) and the
loop's keyword arguments. :func:`train_amp` builds a fresh model, optimizer and scaler per
situation, calls the learner's ``train_amp`` on them and reports the outcome (did it raise, and
with which message: the judge's hint depends on it) and the final state (:func:`state`): the
scale, the growth tracker and every parameter. The judge runs its reference loop on its own
objects built by the same :func:`setup`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..device import num_threads
from ..models import mlp
from .runner import call

__all__ = ["setup", "batches", "state", "train_amp"]


def batches(seed: int, n: int, bad: tuple = ()) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` micro-batches ``(x, y)`` of 16 samples, 8 features, 4 classes drawn from ``seed``; the
    inputs of the batches numbered in ``bad`` are × 1e5 (their fp16 forward overflows)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        x = torch.randn(16, 8, generator=g)
        y = torch.randint(0, 4, (16,), generator=g)
        out.append((x * 1e5 if i in bad else x, y))
    return out


def setup(seed: int, init_scale: float, growth_interval: int, stale: bool = False):
    """A fresh ``(model, optimizer, scaler)``: an MLP 8 → 16 → 4 with weights drawn from ``seed``, SGD
    with momentum, a CPU ``GradScaler``; with ``stale``, the model carries the gradients of one
    earlier backward (a gradient check, an evaluation)."""
    model = mlp([8, 16, 4], seed=seed)
    if stale:
        x, y = batches(seed + 100, 1)[0]
        F.cross_entropy(model(x), y).backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    return model, opt, scaler


def state(model, scaler) -> dict:
    """The scale, the growth tracker and a copy of every parameter."""
    sd = torch.amp.GradScaler.state_dict(scaler)
    return {"scale": float(sd["scale"]), "growth_tracker": int(sd["_growth_tracker"]),
            "params": {n: p.detach().clone() for n, p in model.named_parameters()}}


def train_amp(cases, train_amp_fn) -> list[dict]:
    """For each situation ``(label, description, setup kwargs, batches, loop kwargs)``: the outcome of
    ``train_amp(model, optimizer, scaler, batches, device_type="cpu", dtype=torch.float16, **kw)``
    (its return value is not graded: ``None`` stands for any) and the state afterwards."""
    out = []
    with num_threads(1):        # tiny models: one thread is faster, much faster on a busy machine
        for _label, _desc, kwargs, data, kw in cases:
            model, opt, scaler = setup(**kwargs)
            outcome = call(train_amp_fn, model, opt, scaler, [(x.clone(), y.clone()) for x, y in data],
                           device_type="cpu", dtype=torch.float16, **kw)
            if "ok" in outcome:
                outcome = {"ok": None}
            out.append({"outcome": outcome, "state": state(model, scaler)})
    return out
