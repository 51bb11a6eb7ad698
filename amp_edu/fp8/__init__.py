"""fp8 training from scratch: scales, casts, the scaled matmul and an fp8 ``nn.Linear``.

The pieces, in the order lesson 10 builds them:

* :mod:`~amp_edu.fp8.scaling`: amax → scale (EPS, power-of-two rounding);
* :mod:`~amp_edu.fp8.cast`: saturating cast with a scale (:class:`Float8Tensor`);
* :mod:`~amp_edu.fp8.gemm`: ``torch._scaled_mm`` with the layouts, shapes and scales it expects;
* :mod:`~amp_edu.fp8.accumulate`: what a narrow GEMM accumulator costs (emulated);
* :mod:`~amp_edu.fp8.config`: :class:`Float8LinearConfig` (scaling type, granularity and dtype of
  each cast; the named recipes);
* :mod:`~amp_edu.fp8.linear`, :mod:`~amp_edu.fp8.convert`: :class:`Float8Linear` and
  :func:`convert_to_float8_training` for torchao's ``tensorwise``, ``rowwise`` and
  ``rowwise_with_gw_hp`` recipes, bit-identical to ``torchao.float8``;
* :mod:`~amp_edu.fp8.delayed`: delayed scaling from an amax history (Transformer Engine's rule);
* :mod:`~amp_edu.fp8.blocks`, :mod:`~amp_edu.fp8.mx`: per-row, 1×128, 128×128 and MX-32 block
  scaling (MX with torchao's FLOOR and RCEIL scale rules); :mod:`~amp_edu.fp8.nvfp4`: NVFP4
  (16-element e4m3-scaled fp4 blocks), equal to torchao's ``NVFP4Tensor``;
* :mod:`~amp_edu.fp8.blockgemm`: DeepSeek-V3's block-scaled GEMM, scales applied inside the K loop;
* :mod:`~amp_edu.fp8.training`: the ``fp8_*`` training recipes for :func:`amp_edu.train.train`;
* NVFP4 training, Transformer Engine's tricks built from scratch (emulated GEMMs):
  :func:`amp_edu.formats.round_to_grid` (stochastic rounding onto the e2m1 grid; ``nvfp4_quantize``
  takes ``rounding="stochastic"`` and ``tile=(16, 16)``), :mod:`~amp_edu.fp8.hadamard` (the 16×16
  random Hadamard transform), :mod:`~amp_edu.fp8.nvfp4_linear` (:class:`NVFP4Linear`, its three
  GEMMs and :class:`NVFP4LinearConfig`) and :mod:`~amp_edu.fp8.nvfp4_training` (the ``nvfp4``,
  ``nvfp4_sr``, ``nvfp4_sr_rht`` and ``nvfp4_te`` recipes, ``Family.FP4``);
* :mod:`~amp_edu.fp8.reference`: importing torchao (for comparisons) without its CPU noise.
"""

from .cast import Float8Tensor, cast_to_float8, quantize_dequantize, to_fp8_saturated
from .config import CastConfig, Float8LinearConfig, Granularity, ScalingType, get_config, recipe_names
from .convert import convert_to_float8_training
from .delayed import AmaxHistory, delayed_scale, reduce_amax, update_amax_history
from .gemm import scaled_mm
from .linear import Float8Linear
from .training import Fp8, keep_head
from .nvfp4_linear import NVFP4Linear, NVFP4LinearConfig, convert_to_nvfp4_training
from .nvfp4_training import Nvfp4
from .scaling import EPS, amax, amax_to_scale, fp8_max, round_down_to_power_of_2, tensor_to_scale

__all__ = [
    "Float8Linear", "convert_to_float8_training", "Float8LinearConfig", "CastConfig", "Granularity",
    "ScalingType", "get_config", "recipe_names", "Fp8", "keep_head",
    "NVFP4Linear", "NVFP4LinearConfig", "convert_to_nvfp4_training", "Nvfp4",
    "Float8Tensor", "cast_to_float8", "quantize_dequantize", "to_fp8_saturated", "scaled_mm",
    "AmaxHistory", "delayed_scale", "reduce_amax", "update_amax_history",
    "EPS", "amax", "amax_to_scale", "fp8_max", "round_down_to_power_of_2", "tensor_to_scale",
]
