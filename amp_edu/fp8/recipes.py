"""fp8 training recipes: which fp8 dtype and scale granularity each of a linear layer's tensors gets.

A linear layer ``y = x @ W.T`` runs three GEMMs, and each casts its two operands to fp8:

==============  =====================  ==========================================
GEMM            operands               row-wise recipe: one scale per ...
==============  =====================  ==========================================
output          x @ W.T                row of x, output feature of W
grad_input      dY @ W                 row of dY, input feature of W
grad_weight     dY.T @ x               output feature (column of dY), column of x
==============  =====================  ==========================================

* ``tensorwise`` (torchao's default): one scale per tensor, computed from the current tensor
  (dynamic / "current" scaling); e4m3 for x and W, e5m2 for the gradient dY (the FP8 paper's
  split: gradients need range more than precision). Only the output GEMM uses fast accumulation.
* ``rowwise``: one scale per row or column (along the GEMM's reduction dim), each rounded down
  to a power of two; e4m3 for everything, the finer scales give gradients the range they need.

These two match ``torchao.float8.Float8LinearConfig.from_recipe_name(name)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Recipe", "SCALINGS", "get_recipe"]


@dataclass(frozen=True)
class Recipe:
    name: str
    rowwise: bool                    # False: one scale per tensor; True: one per row/column
    input_dtype: torch.dtype
    weight_dtype: torch.dtype
    grad_dtype: torch.dtype
    power_of_2: bool                 # round scales down to 2^k
    fast_accum_output: bool = True   # the forward GEMM; the two backward GEMMs never use it


SCALINGS = {
    "tensorwise": Recipe("tensorwise", False, torch.float8_e4m3fn, torch.float8_e4m3fn,
                         torch.float8_e5m2, power_of_2=False),
    "rowwise": Recipe("rowwise", True, torch.float8_e4m3fn, torch.float8_e4m3fn,
                      torch.float8_e4m3fn, power_of_2=True),
}


def get_recipe(recipe) -> Recipe:
    """A :class:`Recipe`, or its name (``"tensorwise"`` or ``"rowwise"``)."""
    if isinstance(recipe, Recipe):
        return recipe
    if isinstance(recipe, str) and recipe in SCALINGS:
        return SCALINGS[recipe]
    raise ValueError(f"recipe must be one of {sorted(SCALINGS)} or a Recipe, got {recipe!r}")
