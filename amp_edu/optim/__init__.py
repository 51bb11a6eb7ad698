"""The optimizer's precision: bf16 weights that keep small updates, and Adam states in 8, 4 or fp8 bits.

Mixed precision (lessons 05-08) keeps fp32 weights and fp32 Adam moments: 4 + 4 + 8 = 16 bytes per
parameter with fp32 gradients. This package builds, from scratch, what training does to go below
that, each piece proven equal to torchao.optim 0.18 in the tests:

================  ==========================================================================
module            concept
================  ==========================================================================
``stochastic``    stochastic rounding fp32 → bf16: unbiased, so small updates survive on average
``kahan``         Kahan-compensated bf16 weights: a bf16 buffer keeps what rounding took away
``qmaps``         the code books: bitsandbytes' dynamic map (8 and 4 bits) and a linear 4-bit map
``blockwise``     a state stored block-wise: codes + one fp32 scale per block (8-bit, 4-bit, fp8)
``state``         :class:`QuantizedState`: those codes and scales as a tensor subclass, so
                  ``load_state_dict``, ``torch.save``, DTensor/FSDP2 and distributed checkpoints
                  can move, save, slice and shard it
``adamw``         :class:`AdamW`: the step of torchao's ``single_param_adam``, any storage
``drop_in``       torchao's class names (``AdamW8bit``, ``Adam4bit``, ...) with its signatures
``memory``        bytes per parameter counted from the tensors the optimizer really holds
``parity``        run torchao's optimizer and :class:`AdamW` side by side, step by step
``updates``       which updates a bf16 weight loses: update/weight against half an ulp
================  ==========================================================================

This package owns the choices of storage: :data:`WEIGHT_ROUNDINGS` (how a bf16 weight is written
back: ``nearest``, ``stochastic``, ``kahan``) and :data:`QUANTIZED_STATES` (the block-wise formats
of Adam's moments: ``8bit``, ``4bit``, ``fp8``). The training recipes built on them
(``bf16_<rounding>``, ``states_<kind>``, for :func:`amp_edu.train.train` and the studies) are
:mod:`amp_edu.recipes.optim`'s, which derives their names from these two tuples; this package
knows nothing of recipes.
"""

from .adamw import STATES, WEIGHT_ROUNDINGS, AdamW
from .blockwise import BLOCK_SIZES, QUANTIZED_STATES
from .drop_in import Adam4bit, Adam8bit, AdamFp8, AdamW4bit, AdamW8bit, AdamWFp8, _AdamW  # noqa: F401
from .kahan import compensation_like, kahan_add_
from .memory import Footprint, footprint, tensor_bytes
from .qmaps import dynamic_map, linear_map, nearest_code
from .state import QuantizedState
from .stochastic import random_bits, round_up_probability, stochastic_round

__all__ = ["AdamW", "Adam8bit", "AdamW8bit", "Adam4bit", "AdamW4bit", "AdamFp8", "AdamWFp8",
           "WEIGHT_ROUNDINGS", "STATES", "QuantizedState", "QUANTIZED_STATES", "BLOCK_SIZES", "compensation_like",
           "kahan_add_", "Footprint", "footprint", "tensor_bytes", "dynamic_map", "linear_map", "nearest_code",
           "random_bits", "round_up_probability", "stochastic_round"]
