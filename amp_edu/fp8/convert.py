"""Swap a model's ``nn.Linear`` layers for fp8 ones, like ``torchao.float8.convert_to_float8_training``.

``convert_to_float8_training(model, recipe="tensorwise", module_filter_fn=None)`` walks the
model children first and replaces every ``nn.Linear`` for which
``module_filter_fn(module, fully_qualified_name)`` is true (all of them when it is None). The new
layers share the old parameters, so an optimizer built before or after the swap updates the same
tensors. A model that *is* an ``nn.Linear`` is returned converted (not modified in place).

Recipes: ``"tensorwise"`` and ``"rowwise"`` (:class:`~amp_edu.fp8.linear.Float8Linear`, equal
to torchao's), and ``"delayed"`` (:class:`~amp_edu.fp8.delayed.DelayedFloat8Linear`; pass
``history_len`` and ``margin``). Keep the first and last layers out with the filter, e.g.
``module_filter_fn=lambda m, name: name not in ("embed", "head")``.
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from .delayed import DelayedFloat8Linear
from .linear import Float8Linear
from .recipes import SCALINGS, get_recipe

__all__ = ["convert_to_float8_training", "RECIPE_NAMES"]

RECIPE_NAMES = (*SCALINGS, "delayed")


def _swapper(recipe, history_len, margin) -> Callable[[nn.Linear], nn.Module]:
    if recipe == "delayed":
        return lambda m: DelayedFloat8Linear.from_float(m, history_len=history_len, margin=margin)
    r = get_recipe(recipe)
    if history_len is not None or margin is not None:
        raise ValueError("history_len and margin apply to recipe='delayed' only")
    return lambda m: Float8Linear.from_float(m, recipe=r)


def convert_to_float8_training(model: nn.Module, recipe="tensorwise", *,
                               module_filter_fn: Callable[[nn.Module, str], bool] | None = None,
                               history_len: int | None = None, margin: int | None = None) -> nn.Module:
    """Replace the ``nn.Linear`` layers of ``model`` with fp8 layers; returns ``model``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not (isinstance(recipe, str) and recipe in RECIPE_NAMES) and not hasattr(recipe, "rowwise"):
        raise ValueError(f"recipe must be one of {RECIPE_NAMES} or a Recipe, got {recipe!r}")
    if module_filter_fn is not None and not callable(module_filter_fn):
        raise TypeError("module_filter_fn must be a callable (module, fqn) -> bool, or None")
    if recipe == "delayed":
        history_len = 16 if history_len is None else history_len
        margin = 0 if margin is None else margin
    swap = _swapper(recipe, history_len, margin)
    keep = module_filter_fn or (lambda m, fqn: True)

    if isinstance(model, nn.Linear) and keep(model, ""):
        if len(list(model.children())) > 0:
            raise ValueError(f"a root nn.Linear with children is not supported: {model}")
        return swap(model)

    def visit(module: nn.Module, fqn: str) -> None:
        for name, child in module.named_children():
            child_fqn = f"{fqn}.{name}" if fqn else name
            visit(child, child_fqn)
            if isinstance(child, nn.Linear) and keep(child, child_fqn):
                setattr(module, name, swap(child))

    visit(model, "")
    return model
