"""Exercise 04's plans: drive the learner's two GradScaler pieces and report what they did.

* :func:`unscale`: ``unscale_and_check_(grads, scale)`` on each case's gradients, with a
  :class:`Divisions` spy that notes every division-like torch call made in less than float64
  precision (the exercise asks for the inverse in float64); the result per case is the outcome,
  the gradients after the call (they are unscaled in place) and the spy's notes.
* :func:`update`: ``update_scale_(scale, growth_tracker, found_inf, ...)`` on fresh 0-dim tensors;
  the result is the outcome and both tensors after the call (they are updated in place).

The spy runs in the learner's process and could be switched off by the learner: it only refines a
hint. The values it watches are judged by value like every answer.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from .runner import call

__all__ = ["unscale", "update", "Divisions"]

_DIVISIONS = {"reciprocal", "reciprocal_", "div", "div_", "true_divide", "true_divide_", "__truediv__",
              "__rtruediv__", "__itruediv__", "__div__", "__rdiv__", "pow", "pow_", "__pow__", "__rpow__",
              "float_power", "divide"}


class Divisions(TorchFunctionMode):
    """Records every division-like torch call whose result is not float64."""

    def __init__(self):
        super().__init__()
        self.narrow: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", str(func))
        if name in _DIVISIONS and isinstance(out, torch.Tensor) and out.is_floating_point() \
                and out.dtype != torch.float64:
            self.narrow.append(f"{name} -> {out.dtype}")
        return out


def unscale(cases, unscale_and_check_) -> list[dict]:
    out = []
    for _label, grads, scale_value in cases:
        scale = torch.tensor(scale_value, dtype=torch.float32)
        spy = Divisions()
        with spy:
            outcome = call(unscale_and_check_, grads, scale)
        out.append({"outcome": outcome, "grads": grads, "narrow": spy.narrow})
    return out


def update(cases, update_scale_) -> list[dict]:
    out = []
    for _label, scale, tracker, found, gf, bf, gi in cases:
        s = torch.tensor(scale, dtype=torch.float32)
        t = torch.tensor(tracker, dtype=torch.int32)
        outcome = call(update_scale_, s, t, torch.tensor(found), gf, bf, gi)
        out.append({"outcome": outcome, "scale": s, "growth_tracker": t})
    return out
