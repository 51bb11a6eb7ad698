"""The NVFP4 configuration of a linear layer: which of Transformer Engine's training tricks it uses.

:class:`NVFP4LinearConfig` has three switches (what each does, and where Transformer Engine and
torchao do the same, is in :mod:`~amp_edu.fp4.linear`): ``stochastic_rounding`` of the gradient,
the random Hadamard transform on the weight-gradient GEMM's inputs (``rht_wgrad``, with the sign
vector ``rht_signs``) and 16×16 weight tiles (``weight_2d``). All off is plain NVFP4.

This module owns the names of the NVFP4 configurations: :func:`config_names` lists them, each
adding one trick to the one before, and :meth:`NVFP4LinearConfig.from_recipe_name` builds one
(the method name of fp8's :class:`~amp_edu.fp8.config.Float8LinearConfig`, which is torchao's).
The training recipes are derived from them (:mod:`amp_edu.recipes.fp4` registers each name as it
is), so a configuration added to :data:`_CONFIGS` is a training recipe at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..validate import check_bool
from . import hadamard
from .nvfp4 import TILES

__all__ = ["NVFP4LinearConfig", "config_names", "get_config"]


@dataclass(frozen=True)
class NVFP4LinearConfig:
    """Which of Transformer Engine's NVFP4 training tricks a layer uses (all off: plain NVFP4,
    round-to-nearest 1×16 blocks for every operand). ``rht_signs``: the Hadamard transform's
    sign vector (TE's fixed one by default)."""

    stochastic_rounding: bool = False
    rht_wgrad: bool = False
    weight_2d: bool = False
    rht_signs: tuple = hadamard.TE_SIGNS

    def __post_init__(self):
        for name in ("stochastic_rounding", "rht_wgrad", "weight_2d"):
            check_bool(getattr(self, name), name)
        object.__setattr__(self, "rht_signs", hadamard._check_signs(self.rht_signs))

    @property
    def weight_tile(self) -> tuple:
        return TILES[1] if self.weight_2d else TILES[0]

    @classmethod
    def from_recipe_name(cls, name: str, **overrides) -> "NVFP4LinearConfig":
        """The named configuration ``name`` (one of :func:`config_names`), with fields replaced
        by ``overrides``."""
        if name not in _CONFIGS:
            raise ValueError(f"recipe must be one of {config_names()}, got {name!r}")
        return replace(_CONFIGS[name], **overrides)


#: The named configurations, each adding one trick to the one before; ``nvfp4_te`` is
#: Transformer Engine's ``NVFP4BlockScaling()`` default (all three on).
_CONFIGS = {
    "nvfp4": NVFP4LinearConfig(),
    "nvfp4_sr": NVFP4LinearConfig(stochastic_rounding=True),
    "nvfp4_sr_rht": NVFP4LinearConfig(stochastic_rounding=True, rht_wgrad=True),
    "nvfp4_te": NVFP4LinearConfig(stochastic_rounding=True, rht_wgrad=True, weight_2d=True),
}


def config_names() -> tuple[str, ...]:
    """``nvfp4`` (plain), ``nvfp4_sr`` (+ stochastic rounding of gradients), ``nvfp4_sr_rht``
    (+ the Hadamard transform on the wgrad GEMM's inputs), ``nvfp4_te`` (+ 16×16 weight tiles)."""
    return tuple(_CONFIGS)


def get_config(config) -> NVFP4LinearConfig:
    """An :class:`NVFP4LinearConfig`, a name of :func:`config_names`, or ``None`` (plain NVFP4)."""
    if config is None:
        return NVFP4LinearConfig()
    if isinstance(config, str):
        return NVFP4LinearConfig.from_recipe_name(config)
    if not isinstance(config, NVFP4LinearConfig):
        raise TypeError(f"config must be an NVFP4LinearConfig or one of {config_names()}, got {config!r}")
    return config
