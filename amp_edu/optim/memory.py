"""Bytes per parameter, counted from the tensors a model and its optimizer really hold.

A formula (4 + 4 + 8 = 16 bytes for fp32 Adam) is a claim; this module measures it. It walks the
model's parameters and their gradients, and every value in the optimizer's ``state``: plain
tensors, and tensor subclasses -- this package's :class:`~amp_edu.optim.state.QuantizedState`
(codes, scales, code book), torchao's state subclasses, a ``DTensor`` around either -- through the
inner tensors their ``__tensor_flatten__`` names (a subclass's own ``nbytes`` counts the dtype it
appears as, not what it stores), and adds up ``numel * element_size`` of each storage once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .state import QuantizedState

__all__ = ["Footprint", "footprint", "tensor_bytes"]


def _inner(t) -> list[torch.Tensor]:
    if isinstance(t, QuantizedState):
        return t.tensors()
    if isinstance(t, torch.Tensor):
        flatten = getattr(type(t), "__tensor_flatten__", None)
        if flatten is not None and type(t) is not torch.Tensor and not isinstance(t, nn.Parameter):
            names, _ = t.__tensor_flatten__()
            return [x for n in names for x in _inner(getattr(t, n))]
        return [t]
    return []


def tensor_bytes(objs) -> int:
    """Bytes of the distinct storages behind ``objs`` (tensors, quantized states, subclasses)."""
    seen, total = set(), 0
    for o in objs:
        for t in _inner(o):
            key = (t.untyped_storage().data_ptr(), t.device) if t.numel() else (id(t), t.device)
            if key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes() if t.numel() else 0
    return total


@dataclass(frozen=True)
class Footprint:
    """Bytes of a model's weights, gradients and optimizer state, and the parameter count."""

    params: int
    weights: int
    grads: int
    state: int
    extra: int = 0        # other tensors the recipe keeps (e.g. an fp32 master copy)

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.state + self.extra

    def per_param(self) -> dict[str, float]:
        """``{"weights", "grads", "state", "extra", "total"}`` in bytes per parameter."""
        n = self.params
        return {"weights": self.weights / n, "grads": self.grads / n, "state": self.state / n,
                "extra": self.extra / n, "total": self.total / n}


def footprint(model: nn.Module, optimizer: torch.optim.Optimizer, extra=()) -> Footprint:
    """Count ``model``'s parameters and gradients and ``optimizer``'s state (call it after a
    step, when the state exists). ``extra``: more tensors to count (a master copy, say)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    params = [p for p in model.parameters()]
    state = [v for st in optimizer.state.values() for v in st.values()]
    return Footprint(params=sum(p.numel() for p in params), weights=tensor_bytes(params),
                     grads=tensor_bytes([p.grad for p in params if p.grad is not None]),
                     state=tensor_bytes(state), extra=tensor_bytes(list(extra)))
