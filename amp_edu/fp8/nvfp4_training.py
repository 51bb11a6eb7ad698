"""NVFP4 training recipes for :func:`amp_edu.train.train`: one class, one registered name per configuration.

Every name of :func:`~amp_edu.fp8.nvfp4_linear.recipe_names` is registered in the recipe
registry, family ``Family.FP4`` (``amp_edu.recipes.names(family=Family.FP4)``)::

    nvfp4          NVFP4 operands in all three GEMMs, 1×16 blocks, round to nearest
    nvfp4_sr       + stochastic rounding of the gradients (both backward GEMMs)
    nvfp4_sr_rht   + the random Hadamard transform on the weight-gradient GEMM's inputs
    nvfp4_te       + 16×16 weight tiles: Transformer Engine's NVFP4BlockScaling() default

Each keeps fp32 weights (the master copy the optimizer updates) and swaps the model's
``nn.Linear`` layers, except the output ``head``, for :class:`~amp_edu.fp8.nvfp4_linear.NVFP4Linear`
before the optimizer is built (embeddings, LayerNorm and attention are not linear layers and
stay in fp32). The stochastic rounding of one run draws from one ``torch.Generator`` on the
model's device, seeded from ``torch.initial_seed()`` (which :func:`~amp_edu.train.train` sets to
the run's seed) plus :data:`GENERATOR_OFFSET`, so a run repeats bit for bit, and two runs of the
same seed differ only in their recipe. The GEMMs are emulated in float32
(:mod:`~amp_edu.fp8.nvfp4_linear`)::

    import amp_edu.fp8                # registers the names
    train(task, "transformer", "nvfp4_sr_rht", steps=200)
"""

from __future__ import annotations

import torch
from torch import nn

from ..recipes import Family, Recipe, register
from .nvfp4_linear import NVFP4LinearConfig, convert_to_nvfp4_training, recipe_names
from .training import keep_head

__all__ = ["Nvfp4", "GENERATOR_OFFSET"]

#: Added to the run's seed for the rounding generator, so its draws are not the stream that
#: initialised the weights.
GENERATOR_OFFSET = 2 ** 32


class Nvfp4(Recipe):
    """fp32 weights; the linear layers' GEMMs on NVFP4 operands under ``nvfp4_recipe`` (no loss
    scaling). ``config_overrides`` replace fields of its
    :class:`~amp_edu.fp8.nvfp4_linear.NVFP4LinearConfig`."""

    family = Family.FP4

    def __init__(self, nvfp4_recipe: str = "nvfp4", *, module_filter_fn=keep_head, **config_overrides):
        super().__init__()
        self.config = NVFP4LinearConfig.from_recipe_name(nvfp4_recipe, **config_overrides)
        self.filter = module_filter_fn
        self.name = nvfp4_recipe
        self.generator = None

    def cast_model(self, model: nn.Module) -> None:
        p = next(model.parameters(), None)
        dev = p.device if p is not None else torch.device("cpu")
        self.generator = torch.Generator(device=dev).manual_seed(torch.initial_seed() + GENERATOR_OFFSET)
        convert_to_nvfp4_training(model, self.config, module_filter_fn=self.filter, generator=self.generator)


for _name in recipe_names():
    register(_name, lambda r=_name: Nvfp4(r))
