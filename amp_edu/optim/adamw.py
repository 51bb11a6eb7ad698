"""Adam/AdamW whose precision is a choice: weights in fp32 or bf16 (rounded to nearest,
stochastically, or Kahan-compensated) and states as the weight's dtype or block-wise 8/4-bit/fp8.

One parameter's step, in fp32 whatever the storage (torchao's ``single_param_adam``,
``torchao/optim/adam.py`` lines 163-210 in torchao 0.18.0, written out op for op)::

    p = p.float(); g = grad.float()
    p = p - (lr * wd) * p                    # AdamW (decoupled); Adam: g = g + wd * p
    m = lerp(m.float(), g, 1 - beta1)        # exp_avg: dequantized, updated in fp32 ...
    v = lerp(v.float(), g * g, 1 - beta2)    # exp_avg_sq
    store m, v                               # ... stored back (quantized, or rounded to bf16)
    p = p - lr * (m / (1 - beta1**t)) / (sqrt(v) / sqrt(1 - beta2**t) + eps)
    store p                                  # round to nearest / stochastically / with Kahan

The weight update uses the fp32 ``m`` and ``v`` of this step, not their quantized copies; only the
*next* step sees what quantization kept.

Bit for bit with torchao on a CPU. torchao runs that function through ``torch.compile``
(``adam.py`` line 142; on a CPU Inductor generates one fused C++ kernel per step, two for the 4-bit
states, whose codes it unpacks first), and eager PyTorch differs from the generated code in two
places, which this module follows so that its eager steps give Inductor's bits:

* ``lerp``: eager ``torch.lerp`` uses a fused multiply-add; Inductor computes
  ``start + weight * (end - start)`` (for ``weight < 0.5``; ``end + (weight - 1) * (end - start)``
  above) with a separate multiply and add, rounding twice (``torch/_refs/__init__.py`` lines
  5447-5450 in torch 2.13.0, ``lerp``).
* ``sqrt``: Inductor's vectorised square root is correctly rounded; eager ``torch.sqrt`` on float32
  (AVX-512 build) is not always (the tests count the differences). The square root is taken in
  float64 and rounded to float32, which is the correctly rounded float32 result.

Small tensors keep unquantized states: a tensor is quantized only if it has at least
``min_quantized_size`` elements (4096, as torchao, ``adam.py`` lines 74-75, which follows
bitsandbytes' ``min_8bit_size=4096``) and splits into whole blocks.

The rest follows torchao's ``_AdamBase`` (``adam.py`` lines 19-161): ``amsgrad`` keeps a third
state, ``max_exp_avg_sq`` (stored like ``exp_avg_sq``), and divides by the largest second moment
seen (matching torchao's ``_AdamW(amsgrad=True)``; torchao's quantized states cannot take it, as its
subclasses have no ``aten.maximum``: ``AdamW8bit(amsgrad=True)`` fails at its first step on a
quantized tensor, while here the state is dequantized first); ``lr`` may be a tensor (torchao stores every ``lr`` as an fp32 tensor, so a scheduler can
change it in place with ``fill_``; here a float stays a float, and either works); weight decay
defaults to torchao's (``1e-2`` for AdamW, ``0`` for Adam). The quantized states are
:class:`~amp_edu.optim.state.QuantizedState` tensors with the parameter's dtype as their
appearance, so ``load_state_dict`` moves them to the parameter's device and torch's distributed
checkpoint can save and reshard them.

FSDP2 and other ``DTensor`` parameters: Adam is elementwise, so each rank updates only the part it
holds. The step works on the local shards (``p.to_local()``, the gradient's, the states') and each
new state is the local state wrapped in a ``DTensor`` with the parameter's mesh and placements
(torchao's ``_new_buffer``, ``adam.py`` lines 69-98); whether a shard is quantized is decided by
its local size, as in torchao. A shard boundary then falls between blocks, and the sharded run
gives the same bits as one process would.

One deliberate difference: the step counter is always fp32. torchao's ``torch.tensor(0.0)``
follows ``torch.get_default_dtype()``; under ``torch.set_default_dtype(torch.bfloat16)`` its count
stops at 256 (256 + 1 rounds back to 256 in bf16), and the bias corrections with it.
"""

from __future__ import annotations

import torch

from ..scaler.dtensor import is_dtensor, local_tensor
from ..validate import check_bool, check_int, check_number
from .blockwise import BLOCK_SIZES, QUANTIZED_STATES
from .kahan import compensation_like, kahan_add_
from .state import QuantizedState
from .stochastic import stochastic_round

__all__ = ["AdamW", "WEIGHT_ROUNDINGS", "STATES", "lerp_like_inductor", "sqrt_rounded", "check_lr"]

#: How an fp32 result is stored into a bf16 weight (``rounding=``); the optimizer recipes
#: ``bf16_<rounding>`` (:mod:`amp_edu.recipes.optim`) are derived from them.
WEIGHT_ROUNDINGS = ("nearest", "stochastic", "kahan")
#: Where Adam's moments are stored (``states=``): "param", the weight's own dtype, as torch and
#: torchao do, or one of the block-wise :data:`~amp_edu.optim.blockwise.QUANTIZED_STATES`.
STATES = ("param",) + QUANTIZED_STATES


def lerp_like_inductor(start: torch.Tensor, end: torch.Tensor, weight: float) -> torch.Tensor:
    """``torch.lerp(start, end, weight)`` as Inductor computes it: multiply, then add."""
    if weight >= 0.5:
        return end + (end - start) * (weight - 1)
    return start + (end - start) * weight


def sqrt_rounded(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded float32 square root of float32 ``x``."""
    return x.double().sqrt().float()


def check_lr(lr):
    """``lr`` if it is a number >= 0 or a one-element floating-point tensor >= 0 (kept as given,
    so a scheduler's ``fill_`` reaches the optimizer)."""
    if isinstance(lr, torch.Tensor):
        if not lr.is_floating_point() or lr.numel() != 1:
            raise TypeError(f"lr as a tensor must have one floating-point element, got {lr.dtype} of shape "
                            f"{tuple(lr.shape)}")
        if lr.requires_grad:
            raise ValueError("lr as a tensor must not require grad")
        value = float(lr)
        if not value >= 0.0 or value == float("inf"):
            raise ValueError(f"lr must be a finite number >= 0, got {value:g}")
        return lr
    return check_number(lr, "lr (a float or a one-element tensor)", min=0.0)


class AdamW(torch.optim.Optimizer):
    """Adam (``decoupled=False``) or AdamW with a choice of storage precision.

    ``states``: ``"param"`` (the moments in the weight's dtype: fp32 for fp32 weights, bf16 for
    bf16 weights, as torch and torchao's ``_AdamW`` keep them), ``"8bit"``, ``"4bit"`` or ``"fp8"``
    (block-wise, :class:`~amp_edu.optim.state.QuantizedState`; ``block_size`` defaults to
    256/128/256). ``rounding``: how an fp32 result is stored into a **bf16** weight --
    ``"nearest"``, ``"stochastic"`` (from ``generator``, or torch's default generator) or
    ``"kahan"`` (a bf16 compensation buffer per weight, ``state["kahan_comp"]``). fp32 weights
    ignore it. ``weight_decay``: ``None`` is torchao's default, 1e-2 for AdamW and 0 for Adam.
    ``amsgrad``: per parameter group, as in torch. ``lr``: a float or a one-element tensor.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float | None = None, amsgrad: bool = False, *, decoupled: bool = True,
                 states: str = "param", rounding: str = "nearest", block_size: int | None = None,
                 min_quantized_size: int = 4096, generator: torch.Generator | None = None) -> None:
        decoupled = check_bool(decoupled, "decoupled")
        lr = check_lr(lr)
        eps = check_number(eps, "eps", min=0.0)
        if weight_decay is None:
            weight_decay = 1e-2 if decoupled else 0.0
        weight_decay = check_number(weight_decay, "weight_decay", min=0.0)
        amsgrad = check_bool(amsgrad, "amsgrad")
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas must be a pair of floats, got {betas!r}")
        for b in betas:
            if not 0.0 <= check_number(b, "each beta") < 1.0:
                raise ValueError(f"each beta must be in [0, 1), got {b}")
        if states not in STATES:
            raise ValueError(f"states must be one of {', '.join(STATES)}, got {states!r}")
        if rounding not in WEIGHT_ROUNDINGS:
            raise ValueError(f"rounding must be one of {', '.join(WEIGHT_ROUNDINGS)}, got {rounding!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.decoupled = decoupled
        super().__init__(params, dict(lr=lr, betas=tuple(float(b) for b in betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad))
        self.states, self.rounding, self.generator = states, rounding, generator
        self.block_size = (None if states == "param" else
                           check_int(BLOCK_SIZES[states] if block_size is None else block_size, "block_size", min=2))
        self.min_quantized_size = check_int(min_quantized_size, "min_quantized_size", min=0)

    def __repr__(self) -> str:
        return (f"amp_edu {type(self).__name__}(states={self.states!r}, rounding={self.rounding!r}, "
                f"decoupled={self.decoupled})")

    def __setstate__(self, state) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)

    def add_param_group(self, param_group: dict) -> None:
        """torch's, with each group's own ``lr`` (if it has one) checked like the constructor's."""
        if isinstance(param_group, dict) and "lr" in param_group:
            param_group["lr"] = check_lr(param_group["lr"])
        super().add_param_group(param_group)

    # --- state -------------------------------------------------------------------------------
    def quantizes(self, p: torch.Tensor) -> bool:
        """Are ``p``'s moments stored quantized? (big enough, and whole blocks; for a DTensor,
        this rank's shard)."""
        n = local_tensor(p).numel()
        return self.block_size is not None and n >= self.min_quantized_size and n % self.block_size == 0

    def _new_state(self, p: torch.Tensor, signed: bool):
        local = local_tensor(p)
        if self.quantizes(p):
            out = QuantizedState(self.states, local.shape, signed=signed, block_size=self.block_size,
                                 device=local.device, dtype=local.dtype)
        else:
            out = torch.zeros_like(local, memory_format=torch.preserve_format)
        return _like_param(p, out)

    def _init_state(self, p: torch.Tensor, group: dict) -> dict:
        state = self.state[p]
        state["step"] = torch.tensor(0.0, dtype=torch.float32)
        state["exp_avg"] = self._new_state(p, True)
        state["exp_avg_sq"] = self._new_state(p, False)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = self._new_state(p, False)
        if self.rounding == "kahan" and p.dtype == torch.bfloat16:
            state["kahan_comp"] = _like_param(p, compensation_like(local_tensor(p)))
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's ``load_state_dict`` (which moves every state to its parameter's device and
        dtype with ``.to``), then every quantized state is copied, so the optimizer never shares
        (and later mutates) the tensors of the dictionary it was loaded from."""
        super().load_state_dict(state_dict)
        for st in self.state.values():
            for k, v in st.items():
                if isinstance(local_tensor(v), QuantizedState):
                    st[k] = v.clone()

    # --- the step ----------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            lr = lr if isinstance(lr, torch.Tensor) else torch.tensor(lr, dtype=torch.float32)  # torchao's fp32 lr
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("sparse gradients are not supported")
                state = self.state[p] if len(self.state[p]) else self._init_state(p, group)
                state["step"] += 1
                local = {k: local_tensor(v) for k, v in state.items()}
                self._update(local_tensor(p), local_tensor(p.grad), local, lr, beta1, beta2,
                             group["weight_decay"], group["eps"])
        return loss

    def _update(self, p, grad, state, lr, beta1, beta2, wd, eps) -> None:
        step, m_store, v_store = state["step"], state["exp_avg"], state["exp_avg_sq"]
        vmax_store = state.get("max_exp_avg_sq")
        p32 = p.detach().float()
        g = grad.float()
        if self.decoupled:
            p32 = p32 - lr * wd * p32
        else:
            g = g + wd * p32
        bc1 = 1 - beta1 ** step
        bc2 = 1 - beta2 ** step
        m = lerp_like_inductor(_as_fp32(m_store), g, 1 - beta1)
        v = lerp_like_inductor(_as_fp32(v_store), g.square(), 1 - beta2)
        m_store.copy_(m)                          # quantize, or round to the state's dtype
        v_store.copy_(v)
        if vmax_store is not None:                # amsgrad: the largest second moment so far
            v = torch.maximum(_as_fp32(vmax_store), v)
            vmax_store.copy_(v)
        denom = sqrt_rounded(v) / sqrt_rounded(bc2) + eps
        new = p32 - lr * (m / bc1) / denom
        if p.dtype != torch.bfloat16 or self.rounding == "nearest":
            p.copy_(new)
        elif self.rounding == "stochastic":
            p.copy_(stochastic_round(new, generator=self.generator))
        else:
            kahan_add_(p, state["kahan_comp"], new - p.float())


def _as_fp32(s) -> torch.Tensor:
    return s.dequantize() if isinstance(s, QuantizedState) else s.float()


def _like_param(p: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """``local`` as ``p`` is: a DTensor with ``p``'s mesh, placements, shape and stride if ``p`` is
    one (each rank holds its part), else ``local`` itself."""
    if not is_dtensor(p):
        return local
    from torch.distributed.tensor import DTensor
    out = DTensor.from_local(local, p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride())
    return out.to(p.device)
