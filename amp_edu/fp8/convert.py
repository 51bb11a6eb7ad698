"""Swap a model's ``nn.Linear`` layers for fp8 ones, like ``torchao.float8.convert_to_float8_training``.

``convert_to_float8_training(model, recipe="tensorwise", module_filter_fn=None)`` walks the
model children first and replaces every ``nn.Linear`` for which
``module_filter_fn(module, fully_qualified_name)`` is true (all of them when it is None). The new
layers share the old parameters, so an optimizer built before or after the swap updates the same
tensors. A model that *is* an ``nn.Linear`` is returned converted (not modified in place).

``recipe`` is a name of :func:`~amp_edu.fp8.config.config_names` (torchao's ``tensorwise``,
``rowwise``, ``rowwise_with_gw_hp``, TE-style ``delayed``, ...) or a
:class:`~amp_edu.fp8.config.Float8LinearConfig`, e.g.
``Float8LinearConfig.from_recipe_name("delayed", history_len=4, margin=1)``. Keep the first and
last layers out with the filter, e.g. ``module_filter_fn=lambda m, name: name not in ("embed", "head")``,
or :func:`keep_head`, the course's filter (every linear layer but the output ``head``), which the
training recipes and the NVFP4 converter (:mod:`amp_edu.fp4.linear`) use.

For FSDP2's fp8 all-gather pass ``Float8LinearConfig.from_recipe_name("tensorwise",
enable_fsdp_float8_all_gather=True)``: each converted weight becomes a new ``nn.Parameter`` over the
same storage, the wrapper whose hooks FSDP2 calls (:mod:`~amp_edu.fp8.fsdp`). Convert before
``fully_shard``, build the optimizer after both, and call
:func:`~amp_edu.fp8.fsdp.precompute_float8_dynamic_scale_for_fsdp` after each optimizer step.
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from .config import get_config
from .linear import Float8Linear

__all__ = ["convert_to_float8_training", "swap_linears", "keep_head"]


def keep_head(module: nn.Module, fqn: str) -> bool:
    """The course's module filter: convert every linear layer except one named ``head`` (the
    output), as torchao and Transformer Engine recommend for the last layer."""
    return fqn.split(".")[-1] != "head"


def convert_to_float8_training(model: nn.Module, recipe="tensorwise", *,
                               module_filter_fn: Callable[[nn.Module, str], bool] | None = None) -> nn.Module:
    """Replace the ``nn.Linear`` layers of ``model`` with :class:`Float8Linear`; returns ``model``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    config = get_config(recipe)
    return swap_linears(model, lambda m: Float8Linear.from_float(m, config=config), module_filter_fn)


def swap_linears(model: nn.Module, swap: Callable[[nn.Linear], nn.Module],
                 module_filter_fn: Callable[[nn.Module, str], bool] | None = None, *,
                 root: bool = True, plain_only: bool = False) -> nn.Module:
    """The walk every converter of this package uses: children first, replace each ``nn.Linear``
    ``child`` for which ``module_filter_fn(child, fully_qualified_name)`` is true (all when None)
    by ``swap(child)``; returns ``model``. ``root``: a model that *is* an ``nn.Linear`` is returned
    swapped; ``plain_only``: only layers whose type is exactly ``nn.Linear`` (not a subclass, e.g.
    one converted before) are swapped."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if module_filter_fn is not None and not callable(module_filter_fn):
        raise TypeError("module_filter_fn must be a callable (module, fqn) -> bool, or None")
    keep = module_filter_fn or (lambda m, fqn: True)
    is_linear = (lambda m: type(m) is nn.Linear) if plain_only else (lambda m: isinstance(m, nn.Linear))

    if root and isinstance(model, nn.Linear) and keep(model, ""):
        if len(list(model.children())) > 0:
            raise ValueError(f"a root nn.Linear with children is not supported: {model}")
        return swap(model)

    def visit(module: nn.Module, fqn: str) -> None:
        for name, child in module.named_children():
            child_fqn = f"{fqn}.{name}" if fqn else name
            visit(child, child_fqn)
            if is_linear(child) and keep(child, child_fqn):
                setattr(module, name, swap(child))

    visit(model, "")
    return model
