"""An NVFP4 linear layer for training, emulated: three GEMMs on NVFP4 operands, Transformer Engine's tricks.

A linear layer ``y = x Wᵀ + b`` runs three GEMMs, and each quantizes its two operands to NVFP4
(:mod:`~amp_edu.fp4.nvfp4`: 16-element blocks along the GEMM's *reduction* dimension, an e4m3
scale per block, an fp32 scale per operand) before multiplying::

    forward   y  = x  · Wᵀ     reduce over in_features   x: blocks along K     W: blocks along K
    dgrad     dx = dY · W      reduce over out_features  dY: blocks along N    Wᵀ: blocks along N
    wgrad     dW = dYᵀ · x     reduce over tokens        dYᵀ: blocks along T   xᵀ: blocks along T

**This is an emulation.** Each operand is quantized and dequantized to float32, and the product
is a float32 matmul: on Blackwell the products of e2m1 values times their block scales are summed
by fp4 Tensor Cores, which a CPU (or a Hopper GPU) does not have. So the numerics are NVFP4's,
the speed is not. Like Transformer Engine (its recipe docstring, ``transformer_engine/common/
recipe/__init__.py`` lines 499-505 at commit d0067d0), every quantization starts from the
high-precision tensor: the layer saves ``x`` and ``W`` and quantizes them again in backward
along the other dimension, never re-quantizing a quantized tensor.

Three switches in :class:`~amp_edu.fp4.config.NVFP4LinearConfig` are Transformer Engine's
training tricks (``NVFP4BlockScaling``, same file, lines 593-609; Pretraining Large Language
Models with NVFP4, arXiv:2509.25149):

* ``stochastic_rounding``: the gradient ``dY`` is rounded stochastically (unbiased: on average
  it is the exact value) in both backward GEMMs; ``x`` and ``W`` round to nearest. TE:
  ``fp4_quant_bwd_grad`` has ``stochastic_rounding=True``, the two forward quantizers ``False``.
* ``rht_wgrad``: the random Hadamard transform (:mod:`~amp_edu.fp4.hadamard`) on the two inputs
  of the weight-gradient GEMM, along the tokens, before they are quantized (and before their
  per-tensor amax is taken). TE: the column-wise quantization of the input and of the gradient.
  The product is unchanged in exact arithmetic, so the GEMM needs no inverse.
* ``weight_2d``: one block scale per 16×16 tile of ``W`` (TE: ``fp4_2d_quantization`` for the
  weight only), so the forward's ``W`` and dgrad's ``Wᵀ`` are the same quantized matrix.

TE's default recipe turns all three on. torchao 0.18 makes the same three choices in its NVFP4
training prototype (``torchao/prototype/moe_training/nvfp4_training/nvfp4_linear.py``: the input
rounded to nearest, lines 107-113; 16×16 weight tiles, 115-123; the gradient rounded
stochastically for both backward GEMMs, 182-192; the Hadamard transform on the column-wise copies
only, ``hadamard_quantize_row_col_triton.py`` lines 243-249; it saves the quantized column-wise
``x`` for backward, lines 141-149, where this layer saves ``x``), as Triton kernels that need a
Blackwell (SM100) GPU, bf16 and dimensions that are multiples of 128: it cannot run on a CPU.
The layer's output bias and its gradient stay in high precision, and which layers are NVFP4 at
all is the converter's ``module_filter_fn`` (the course keeps the output head in high precision,
:func:`~amp_edu.fp8.convert.keep_head`; the paper's abstract names "selective high-precision
layers" among its method, arXiv 2509.25149). NVFP4 GEMMs need every dimension that is blocked to be a multiple of 16:
``in_features``, ``out_features`` and, when a backward can follow, the number of tokens (the
wgrad GEMM's reduction; a forward under ``torch.no_grad()``, an evaluation, blocks along
``in_features`` only). The layer checks and raises ``ValueError``.

The stochastic draws come from an explicit ``torch.Generator`` (``generator=``), so a run can
be repeated bit for bit; TE draws from torch's CUDA generator (philox offsets,
``transformer_engine/pytorch/csrc/quantizer.cpp`` lines 2604-2625).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..fp8.convert import keep_head, swap_linears
from . import hadamard
from .config import get_config
from .nvfp4 import NVFP4_BLOCK, TILES, nvfp4_quantize, per_tensor_scale

__all__ = ["nvfp4_qdq", "NVFP4Linear", "convert_to_nvfp4_training"]


def nvfp4_qdq(t: torch.Tensor, *, rounding: str = "nearest", generator: torch.Generator | None = None,
              tile: tuple = TILES[0]) -> torch.Tensor:
    """``t`` (2-D, blocks along its last dim) quantized to NVFP4 with its own per-tensor scale and
    dequantized to float32: one GEMM operand. An all-zero ``t`` stays zero (its per-tensor scale
    would be 0, and 0/0 NaN: an amax of 0 is replaced by 1, and zeros quantize to zeros)."""
    amax = t.abs().amax()
    pt = per_tensor_scale(torch.where(amax == 0, torch.ones_like(amax), amax))
    return nvfp4_quantize(t, pt, rounding=rounding, generator=generator, tile=tile).dequantize()


class _NVFP4Matmul(torch.autograd.Function):
    """``x2 @ weight.T`` (x2: tokens × in) with NVFP4 operands in all three GEMMs."""

    @staticmethod
    def forward(ctx, x2, weight, config, generator):
        ctx.save_for_backward(x2, weight)
        ctx.config, ctx.generator = config, generator
        xq = nvfp4_qdq(x2)                                            # blocks along K
        wq = nvfp4_qdq(weight, tile=config.weight_tile)               # blocks along K
        return (xq @ wq.t()).to(x2.dtype)

    @staticmethod
    def backward(ctx, dy):
        x2, weight = ctx.saved_tensors
        cfg, gen = ctx.config, ctx.generator
        g_round = "stochastic" if cfg.stochastic_rounding else "nearest"
        # dgrad: dX = dY · W, reduced over out_features
        dyq = nvfp4_qdq(dy, rounding=g_round, generator=gen)         # blocks along N
        wtq = nvfp4_qdq(weight.t(), tile=cfg.weight_tile)             # blocks along N
        dx = (dyq @ wtq.t()).to(x2.dtype)
        # wgrad: dW = dYᵀ · x, reduced over the tokens
        dyt, xt = dy.t().float(), x2.t().float()                      # (N, T), (K, T)
        if cfg.rht_wgrad:
            m = hadamard.rht_matrix(cfg.rht_signs, device=dy.device)
            dyt, xt = hadamard.rht(dyt, m), hadamard.rht(xt, m)
        dytq = nvfp4_qdq(dyt.to(dy.dtype), rounding=g_round, generator=gen)   # blocks along T
        xtq = nvfp4_qdq(xt.to(x2.dtype))                                       # blocks along T
        dw = (dytq @ xtq.t()).to(weight.dtype)
        return dx, dw, None, None


def _check_multiple(n: int, what: str, shape) -> None:
    if n % NVFP4_BLOCK:
        raise ValueError(f"NVFP4 blocks {what} in groups of {NVFP4_BLOCK}: it must be a multiple of "
                         f"{NVFP4_BLOCK}, got {n} (shape {tuple(shape)})")


class NVFP4Linear(nn.Linear):
    """``nn.Linear`` whose three GEMMs run on NVFP4 operands (emulated) under ``config``.

    ``generator`` (a ``torch.Generator`` on the weight's device) supplies the stochastic
    rounding draws and is required when ``config.stochastic_rounding`` is on."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, config=None,
                 generator: torch.Generator | None = None, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.config = get_config(config)
        _check_multiple(in_features, "in_features", self.weight.shape)
        _check_multiple(out_features, "out_features", self.weight.shape)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if self.config.stochastic_rounding and generator is None:
            raise TypeError("stochastic rounding needs generator=torch.Generator(...): its draws are reproducible")
        self.generator = generator

    @classmethod
    def from_float(cls, mod: nn.Linear, config=None, *, generator: torch.Generator | None = None) -> "NVFP4Linear":
        """An :class:`NVFP4Linear` sharing ``mod``'s weight and bias (an optimizer built before
        the swap keeps updating the same tensors)."""
        if not isinstance(mod, nn.Linear):
            raise TypeError(f"from_float takes an nn.Linear, got {type(mod).__name__}")
        with torch.device("meta"):
            new = cls(mod.in_features, mod.out_features, bias=False, config=config, generator=generator)
        new.weight, new.bias = mod.weight, mod.bias
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not isinstance(input, torch.Tensor) or input.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError("NVFP4Linear takes a float32 or bfloat16 input"
                            + (f", got {input.dtype}" if isinstance(input, torch.Tensor) else ""))
        x2 = input.reshape(-1, input.shape[-1])
        if torch.is_grad_enabled() and (input.requires_grad or self.weight.requires_grad):
            _check_multiple(x2.shape[0], "the tokens (the weight gradient's reduction)", input.shape)
        out = _NVFP4Matmul.apply(x2, self.weight, self.config, self.generator)
        out = out.reshape(*input.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias.to(out.dtype)

    def extra_repr(self) -> str:
        c = self.config
        return (f"{super().extra_repr()}, stochastic_rounding={c.stochastic_rounding}, "
                f"rht_wgrad={c.rht_wgrad}, weight_2d={c.weight_2d}")


def convert_to_nvfp4_training(model: nn.Module, config="nvfp4", *,
                              module_filter_fn: Callable[[nn.Module, str], bool] | None = keep_head,
                              generator: torch.Generator | None = None) -> nn.Module:
    """Replace ``model``'s ``nn.Linear`` layers for which ``module_filter_fn(module, fqn)`` is
    true (default: all but the output ``head``) with :class:`NVFP4Linear`, all drawing from one
    ``generator``; returns ``model``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    config = get_config(config)
    return swap_linears(model, lambda m: NVFP4Linear.from_float(m, config, generator=generator),
                        module_filter_fn, root=False, plain_only=True)
