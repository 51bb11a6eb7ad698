"""fp8 training recipes for :func:`amp_edu.train.train`: one class, three registered names.

``fp8_tensorwise``, ``fp8_rowwise`` and ``fp8_delayed`` keep the weights in float32 (the master
copy the optimizer updates, as every recipe of this course does) and swap the model's
``nn.Linear`` layers for fp8 ones with :func:`~amp_edu.fp8.convert.convert_to_float8_training`
before the optimizer is built. The output layer (``head``) stays in high precision, as torchao
and Transformer Engine recommend for the first and last layers; embeddings, LayerNorm and the
attention softmax are not linear layers and never run in fp8::

    import amp_edu.fp8                # registers the names
    train(task, "transformer", "fp8_rowwise", steps=200)
"""

from __future__ import annotations

from torch import nn

from ..recipes import Recipe, register
from .convert import convert_to_float8_training

__all__ = ["Fp8", "FP8_RECIPES", "keep_head"]

FP8_RECIPES = ("fp8_tensorwise", "fp8_rowwise", "fp8_delayed")


def keep_head(module: nn.Module, fqn: str) -> bool:
    """The default filter: convert every linear layer except one named ``head`` (the output)."""
    return fqn.split(".")[-1] != "head"


class Fp8(Recipe):
    """fp32 weights; the linear layers' GEMMs in fp8 under ``fp8_recipe`` (no loss scaling)."""

    def __init__(self, fp8_recipe: str = "tensorwise", *, module_filter_fn=keep_head,
                 history_len: int = 16, margin: int = 0):
        super().__init__()
        if fp8_recipe not in ("tensorwise", "rowwise", "delayed"):
            raise ValueError(f"fp8_recipe must be 'tensorwise', 'rowwise' or 'delayed', got {fp8_recipe!r}")
        self.fp8_recipe, self.filter = fp8_recipe, module_filter_fn
        self.delayed_kwargs = dict(history_len=history_len, margin=margin) if fp8_recipe == "delayed" else {}
        self.name = f"fp8_{fp8_recipe}"

    def cast_model(self, model: nn.Module) -> None:
        convert_to_float8_training(model, self.fp8_recipe, module_filter_fn=self.filter,
                                   **self.delayed_kwargs)


for _name in FP8_RECIPES:
    register(_name, lambda r=_name[4:]: Fp8(r))
