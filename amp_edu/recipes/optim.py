"""The optimizer-precision recipes (lesson 12) for :func:`amp_edu.train.train` and :mod:`amp_edu.study`.

Each recipe keeps the run's optimizer *settings* (Adam or AdamW, lr, betas, eps, weight decay: what
``train(..., optimizer="adamw", lr=...)`` asked for) and changes only how the weights and Adam's
two moments are **stored**, with :class:`~amp_edu.optim.adamw.AdamW`:

======================  ==============  =======================  ===================================
recipe                  weights         Adam's moments           the weight is written back
======================  ==============  =======================  ===================================
``bf16_nearest``        bf16            bf16                     rounded to nearest (updates below
                                                                 half an ulp are lost)
``bf16_stochastic``     bf16            bf16                     rounded stochastically (unbiased)
``bf16_kahan``          bf16 + a bf16   bf16                     with Kahan compensation
                        compensation
``states_8bit``         fp32            8-bit dynamic map,       in fp32
                                        blocks of 256
``states_4bit``         fp32            4-bit, blocks of 128     in fp32
``states_fp8``          fp32            e4m3, blocks of 256      in fp32
======================  ==============  =======================  ===================================

The bf16 recipes run the forward and backward in bf16 too (the model is cast, inputs as well, as
``bf16_pure`` does); the quantized-state recipes are fp32 training with smaller optimizer state.
The optimizer is replaced in ``before_fit``, the only event these recipes change::

    train(task, "mlp", "bf16_kahan", optimizer="adamw", lr=1e-4)

The names are not written here: :mod:`amp_edu.optim` owns the choices, and this module registers
``bf16_`` + each of :data:`amp_edu.optim.WEIGHT_ROUNDINGS` (how a bf16 weight is written back) and
``states_`` + each of :data:`amp_edu.optim.QUANTIZED_STATES` (the block-wise state formats), so
``amp_edu.recipes.names(family=Family.OPTIMIZER)`` follows them.
"""

from __future__ import annotations

import torch

from ..optim import QUANTIZED_STATES, WEIGHT_ROUNDINGS, AdamW
from .amp import Pure
from .base import Family, Recipe
from .registry import register

__all__ = ["OptimRecipe", "Bf16Weights", "QuantizedStates", "adam_settings"]


def adam_settings(opt: torch.optim.Optimizer) -> dict:
    """The settings of a ``torch.optim.Adam``/``AdamW`` as :class:`AdamW` keyword arguments."""
    if not isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)):
        raise ValueError("the optimizer-precision recipes store Adam's moments, so the run's optimizer must "
                         f"be 'adam' or 'adamw' (torch.optim.Adam/AdamW), got {type(opt).__name__}")
    g = opt.defaults
    return dict(lr=float(g["lr"]), betas=tuple(g["betas"]), eps=float(g["eps"]),
                weight_decay=float(g["weight_decay"]), amsgrad=bool(g.get("amsgrad", False)),
                decoupled=isinstance(opt, torch.optim.AdamW))


class OptimRecipe(Recipe):
    """Mixin of the two families: build the run's Adam/AdamW, then replace it by :class:`AdamW`
    with the same settings and this recipe's ``states`` / ``rounding``."""

    family = Family.OPTIMIZER

    states = "param"
    rounding = "nearest"

    def before_fit(self, model, optimizer):
        if isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(f"recipe {self.name!r} builds its own optimizer: pass a factory optimizer(params)")
        return super().before_fit(model, lambda params: AdamW(params, states=self.states, rounding=self.rounding,
                                                               **adam_settings(optimizer(params))))


class Bf16Weights(OptimRecipe, Pure):
    """bf16 weights and moments; each step computed in fp32 and stored with ``rounding`` (one of
    :data:`~amp_edu.optim.WEIGHT_ROUNDINGS`: "nearest", "stochastic", "kahan")."""

    def __init__(self, rounding: str = "nearest") -> None:
        Pure.__init__(self, torch.bfloat16)
        self.rounding = rounding
        self.name = f"bf16_{rounding}"


class QuantizedStates(OptimRecipe):
    """fp32 weights; Adam's moments stored block-wise in ``states`` (one of
    :data:`~amp_edu.optim.QUANTIZED_STATES`: "8bit", "4bit", "fp8")."""

    def __init__(self, states: str = "8bit") -> None:
        super().__init__()
        self.states = states
        self.name = f"states_{states}"


for _r in WEIGHT_ROUNDINGS:
    register(f"bf16_{_r}", lambda r=_r: Bf16Weights(r))
for _s in QUANTIZED_STATES:
    register(f"states_{_s}", lambda s=_s: QuantizedStates(s))
