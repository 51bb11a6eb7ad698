"""Exercise 03's plans, and the model, master copy and optimizer its step check runs on.

* ``choose_scale`` only reads its gradients: :func:`amp_edu.plans.l02.each_reading`.
* :func:`scaled_step`: a model, an optimizer and a loss cannot travel by value, so each case
  *describes* a scenario — the model's seed, whether it has a layer the forward never uses, the
  loss by name, and the calls (batch ``x``, ``y`` and ``scale``) — and the plan builds it here with
  :func:`setup`, calls the learner's ``scaled_step`` once per batch on the same model, and reports
  after every call what it returned, the master weights, their gradients and the fp16 weights.
  The judge builds the same scenario with the same helpers and runs the reference step on it.
"""

from __future__ import annotations

import copy
import functools
from typing import Callable

import torch
import torch.nn as nn

from ..models import seeded
from .l02 import each_reading
from .runner import call

__all__ = ["each_reading", "scaled_step", "setup", "model", "Net", "mse_loss", "tilted_loss", "LOSSES", "LR"]

LR = 0.05        # the SGD learning rate of the master copy's optimizer


class Net(nn.Module):
    """A small fp16 model; with ``spare=True`` its FIRST parameters belong to a layer the forward
    never uses (their ``.grad`` stays None), so filtering the None gradients misaligns the zip."""

    def __init__(self, spare: bool):
        super().__init__()
        if spare:
            self.spare = nn.Linear(8, 1)
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x):
        return self.body(x)


@functools.lru_cache(maxsize=32)
def _built(seed: int, spare: bool) -> nn.Module:
    with seeded(seed):
        m = Net(spare)
    return m.half()


def model(seed: int, spare: bool = False) -> nn.Module:
    """The fp16 :class:`Net` whose weights come from ``seed`` (a fresh copy on every call)."""
    return copy.deepcopy(_built(seed, bool(spare)))


def setup(seed: int, spare: bool = False):
    """``(model, master, optimizer)``: the fp16 model, its fp32 master copy (a list of leaf tensors,
    one per parameter, in order) and SGD on the master copy."""
    m = model(seed, spare)
    master = [p.detach().float().clone().requires_grad_(True) for p in m.parameters()]
    return m, master, torch.optim.SGD(master, lr=LR)


def mse_loss(out, y):
    return ((out.float() - y) ** 2).mean()


def tilted_loss(out, y):
    """A loss that is not symmetric in its arguments: loss_fn(y, model(x)) gives other gradients."""
    return ((out.float() - y) ** 2).mean() + 0.5 * out.float().mean()


LOSSES = {"mse": mse_loss, "tilted": tilted_loss}


def _snapshot(t):
    """A detached copy of tensor ``t`` as it is now (``None`` stays ``None``; anything else as it is)."""
    return t.detach().clone() if isinstance(t, torch.Tensor) else t


def _grad(t):
    try:
        return _snapshot(t.grad)
    except Exception as exc:  # noqa: BLE001 - the master list may hold anything after the learner's step
        return f"unreadable .grad ({type(exc).__name__})"


def scaled_step(cases, fn: Callable) -> list[list[dict]]:
    """For each scenario, on a fresh :func:`setup`, ``fn(model, master, optimizer, loss_fn, x, y,
    scale)`` per call: ``{"outcome", "master", "master_grads", "fp16"}`` after each call."""
    out = []
    for sc in cases:
        m, master, opt = setup(sc["seed"], sc["spare"])
        loss_fn = LOSSES[sc["loss"]]
        calls = []
        for c in sc["calls"]:
            outcome = call(fn, m, master, opt, loss_fn, c["x"], c["y"], c["scale"])
            calls.append({"outcome": outcome,
                          "master": [_snapshot(t) for t in master],
                          "master_grads": [_grad(t) for t in master],
                          "fp16": [_snapshot(p) for p in m.parameters()]})
        out.append(calls)
    return out
