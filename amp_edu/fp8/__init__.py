"""fp8 training from scratch: scales, casts, the scaled matmul and an fp8 ``nn.Linear``.

The pieces, in the order lesson 10 builds them:

* :mod:`~amp_edu.fp8.scaling`: amax → scale (EPS, power-of-two rounding);
* :mod:`~amp_edu.fp8.cast`: saturating cast with a scale (:class:`Float8Tensor`);
* :mod:`~amp_edu.fp8.gemm`: ``torch._scaled_mm`` with the layouts and scales it expects;
* :mod:`~amp_edu.fp8.recipes`, :mod:`~amp_edu.fp8.linear`, :mod:`~amp_edu.fp8.convert`:
  :class:`Float8Linear` and :func:`convert_to_float8_training` for torchao's ``tensorwise`` and
  ``rowwise`` recipes, bit-identical to ``torchao.float8``;
* :mod:`~amp_edu.fp8.delayed`: delayed scaling from an amax history (Transformer Engine style);
* :mod:`~amp_edu.fp8.blocks`, :mod:`~amp_edu.fp8.mx`: per-row, 1×128, 128×128 and MX-32 block scaling;
* :mod:`~amp_edu.fp8.reference`: importing torchao (for comparisons) without its CPU noise.
"""

from .cast import Float8Tensor, cast_to_float8, quantize_dequantize, to_fp8_saturated
from .convert import RECIPE_NAMES, convert_to_float8_training
from .delayed import AmaxHistory, DelayedFloat8Linear, delayed_scale, update_amax_history
from .gemm import scaled_mm
from .linear import Float8Linear, float8_matmul
from .recipes import SCALINGS, Recipe, get_recipe
from .training import FP8_RECIPES, Fp8, keep_head
from .scaling import EPS, amax, amax_to_scale, fp8_max, round_down_to_power_of_2, tensor_to_scale

__all__ = [
    "Float8Linear", "convert_to_float8_training", "RECIPE_NAMES", "FP8_RECIPES", "Fp8", "keep_head", "SCALINGS", "Recipe", "get_recipe",
    "Float8Tensor", "cast_to_float8", "quantize_dequantize", "to_fp8_saturated", "scaled_mm",
    "float8_matmul", "AmaxHistory", "DelayedFloat8Linear", "delayed_scale", "update_amax_history",
    "EPS", "amax", "amax_to_scale", "fp8_max", "round_down_to_power_of_2", "tensor_to_scale",
]
