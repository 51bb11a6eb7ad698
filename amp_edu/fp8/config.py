"""The fp8 configuration of a linear layer: which dtype, scaling type and granularity each cast gets.

A linear layer ``y = x @ W.T`` runs three GEMMs, and each casts its two operands:

==============  =====================  ==========================================
GEMM            operands               the casts it reads (``Float8LinearConfig``)
==============  =====================  ==========================================
output          x @ W.T                ``input``, ``weight``
grad_input      dY @ W                 ``grad_output``, ``weight_for_grad_input``
grad_weight     dY.T @ x               ``grad_output_for_grad_weight``, ``input_for_grad_weight``
==============  =====================  ==========================================

Each cast is a :class:`CastConfig`: a :class:`ScalingType` (where the scale comes from), a
:class:`Granularity` (how many elements share one scale) and an fp8 dtype. The layout copies
torchao 0.18's ``torchao/float8/config.py`` (``ScalingType``, ``ScalingGranularity``,
``CastConfig``, ``Float8LinearConfig``, ``from_recipe_name``), so its recipes read the same here:

* ``tensorwise`` (torchao's default): one dynamic scale per tensor; e4m3 for x and W, e5m2 for
  dY (the FP8 paper's split: gradients need range more than precision). Only the output GEMM
  uses fast accumulation.
* ``rowwise``: one scale per row or column, along each GEMM's reduction dim, rounded down to a
  power of two; e4m3 for everything, the finer scales give gradients the range they need.
* ``rowwise_with_gw_hp``: row-wise for the output GEMM; grad_input multiplies a row-wise dY by a
  *per-tensor* W (a mixed-granularity GEMM); grad_weight runs in high precision (both operands
  ``DISABLED``): torchao's most accurate recipe.
* ``delayed`` (not a torchao recipe: Transformer Engine's ``DelayedScaling``): per-tensor scales
  from an amax history, e4m3 forward and e5m2 backward (TE's HYBRID format).
* ``blockwise`` (DeepSeek-V3, TE's ``Float8BlockScaling``): 1×128 tiles for activations and
  gradients, 128×128 blocks for weights, e4m3 everywhere; its GEMMs are the emulated
  block-scaled loop of :mod:`~amp_edu.fp8.blockgemm` (no fast kernel on a CPU).

This module owns the names of the fp8 configurations: :func:`config_names` lists them (torchao
calls them recipe names, hence :meth:`Float8LinearConfig.from_recipe_name`), and everything that
lists them asks it at call time. The training recipes are derived from them
(:mod:`amp_edu.recipes.fp8` registers ``fp8_`` + each name), so adding a configuration is one
entry in :data:`_CONFIGS`, and it is a training recipe at once. Adding a *granularity* is one
:class:`Granularity` member (with its checks here) and one branch in each of
:func:`~amp_edu.fp8.gemm.cast_operand` and :func:`~amp_edu.fp8.gemm.gemm` (plus, if it needs one,
its own module, as ``BLOCKWISE`` has :mod:`~amp_edu.fp8.blockgemm`); ``Float8Linear`` and the
training recipes need no change.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Optional

import torch

from ..validate import check_bool, check_int
from .scaling import FP8_DTYPES

__all__ = ["ScalingType", "Granularity", "CastConfig", "Float8LinearConfig", "config_names", "get_config"]


class ScalingType(enum.Enum):
    """Where a cast's scale comes from."""

    DYNAMIC = "dynamic"     # from the tensor being cast (its current amax): torchao's only kind
    DELAYED = "delayed"     # from an amax history of earlier steps (Transformer Engine)
    DISABLED = "disabled"   # no cast: the operand stays in high precision


class Granularity(enum.Enum):
    """How many elements share one scale."""

    TENSORWISE = "tensorwise"   # one scale for the whole tensor
    AXISWISE = "axiswise"       # one per row (or column): along the GEMM's reduction dim
    BLOCKWISE = "blockwise"     # 1x128 tiles (activations, gradients), 128x128 blocks (weights)
    MX = "mx"                   # 32 elements along K, an e8m0 (power-of-two) scale each (OCP MX)


@dataclass(frozen=True)
class CastConfig:
    """How one operand is cast: ``scaling_type``, ``granularity`` and ``dtype`` (None: the
    layer's default for that operand, e4m3 for input and weight, e5m2 for grad_output)."""

    scaling_type: ScalingType = ScalingType.DYNAMIC
    granularity: Granularity = Granularity.TENSORWISE
    dtype: Optional[torch.dtype] = None

    def __post_init__(self):
        if not isinstance(self.scaling_type, ScalingType):
            raise TypeError(f"scaling_type must be a ScalingType ({', '.join(s.name for s in ScalingType)}), "
                            f"got {self.scaling_type!r}")
        if not isinstance(self.granularity, Granularity):
            raise TypeError(f"granularity must be a Granularity ({', '.join(g.name for g in Granularity)}), "
                            f"got {self.granularity!r}")
        if self.dtype is not None and self.dtype not in FP8_DTYPES:
            raise ValueError(f"dtype must be one of {FP8_DTYPES} or None, got {self.dtype!r}")
        if self.scaling_type is ScalingType.DELAYED and self.granularity is not Granularity.TENSORWISE:
            raise ValueError("delayed scaling keeps one amax history per tensor: it needs "
                             f"granularity TENSORWISE, got {self.granularity.name}")

    @property
    def enabled(self) -> bool:
        return self.scaling_type is not ScalingType.DISABLED


_E4, _E5 = torch.float8_e4m3fn, torch.float8_e5m2
_DEFAULT_DTYPE = {"input": _E4, "weight": _E4, "grad_output": _E5}
_SECOND_USE = {"input": "input_for_grad_weight", "weight": "weight_for_grad_input",
               "grad_output": "grad_output_for_grad_weight"}


@dataclass(frozen=True)
class Float8LinearConfig:
    """The six casts of a linear layer's three GEMMs and how the GEMMs run.

    A ``*_for_*`` cast left as None is its operand's main cast (``input_for_grad_weight`` is
    ``input``, ...). ``__post_init__`` fills those and the default dtypes, then checks what the
    GEMMs need: both operands of a GEMM cast or both left in high precision; one dtype per
    operand in both GEMMs that use it; delayed scaling for all three tensors or none.

    ``fast_accum_output`` (torchao's ``gemm_config_output.use_fast_accum``): the forward GEMM
    uses the GPU's fast fp8 accumulation (the two backward GEMMs never do);
    ``power_of_2``: tensorwise and axiswise scales rounded down to 2^k; ``pad_inner_dim``: pad K to a multiple of 16
    instead of refusing it (see :mod:`~amp_edu.fp8.gemm`); ``history_len`` and ``margin``:
    delayed scaling's amax history and headroom; ``reduce_amax``: delayed amaxes MAX-reduced
    across ranks (TE's ``DelayedScaling.reduce_amax``); ``mx_scale_mode``: how MX casts pick their
    e8m0 scales, "rceil" (torchao's ``MXFP8Linear`` default) or "floor" (the OCP spec's rule);
    ``enable_fsdp_float8_all_gather`` (torchao's field of that name): under FSDP2 each rank casts
    its weight shard to fp8 before the all-gather (:mod:`~amp_edu.fp8.fsdp`), which needs a dynamic
    tensorwise ``weight`` and ``weight_for_grad_input`` cast (the gathered fp8 weight serves both GEMMs).
    """

    input: CastConfig = field(default_factory=CastConfig)
    weight: CastConfig = field(default_factory=CastConfig)
    grad_output: CastConfig = field(default_factory=CastConfig)
    input_for_grad_weight: Optional[CastConfig] = None
    weight_for_grad_input: Optional[CastConfig] = None
    grad_output_for_grad_weight: Optional[CastConfig] = None
    fast_accum_output: bool = True
    power_of_2: bool = False
    pad_inner_dim: bool = False
    history_len: int = 16
    margin: int = 0
    reduce_amax: bool = True
    mx_scale_mode: str = "rceil"
    enable_fsdp_float8_all_gather: bool = False
    name: str = "custom"

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen: fill once, here)
        for main, second in _SECOND_USE.items():
            for k in (main, second):
                c = getattr(self, k)
                if c is not None and not isinstance(c, CastConfig):
                    raise TypeError(f"{k} must be a CastConfig, got {type(c).__name__}")
            if getattr(self, second) is None:
                set_(second, getattr(self, main))
            for k in (main, second):
                c = getattr(self, k)
                if c.dtype is None:
                    set_(k, replace(c, dtype=_DEFAULT_DTYPE[main]))
            if getattr(self, main).dtype != getattr(self, second).dtype:
                raise ValueError(f"{main} must be cast to the same dtype in both GEMMs that use it, got "
                                 f"{getattr(self, main).dtype} and {getattr(self, second).dtype}")
        def blockwise(c):          # BLOCKWISE and MX apply their scales inside the K loop: both or neither
            return c.granularity if c.enabled and c.granularity in (Granularity.BLOCKWISE, Granularity.MX) else None
        for a, b, gemm in (("input", "weight", "output"),
                           ("grad_output", "weight_for_grad_input", "grad_input"),
                           ("grad_output_for_grad_weight", "input_for_grad_weight", "grad_weight")):
            ca, cb = getattr(self, a), getattr(self, b)
            if ca.enabled != cb.enabled:
                raise ValueError(f"the {gemm} GEMM needs both operands in fp8 or both in high precision "
                                 f"({a}: {ca.scaling_type.name}, {b}: {cb.scaling_type.name})")
            if blockwise(ca) != blockwise(cb):
                raise ValueError(f"the {gemm} GEMM needs both operands BLOCKWISE, both MX or neither: a "
                                 f"block-scaled GEMM applies both scales per chunk of K ({a}: "
                                 f"{ca.granularity.name}, {b}: {cb.granularity.name})")
        kinds = {c.scaling_type is ScalingType.DELAYED for c in self.casts().values()}
        if len(kinds) > 1:
            raise ValueError("delayed scaling must be used for all six casts or none (one amax history "
                             "per tensor serves all the GEMMs that use it)")
        for k in ("fast_accum_output", "power_of_2", "pad_inner_dim", "reduce_amax", "enable_fsdp_float8_all_gather"):
            set_(k, check_bool(getattr(self, k), k))
        if self.enable_fsdp_float8_all_gather:
            for k in ("weight", "weight_for_grad_input"):
                c = getattr(self, k)
                if c.scaling_type is not ScalingType.DYNAMIC or c.granularity is not Granularity.TENSORWISE:
                    raise ValueError(
                        "enable_fsdp_float8_all_gather needs the weight cast DYNAMIC and TENSORWISE in both "
                        "GEMMs that use it (one scale, agreed across ranks, for the gathered fp8 weight); "
                        f"got {k}: {c.scaling_type.name} {c.granularity.name}. Accepted: both DYNAMIC TENSORWISE, "
                        "as in the 'tensorwise' recipe")
        set_("history_len", check_int(self.history_len, "history_len", min=1))
        set_("margin", check_int(self.margin, "margin", min=0))
        from .mx import SCALE_MODES
        if self.mx_scale_mode not in SCALE_MODES:
            raise ValueError(f"mx_scale_mode must be one of {SCALE_MODES}, got {self.mx_scale_mode!r}")
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {type(self.name).__name__}")

    def casts(self) -> dict[str, CastConfig]:
        """The six casts by name."""
        return {k: getattr(self, k) for pair in _SECOND_USE.items() for k in pair}

    @property
    def delayed(self) -> bool:
        return self.input.scaling_type is ScalingType.DELAYED

    @staticmethod
    def from_recipe_name(name: str, **overrides) -> "Float8LinearConfig":
        """The named configuration ``name`` (one of :func:`config_names`; torchao's method name);
        ``overrides`` replace fields."""
        if not isinstance(name, str):
            raise TypeError(f"recipe name must be a str, got {type(name).__name__}")
        if name not in _CONFIGS:
            raise ValueError(f"recipe must be one of {config_names()}, got {name!r}")
        return _CONFIGS[name](**overrides)


def _tensorwise(**kw):
    return Float8LinearConfig(name="tensorwise", **kw)


def _rowwise(**kw):
    ax = CastConfig(granularity=Granularity.AXISWISE, dtype=_E4)
    return Float8LinearConfig(input=ax, weight=ax, grad_output=ax, power_of_2=True, name="rowwise", **kw)


def _rowwise_with_gw_hp(**kw):
    ax = CastConfig(granularity=Granularity.AXISWISE)
    return Float8LinearConfig(
        input=ax, weight=ax, grad_output=CastConfig(granularity=Granularity.AXISWISE, dtype=_E4),
        weight_for_grad_input=CastConfig(),                                   # per tensor
        input_for_grad_weight=CastConfig(ScalingType.DISABLED),              # grad_weight in high
        grad_output_for_grad_weight=CastConfig(ScalingType.DISABLED, dtype=_E4),   # precision
        power_of_2=True, name="rowwise_with_gw_hp", **kw)


def _blockwise(**kw):
    b = CastConfig(granularity=Granularity.BLOCKWISE, dtype=_E4)
    return Float8LinearConfig(input=b, weight=b, grad_output=b, name="blockwise", **kw)


def _delayed(**kw):
    d = CastConfig(ScalingType.DELAYED)
    return Float8LinearConfig(input=d, weight=d, grad_output=d, name="delayed", **kw)


def _mxfp8(**kw):
    m = CastConfig(granularity=Granularity.MX, dtype=_E4)
    return Float8LinearConfig(input=m, weight=m, grad_output=m, name="mxfp8", **kw)


#: The named configurations, in the order lessons and the recipe registry list them.
_CONFIGS = {"tensorwise": _tensorwise, "rowwise": _rowwise, "rowwise_with_gw_hp": _rowwise_with_gw_hp,
            "delayed": _delayed, "blockwise": _blockwise, "mxfp8": _mxfp8}


def config_names() -> tuple[str, ...]:
    """Every named fp8 configuration: torchao's three recipes, Transformer Engine-style ``delayed``,
    DeepSeek-V3's ``blockwise`` (TE's ``Float8BlockScaling``: 1×128 / 128×128, e4m3 everywhere, emulated) and
    ``mxfp8`` (OCP MX: 32-element blocks along K with e8m0 scales, e4m3 everywhere, as torchao's
    ``MXFP8Linear``; emulated, :mod:`~amp_edu.fp8.mxgemm`)."""
    return tuple(_CONFIGS)


def get_config(config) -> Float8LinearConfig:
    """A :class:`Float8LinearConfig`, or a name of :func:`config_names`."""
    if isinstance(config, Float8LinearConfig):
        return config
    if isinstance(config, str):
        return Float8LinearConfig.from_recipe_name(config)
    raise TypeError(f"config must be a Float8LinearConfig or a name of {config_names()}, "
                    f"got {type(config).__name__}")
