"""fp8 training recipes for :func:`amp_edu.train.train`: one class, one registered name per fp8 recipe.

Every name of :func:`~amp_edu.fp8.config.recipe_names` is registered as ``fp8_<name>``
(``fp8_tensorwise``, ``fp8_rowwise``, ``fp8_rowwise_with_gw_hp``, ``fp8_delayed``): the list
lives in :mod:`~amp_edu.fp8.config` only; the training names are
``amp_edu.recipes.names(family=Family.FP8)``, read from the registry at call time. Each
keeps the weights in float32 (the master copy the optimizer updates, as every recipe of this
course does) and swaps the model's ``nn.Linear`` layers for fp8 ones with
:func:`~amp_edu.fp8.convert.convert_to_float8_training` before the optimizer is built. The output
layer (``head``) stays in high precision, as torchao and Transformer Engine recommend for the
first and last layers; embeddings, LayerNorm and the attention softmax are not linear layers and
never run in fp8::

    import amp_edu.fp8                # registers the names
    train(task, "transformer", "fp8_rowwise", steps=200)
"""

from __future__ import annotations

from torch import nn

from ..recipes import Family, Recipe, register
from .config import Float8LinearConfig, recipe_names
from .convert import convert_to_float8_training

__all__ = ["Fp8", "keep_head"]

PREFIX = "fp8_"


def keep_head(module: nn.Module, fqn: str) -> bool:
    """The default filter: convert every linear layer except one named ``head`` (the output)."""
    return fqn.split(".")[-1] != "head"


class Fp8(Recipe):
    """fp32 weights; the linear layers' GEMMs in fp8 under ``fp8_recipe`` (no loss scaling).

    ``fp8_recipe`` is a name of :func:`recipe_names`; ``config_overrides`` replace fields of its
    :class:`~amp_edu.fp8.config.Float8LinearConfig` (``history_len=4`` for ``delayed``, ...).
    """

    family = Family.FP8

    def __init__(self, fp8_recipe: str = "tensorwise", *, module_filter_fn=keep_head, **config_overrides):
        super().__init__()
        if fp8_recipe not in recipe_names():
            raise ValueError(f"fp8_recipe must be one of {recipe_names()}, got {fp8_recipe!r}")
        self.config = Float8LinearConfig.from_recipe_name(fp8_recipe, **config_overrides)
        self.fp8_recipe, self.filter = fp8_recipe, module_filter_fn
        self.name = PREFIX + fp8_recipe

    def cast_model(self, model: nn.Module) -> None:
        convert_to_float8_training(model, self.config, module_filter_fn=self.filter)


for _name in recipe_names():
    register(PREFIX + _name, lambda r=_name: Fp8(r))
