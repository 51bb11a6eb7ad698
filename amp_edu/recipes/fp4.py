"""The NVFP4 training recipes (lesson 10): one recipe per named NVFP4 configuration, family ``Family.FP4``.

The names are not written here. :func:`amp_edu.fp4.config_names` owns the named NVFP4
configurations, and this module registers each under its own name
(``amp_edu.recipes.names(family=Family.FP4)`` reads them back)::

    nvfp4          NVFP4 operands in all three GEMMs, 1×16 blocks, round to nearest
    nvfp4_sr       + stochastic rounding of the gradients (both backward GEMMs)
    nvfp4_sr_rht   + the random Hadamard transform on the weight-gradient GEMM's inputs
    nvfp4_te       + 16×16 weight tiles: Transformer Engine's NVFP4BlockScaling() default

Each keeps fp32 weights (the master copy the optimizer updates) and, in ``before_fit``, swaps the
model's ``nn.Linear`` layers, except the output ``head``, for
:class:`~amp_edu.fp4.linear.NVFP4Linear` before the optimizer is built (embeddings, LayerNorm and
attention are not linear layers and stay in fp32). The stochastic rounding of one run draws from
one ``torch.Generator`` on the model's device, seeded from ``torch.initial_seed()`` (which
:func:`~amp_edu.train.train` sets to the run's seed) plus :data:`GENERATOR_OFFSET`, so a run
repeats bit for bit, and two runs of the same seed differ only in their recipe. The GEMMs are
emulated in float32 (:mod:`~amp_edu.fp4.linear`)::

    train(task, "transformer", "nvfp4_sr_rht", steps=200)
"""

from __future__ import annotations

import torch
from torch import nn

from ..fp4 import NVFP4LinearConfig, config_names, convert_to_nvfp4_training
from ..fp8 import keep_head
from .base import Family, Recipe
from .registry import register

__all__ = ["Nvfp4", "GENERATOR_OFFSET"]

#: Added to the run's seed for the rounding generator, so its draws are not the stream that
#: initialised the weights.
GENERATOR_OFFSET = 2 ** 32


class Nvfp4(Recipe):
    """fp32 weights; the linear layers' GEMMs on NVFP4 operands under the configuration
    ``config_name`` (a name of :func:`amp_edu.fp4.config_names`; no loss scaling).
    ``config_overrides`` replace fields of its :class:`~amp_edu.fp4.config.NVFP4LinearConfig`."""

    family = Family.FP4

    def __init__(self, config_name: str = "nvfp4", *, module_filter_fn=keep_head, **config_overrides):
        super().__init__()
        self.config = NVFP4LinearConfig.from_recipe_name(config_name, **config_overrides)
        self.config_name, self.filter = config_name, module_filter_fn
        self.name = config_name
        self.generator = None

    def cast_model(self, model: nn.Module) -> None:
        p = next(model.parameters(), None)
        dev = p.device if p is not None else torch.device("cpu")
        self.generator = torch.Generator(device=dev).manual_seed(torch.initial_seed() + GENERATOR_OFFSET)
        convert_to_nvfp4_training(model, self.config, module_filter_fn=self.filter, generator=self.generator)


for _name in config_names():
    register(_name, lambda c=_name: Nvfp4(c))
