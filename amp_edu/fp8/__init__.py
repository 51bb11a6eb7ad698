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
* :mod:`~amp_edu.fp8.reference`: importing torchao (for comparisons) without its CPU noise.
"""

from .cast import Float8Tensor, cast_to_float8, quantize_dequantize, to_fp8_saturated
from .config import CastConfig, Float8LinearConfig, Granularity, ScalingType, get_config, recipe_names
from .convert import convert_to_float8_training
from .delayed import AmaxHistory, delayed_scale, reduce_amax, update_amax_history
from .gemm import scaled_mm
from .linear import Float8Linear
from .training import Fp8, keep_head
from .scaling import EPS, amax, amax_to_scale, fp8_max, round_down_to_power_of_2, tensor_to_scale

__all__ = [
    "Float8Linear", "convert_to_float8_training", "Float8LinearConfig", "CastConfig", "Granularity",
    "ScalingType", "get_config", "recipe_names", "Fp8", "keep_head",
    "Float8Tensor", "cast_to_float8", "quantize_dequantize", "to_fp8_saturated", "scaled_mm",
    "AmaxHistory", "delayed_scale", "reduce_amax", "update_amax_history",
    "EPS", "amax", "amax_to_scale", "fp8_max", "round_down_to_power_of_2", "tensor_to_scale",
]
