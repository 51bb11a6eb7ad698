"""Which module produced the first inf/NaN: a forward hook on every module, in call order.

Hooks fire when a module *returns*, so the calls are recorded in the order they finish: a child
always reports before the parent that called it, and the first call with a non-finite output is
the innermost module that produced it. ``named_modules()`` order would not do: it is the order
modules were registered, not called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .. import formats, tree
from ..hooks import forward_hooks

__all__ = ["ModuleCall", "trace_modules", "first_nonfinite", "nonfinite_rows"]


def _count_nonfinite(obj: Any) -> tuple[int, int, int, float, str | None]:
    """(n_nan, n_inf, numel, largest finite |value|, dtype name) over the floating tensors of obj."""
    n_nan = n_inf = numel = 0
    amax, dtype = 0.0, None
    for t in tree.floating(obj):
        t = t.detach()
        dtype = dtype or formats.dtype_name(t.dtype)
        numel += t.numel()
        if t.numel() == 0:
            continue
        nan = torch.isnan(t)
        inf = torch.isinf(t)
        n_nan += int(nan.sum())
        n_inf += int(inf.sum())
        finite = t[~(nan | inf)]
        if finite.numel():
            amax = max(amax, float(finite.abs().max()))
    return n_nan, n_inf, numel, amax, dtype


@dataclass(frozen=True)
class ModuleCall:
    """One finished call of one module during a forward pass."""

    index: int             # order in which the call finished (0 = first)
    name: str              # qualified name as in ``model.named_modules()``; '' is the model itself
    module: str            # class name, e.g. 'Linear'
    dtype: str | None      # dtype of the (first floating) output tensor
    absmax: float          # largest finite |value| of the output (0.0 if none)
    n_nan: int
    n_inf: int
    numel: int
    inputs_finite: bool    # were all floating inputs (args and kwargs) finite?
    leaf: bool             # a module without children

    @property
    def finite(self) -> bool:
        return self.n_nan == 0 and self.n_inf == 0

    @property
    def kind(self) -> str:
        """'finite', 'nan', 'inf' or 'inf and nan'."""
        if self.finite:
            return "finite"
        if self.n_nan and self.n_inf:
            return "inf and nan"
        return "nan" if self.n_nan else "inf"

    def __str__(self) -> str:
        where = f"{self.name or '(the model itself)'} ({self.module})"
        if self.finite:
            return f"{where}: finite, max |output| {self.absmax:.4g} ({self.dtype})"
        bad = self.n_nan + self.n_inf
        origin = ("its inputs were finite, so it produced them" if self.inputs_finite else
                  "it received non-finite inputs: the cause is code that runs between modules, "
                  "in its parent's forward")
        return f"{where}: {bad} of {self.numel} output values are {self.kind} ({self.dtype}); {origin}"


def trace_modules(model: nn.Module, *inputs, **kwargs) -> tuple[Any, list[ModuleCall]]:
    """Run ``model(*inputs, **kwargs)`` with a forward hook on every module.

    Returns ``(output, calls)``: one :class:`ModuleCall` per module call, in the order the calls
    finished. A module called twice appears twice. The hooks are removed afterwards, also when the
    forward raises.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    calls: list[ModuleCall] = []

    def make_hook(name: str, mod: nn.Module):
        leaf = next(iter(mod.children()), None) is None

        def hook(module, args, kw, output):
            n_nan, n_inf, numel, amax, dtype = _count_nonfinite(output)
            i_nan, i_inf, *_ = _count_nonfinite((args, kw))
            calls.append(ModuleCall(len(calls), name, type(module).__name__, dtype, amax,
                                    n_nan, n_inf, numel, i_nan == 0 and i_inf == 0, leaf))
        return hook

    with forward_hooks(model, make_hook, with_kwargs=True):
        output = model(*inputs, **kwargs)
    return output, calls


def first_nonfinite(model: nn.Module, *inputs, **kwargs) -> ModuleCall | None:
    """The first module call whose output holds inf or NaN, or ``None`` if every output is finite.

    "First" is in the order calls finish, so the innermost module that produced the value is found
    before the parents that merely pass it on. Check ``.inputs_finite``: if it is False, the module
    was handed non-finite values made by code between modules (an inline op in the parent's
    ``forward``), and that code is where to look.

    >>> net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())   # doctest: +SKIP
    >>> print(first_nonfinite(net, x))                     # doctest: +SKIP
    0 (Linear): 3 of 8 output values are inf (float16); its inputs were finite, so it produced them
    """
    _, calls = trace_modules(model, *inputs, **kwargs)
    return next((c for c in calls if not c.finite), None)


def nonfinite_rows(x: torch.Tensor) -> torch.Tensor:
    """Indices of the samples (rows along dim 0) of ``x`` that hold any inf or NaN."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if x.dim() == 0:
        raise ValueError("x must have a batch dimension")
    if not x.is_floating_point():
        return torch.zeros(0, dtype=torch.long)
    return (~torch.isfinite(x)).reshape(x.shape[0], -1).any(1).nonzero().flatten()
