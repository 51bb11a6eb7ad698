"""The fp8 training recipes (lesson 10): ``fp8_<config>`` for every named fp8 configuration.

The names are not written here. :func:`amp_edu.fp8.config_names` owns the named fp8
configurations (``tensorwise``, ``rowwise``, ``rowwise_with_gw_hp``, ``delayed``, ``blockwise``,
``mxfp8``), and this module registers ``fp8_`` + each of them, so a configuration added to
:mod:`amp_edu.fp8.config` is a training recipe at once (``amp_edu.recipes.names(family=Family.FP8)``
reads them back from the registry).

Each recipe keeps the weights in float32 (the master copy the optimizer updates, as every recipe
of this course does) and, in ``before_fit``, swaps the model's ``nn.Linear`` layers for fp8 ones
with :func:`~amp_edu.fp8.convert.convert_to_float8_training` before the optimizer is built. The
output layer (``head``) stays in high precision (:func:`~amp_edu.fp8.convert.keep_head`), as
torchao and Transformer Engine recommend for the first and last layers; embeddings, LayerNorm and
the attention softmax are not linear layers and never run in fp8::

    train(task, "transformer", "fp8_rowwise", steps=200)
"""

from __future__ import annotations

from torch import nn

from ..fp8 import Float8LinearConfig, config_names, convert_to_float8_training, keep_head
from .base import Family, Recipe
from .registry import register

__all__ = ["Fp8", "PREFIX"]

PREFIX = "fp8_"     # a recipe's name is PREFIX + its configuration's name


class Fp8(Recipe):
    """fp32 weights; the linear layers' GEMMs in fp8 under the configuration ``config_name`` (no
    loss scaling).

    ``config_name`` is a name of :func:`amp_edu.fp8.config_names`; ``config_overrides`` replace
    fields of its :class:`~amp_edu.fp8.config.Float8LinearConfig` (``history_len=4`` for
    ``delayed``, ...).
    """

    family = Family.FP8

    def __init__(self, config_name: str = "tensorwise", *, module_filter_fn=keep_head, **config_overrides):
        super().__init__()
        if config_name not in config_names():
            raise ValueError(f"config_name must be one of {config_names()}, got {config_name!r}")
        self.config = Float8LinearConfig.from_recipe_name(config_name, **config_overrides)
        self.config_name, self.filter = config_name, module_filter_fn
        self.name = PREFIX + config_name

    def cast_model(self, model: nn.Module) -> None:
        convert_to_float8_training(model, self.config, module_filter_fn=self.filter)


for _name in config_names():
    register(PREFIX + _name, lambda c=_name: Fp8(c))
