"""``Float8Linear``: an ``nn.Linear`` whose three GEMMs run in fp8, built from the pieces before.

Forward (``y = x @ W.T + b``)::

    x8 = cast(x, e4m3)           W8 = cast(W.T, e4m3)          y = scaled_mm(x8, W8) + b

Backward, with ``dY`` the incoming gradient (e5m2 per tensor, or e4m3 per row)::

    dX = scaled_mm(cast(dY), cast(W.T).t())        # grad_input:  dY @ W
    dW = scaled_mm(cast(dY).t(), cast(x))          # grad_weight: dY.T @ x
    db = dY.sum(0)                                 # autograd, in high precision

What is *saved* for backward is the high-precision ``x`` and ``W`` (not their fp8 casts): each
backward GEMM needs its operands scaled along its own reduction dim, so they are cast again.
The weights themselves stay in their high-precision dtype (the master copy the optimizer
updates): fp8 is only the format of the GEMM operands.

The bias is added outside the fp8 GEMM in the output dtype, and under CUDA autocast the input
is cast to the autocast dtype first, both as torchao does; with those rules the outputs and the
gradients are bit-identical to ``torchao.float8.Float8Linear`` (``tests/test_fp8_parity.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from .cast import Float8Tensor, cast_to_float8
from .gemm import scaled_mm
from .recipes import Recipe, get_recipe

__all__ = ["Float8Linear", "float8_matmul"]


def _cast(x: torch.Tensor, fp8_dtype: torch.dtype, recipe: Recipe, dim: int) -> Float8Tensor:
    """Cast with the recipe's granularity: per tensor, or one scale per slice along ``dim``."""
    return cast_to_float8(x, fp8_dtype, dim=dim if recipe.rowwise else None,
                          power_of_2=recipe.power_of_2)


class _Float8Matmul(torch.autograd.Function):
    """``input @ weight_t`` with both operands cast to fp8, forward and backward."""

    @staticmethod
    def forward(ctx, input_hp, weight_t_hp, recipe: Recipe):
        ctx.save_for_backward(input_hp, weight_t_hp)
        ctx.recipe = recipe
        x2d = input_hp.reshape(-1, input_hp.shape[-1])
        x8 = _cast(x2d, recipe.input_dtype, recipe, dim=-1)          # one scale per row of x
        w8 = _cast(weight_t_hp, recipe.weight_dtype, recipe, dim=0)  # one per output feature
        out = scaled_mm(x8, w8, use_fast_accum=recipe.fast_accum_output)
        return out.reshape(*input_hp.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        input_hp, weight_t_hp = ctx.saved_tensors
        r = ctx.recipe
        go = grad_output.reshape(-1, grad_output.shape[-1])
        # grad_input = dY @ W: reduce over output features
        go8 = _cast(go, r.grad_dtype, r, dim=-1)
        w8 = _cast(weight_t_hp, r.weight_dtype, r, dim=-1)
        grad_input = scaled_mm(go8, w8.t()).reshape(*grad_output.shape[:-1], -1)
        # grad_weight = dY.T @ x: reduce over the batch (tokens)
        go8_cols = _cast(go, r.grad_dtype, r, dim=0)
        x8_cols = _cast(input_hp.reshape(-1, input_hp.shape[-1]), r.input_dtype, r, dim=0)
        grad_weight = scaled_mm(go8_cols.t(), x8_cols)
        return grad_input, grad_weight.t(), None


def float8_matmul(input: torch.Tensor, weight_t: torch.Tensor, recipe="tensorwise") -> torch.Tensor:
    """``input @ weight_t`` (``input`` ``(..., k)``, ``weight_t`` ``(k, n)``) in fp8, differentiable."""
    return _Float8Matmul.apply(input, weight_t, get_recipe(recipe))


class Float8Linear(nn.Linear):
    """``nn.Linear`` with fp8 GEMMs under a recipe (``"tensorwise"`` or ``"rowwise"``).

    ``Float8Linear(in_features, out_features, bias=True, recipe="tensorwise", device=None,
    dtype=None)``, or :meth:`from_float` to wrap an existing layer's parameters (shared, not copied).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 recipe="tensorwise", device=None, dtype=None):
        self.recipe = get_recipe(recipe)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)

    @classmethod
    def from_float(cls, mod: nn.Linear, recipe="tensorwise") -> "Float8Linear":
        if not isinstance(mod, nn.Linear):
            raise TypeError(f"from_float takes an nn.Linear, got {type(mod).__name__}")
        with torch.device("meta"):
            new = cls(mod.in_features, mod.out_features, bias=False, recipe=recipe)
        new.weight = mod.weight
        new.bias = mod.bias
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled():                    # CUDA autocast, as torchao does
            input = input.to(torch.get_autocast_dtype("cuda"))
        out = _Float8Matmul.apply(input, self.weight.t(), self.recipe)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name}"
