"""fp8 training from scratch: scales, casts, the scaled matmul and an fp8 ``nn.Linear``.

The pieces, in the order lesson 10 builds them:

* :mod:`~amp_edu.fp8.scaling`: amax → scale (EPS, power-of-two rounding);
* :mod:`~amp_edu.fp8.cast`: saturating cast with a scale (:class:`Float8Tensor`);
* :mod:`~amp_edu.fp8.gemm`: ``torch._scaled_mm`` with the layouts, shapes and scales it expects;
* :mod:`~amp_edu.fp8.accumulate`: what a narrow GEMM accumulator costs (emulated);
* :mod:`~amp_edu.fp8.config`: :class:`Float8LinearConfig` (scaling type, granularity and dtype of
  each cast) and the named configurations, :func:`config_names` (this package owns those names;
  :mod:`amp_edu.recipes.fp8` derives the ``fp8_*`` training recipes from them);
* :mod:`~amp_edu.fp8.linear`, :mod:`~amp_edu.fp8.convert`: :class:`Float8Linear` and
  :func:`convert_to_float8_training` for torchao's ``tensorwise``, ``rowwise`` and
  ``rowwise_with_gw_hp`` recipes, bit-identical to ``torchao.float8``; :func:`keep_head`, the
  course's filter that keeps the output layer in high precision;
* :mod:`~amp_edu.fp8.delayed`: delayed scaling from an amax history (Transformer Engine's rule);
* :mod:`~amp_edu.fp8.blocks`, :mod:`~amp_edu.fp8.mx`: per-row, 1×128, 128×128 and MX-32 block
  scaling (MX with torchao's FLOOR and RCEIL scale rules, e8m0 scales);
* :mod:`~amp_edu.fp8.blockgemm`, :mod:`~amp_edu.fp8.mxgemm`: DeepSeek-V3's block-scaled GEMM and
  the MX GEMM, scales applied inside the K loop;
* :mod:`~amp_edu.fp8.fsdp`: FSDP2's fp8 all-gather (lesson 11; imported by the layers that use it
  and by :mod:`amp_edu.distributed`, not by this package);
* :mod:`~amp_edu.fp8.torchao_import`: importing torchao (for comparisons) without its CPU noise.

fp8 only: NVFP4 and the Hadamard transform, which build on these pieces, are :mod:`amp_edu.fp4`;
the training recipes that use them are :mod:`amp_edu.recipes` (``fp8_*``, ``nvfp4*``).
"""

from .cast import Float8Tensor, cast_to_float8, quantize_dequantize, to_fp8_saturated
from .config import CastConfig, Float8LinearConfig, Granularity, ScalingType, config_names, get_config
from .convert import convert_to_float8_training, keep_head
from .delayed import AmaxHistory, delayed_scale, reduce_amax, update_amax_history
from .gemm import scaled_mm
from .linear import Float8Linear
from .scaling import EPS, amax, amax_to_scale, fp8_max, round_down_to_power_of_2, tensor_to_scale

__all__ = [
    "Float8Linear", "convert_to_float8_training", "Float8LinearConfig", "CastConfig", "Granularity",
    "ScalingType", "get_config", "config_names", "keep_head",
    "Float8Tensor", "cast_to_float8", "quantize_dequantize", "to_fp8_saturated", "scaled_mm",
    "AmaxHistory", "delayed_scale", "reduce_amax", "update_amax_history",
    "EPS", "amax", "amax_to_scale", "fp8_max", "round_down_to_power_of_2", "tensor_to_scale",
]
