"""NVFP4 from scratch: 4-bit e2m1 values in blocks of 16, e4m3 block scales, and the tricks that train with it.

fp4 sits on top of fp8: an NVFP4 block scale *is* an fp8 (e4m3) number, and the layer reuses fp8's
converter (:func:`~amp_edu.fp8.convert.swap_linears`, :func:`~amp_edu.fp8.convert.keep_head`).
The pieces, in the order lesson 10 builds them:

* :mod:`~amp_edu.fp4.nvfp4`: the format, :func:`nvfp4_quantize` and :class:`NVFP4Tensor` (two-level
  scaling: an e4m3 scale per 16 elements, an fp32 scale per tensor), equal to torchao's
  ``NVFP4Tensor``; stochastic rounding onto the e2m1 grid and 16×16 tiles for training;
* :mod:`~amp_edu.fp4.hadamard`: the 16×16 random Hadamard transform (Transformer Engine's);
* :mod:`~amp_edu.fp4.config`: :class:`NVFP4LinearConfig`, which of those tricks a layer uses, and
  the named configurations, :func:`config_names` (this package owns those names;
  :mod:`amp_edu.recipes.fp4` registers them as training recipes, family ``Family.FP4``);
* :mod:`~amp_edu.fp4.linear`: :class:`NVFP4Linear`, whose three GEMMs run on NVFP4 operands
  (emulated in float32), and :func:`convert_to_nvfp4_training`.

OCP's MXFP4 (32 elements, an e8m0 power-of-two scale) is the MX family's, :mod:`amp_edu.fp8.mx`.
"""

from .config import NVFP4LinearConfig, config_names, get_config
from .hadamard import HADAMARD_SIZE, TE_SIGNS, random_signs, rht, rht_matrix, sylvester
from .linear import NVFP4Linear, convert_to_nvfp4_training, nvfp4_qdq
from .nvfp4 import NVFP4_BLOCK, TILES, NVFP4Tensor, nvfp4_quantize, per_tensor_scale

__all__ = [
    "NVFP4Linear", "convert_to_nvfp4_training", "nvfp4_qdq", "NVFP4LinearConfig", "config_names", "get_config",
    "NVFP4Tensor", "nvfp4_quantize", "per_tensor_scale", "NVFP4_BLOCK", "TILES",
    "HADAMARD_SIZE", "TE_SIGNS", "sylvester", "random_signs", "rht_matrix", "rht",
]
