"""``Float8Linear``: an ``nn.Linear`` whose three GEMMs run in fp8, as its config says.

Forward (``y = x @ W.T + b``)::

    y  = gemm(cast(x, input), cast(W.T, weight)) + b

Backward, with ``dY`` the incoming gradient::

    dX = gemm(cast(dY, grad_output), cast(W.T, weight_for_grad_input).t())         # dY @ W
    dW = gemm(cast(dY, grad_output_for_grad_weight).t(), cast(x, input_for_grad_weight))  # dY.T @ x
    db = dY.sum(0)                                                                 # autograd

Each ``cast`` reads its :class:`~amp_edu.fp8.config.CastConfig` (:func:`~amp_edu.fp8.gemm.cast_operand`):
a disabled one leaves the operand in high precision (the GEMM is then a plain ``torch.mm``, as
torchao's ``rowwise_with_gw_hp`` does for dW), an axiswise one takes one scale per slice along
the GEMM's reduction dim (dim -1 for ``x`` and ``dY`` in the forward and grad_input GEMMs, dim 0
in grad_weight), a tensorwise one a single scale, a blockwise one 1×128 tiles along that dim
(128×128 blocks for W). :func:`~amp_edu.fp8.gemm.gemm` then runs the matching GEMM; nothing in
this module depends on the granularity. What is *saved* for backward is the
high-precision ``x`` and ``W``: each backward GEMM needs its operands scaled along its own
reduction dim, so they are cast again. The weights stay in their own dtype (the master copy the
optimizer updates): fp8 is only the format of the GEMM operands.

A config with ``ScalingType.DELAYED`` (Transformer Engine's recipe) takes its per-tensor scales
from amax histories instead (:mod:`~amp_edu.fp8.delayed`); then one fp8 cast of ``x`` and of
``W`` serves all three GEMMs and backward keeps those 1-byte casts.

With ``enable_fsdp_float8_all_gather`` the weight is a
:class:`~amp_edu.fp8.fsdp.WeightWithFloat8AllGather`: under FSDP2 each rank casts its shard to fp8
before the all-gather, and the gathered :class:`~amp_edu.fp8.fsdp.Float8GatheredWeight` is used in
the output and grad_input GEMMs as it came, not cast again (tensorwise: one scale serves both).
Without FSDP2 the wrapped weight behaves as the plain one. Only such a layer imports
:mod:`~amp_edu.fp8.fsdp` (FSDP2's extension protocol): the others never load it.

The bias is added outside the fp8 GEMM in the output dtype, and under CUDA autocast the input
is cast to the autocast dtype first, both as torchao does (``torchao/float8/float8_linear.py``);
with those rules the outputs and the gradients are bit-identical to
``torchao.float8.Float8Linear`` for its three recipes (``tests/fp8/test_linear_parity.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from .config import Float8LinearConfig, get_config
from .delayed import AmaxHistory, DelayedMatmul
from .gemm import cast_operand, gemm

__all__ = ["Float8Linear"]


def _cast_weight(weight_t, cast, config, dim):
    """The weight's fp8 operand: the one FSDP2 gathered in fp8, as it came, or ``weight_t`` cast now."""
    if config.enable_fsdp_float8_all_gather:
        from .fsdp import Float8GatheredWeight
        if isinstance(weight_t, Float8GatheredWeight):
            return weight_t.fp8
    return cast_operand(weight_t, cast, config, dim=dim, weight=True)


def _gathered_in_fp8(weight: nn.Parameter, config: Float8LinearConfig) -> nn.Parameter:
    """``weight`` wrapped for FSDP2's fp8 all-gather when ``config`` asks for it, else itself."""
    if not config.enable_fsdp_float8_all_gather:
        return weight
    from .fsdp import float8_all_gather_weight
    return float8_all_gather_weight(weight, config.weight.dtype, config.power_of_2)


class _Float8Matmul(torch.autograd.Function):
    """``input @ weight_t`` with each operand cast as the config says, forward and backward."""

    @staticmethod
    def forward(ctx, input_hp, weight_t_hp, config: Float8LinearConfig):
        ctx.save_for_backward(input_hp, weight_t_hp)
        ctx.config = c = config
        x2d = input_hp.reshape(-1, input_hp.shape[-1])
        x8 = cast_operand(x2d, c.input, c, dim=1)                        # scales along K: per row of x
        w8 = _cast_weight(weight_t_hp, c.weight, c, dim=0)               # ... per output feature of W
        out = gemm(x8, w8, c, c.fast_accum_output)
        return out.reshape(*input_hp.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        input_hp, weight_t_hp = ctx.saved_tensors
        c = ctx.config
        go = grad_output.reshape(-1, grad_output.shape[-1])
        # grad_input = dY @ W: reduce over output features
        go8 = cast_operand(go, c.grad_output, c, dim=1)
        w8 = _cast_weight(weight_t_hp, c.weight_for_grad_input, c, dim=1)
        grad_input = gemm(go8, w8.t(), c, False).reshape(*grad_output.shape[:-1], -1)
        # grad_weight = dY.T @ x: reduce over the batch (tokens)
        go8_cols = cast_operand(go, c.grad_output_for_grad_weight, c, dim=0)
        x8_cols = cast_operand(input_hp.reshape(-1, input_hp.shape[-1]), c.input_for_grad_weight, c, dim=0)
        grad_weight = gemm(go8_cols.t(), x8_cols, c, False)
        return grad_input, grad_weight.t(), None


class Float8Linear(nn.Linear):
    """``nn.Linear`` with fp8 GEMMs under ``config`` (a :class:`Float8LinearConfig` or a recipe name).

    ``Float8Linear(in_features, out_features, bias=True, config="tensorwise", device=None,
    dtype=None)``, or :meth:`from_float` to wrap an existing layer's parameters (shared, not
    copied). A delayed config adds three :class:`~amp_edu.fp8.delayed.AmaxHistory` submodules
    (``amax_input``, ``amax_weight``, ``amax_grad``), saved in the ``state_dict``. A config with
    ``enable_fsdp_float8_all_gather`` wraps the weight for FSDP2's fp8 all-gather (a new
    ``nn.Parameter`` over the same storage: build the optimizer after converting and sharding).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 config="tensorwise", device=None, dtype=None):
        self.config = get_config(config)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        c = self.config
        if c.delayed:
            hist = dict(history_len=c.history_len, margin=c.margin, reduce_amax=c.reduce_amax)
            self.amax_input = AmaxHistory(c.input.dtype, **hist).to(device)
            self.amax_weight = AmaxHistory(c.weight.dtype, **hist).to(device)
            self.amax_grad = AmaxHistory(c.grad_output.dtype, **hist).to(device)
        if c.enable_fsdp_float8_all_gather:
            self.weight = _gathered_in_fp8(self.weight, c)

    @classmethod
    def from_float(cls, mod: nn.Linear, config="tensorwise") -> "Float8Linear":
        if not isinstance(mod, nn.Linear):
            raise TypeError(f"from_float takes an nn.Linear, got {type(mod).__name__}")
        with torch.device("meta"):
            new = cls(mod.in_features, mod.out_features, bias=False, config=config)
        if new.config.delayed:                          # the amax buffers live with the weight
            for name in ("amax_input", "amax_weight", "amax_grad"):
                setattr(new, name, getattr(new, name).to_empty(device=mod.weight.device).reset())
        new.weight = _gathered_in_fp8(mod.weight, new.config)
        new.bias = mod.bias
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled():                    # CUDA autocast, as torchao does
            input = input.to(torch.get_autocast_dtype("cuda"))
        if self.config.delayed:
            out = DelayedMatmul.apply(input, self.weight.t(), self)
        else:
            out = _Float8Matmul.apply(input, self.weight.t(), self.config)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out

    def extra_repr(self) -> str:
        gather = ", fp8 all-gather" if self.config.enable_fsdp_float8_all_gather else ""
        return f"{super().extra_repr()}, config={self.config.name}{gather}"
