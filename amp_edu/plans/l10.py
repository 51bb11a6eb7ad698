"""Plans of exercise 10 (fp8 scaling): call the learner's function on each case and hand back what
it returned and the tensor it must leave alone, as it is after the call.

Each case describes its arguments as plain values (a Python float for a scale or an amax, which
becomes a float32 0-dim tensor here); every call gets fresh copies, so a function that writes into
its input spoils only its own case.
"""

from __future__ import annotations

from typing import Callable

import torch

from .runner import call

__all__ = ["quantize_tensorwise_plan", "delayed_update_plan"]


def _scalar(value) -> torch.Tensor:
    """A float32 0-dim tensor for a Python number; a tensor as it is (a copy)."""
    if type(value) is torch.Tensor:
        return value.clone()
    return torch.tensor(value, dtype=torch.float32)


def quantize_tensorwise_plan(cases, quantize_tensorwise: Callable) -> list[dict]:
    """``quantize_tensorwise(x, fp8_dtype)`` (or ``(x, fp8_dtype, scale)`` where a case gives the
    scale) for each case ``(label, x, fp8_dtype, scale or None)``: ``{"outcome", "x"}`` per case,
    ``x`` the argument after the call."""
    out = []
    for _label, x, dtype, given in cases:
        theirs = x.clone()
        args = (theirs, dtype) if given is None else (theirs, dtype, _scalar(given))
        out.append({"outcome": call(quantize_tensorwise, *args), "x": theirs})
    return out


def delayed_update_plan(cases, delayed_update: Callable) -> list[dict]:
    """``delayed_update(history, amax, scale, fp8_dtype, margin)`` for each case ``(label, history,
    amax, scale, fp8_dtype, margin)``: ``{"outcome", "history"}`` per case, ``history`` the
    argument after the call."""
    out = []
    for _label, history, amax, prev, dtype, margin in cases:
        theirs = history.clone()
        outcome = call(delayed_update, theirs, _scalar(amax), _scalar(prev), dtype, margin)
        out.append({"outcome": outcome, "history": theirs})
    return out
