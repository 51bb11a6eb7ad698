"""Preflight: settings that break in low precision, found before training.

An ``eps`` that rounds to 0 in fp16 (Adam's default 1e-8 does; so does BERT's layer-norm 1e-12)
divides by zero where it is applied in fp16, and fp16 parameters make ``GradScaler`` refuse to
unscale ("Attempting to unscale FP16 gradients.").
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .. import formats
from ..validate import check_number

__all__ = ["effective_eps", "effective_floor", "preflight"]


def effective_eps(eps: float, dtype: torch.dtype) -> float:
    """What ``eps`` becomes when it is stored in ``dtype`` (round to nearest even, like torch's
    cast: :func:`amp_edu.formats.quantize` does it bit for bit)."""
    eps = check_number(eps, "eps", min=0)
    return float(formats.quantize(eps, _format(dtype)))


def _format(dtype) -> formats.Format:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype (e.g. torch.float16), got {dtype!r}")
    if dtype == torch.float64:
        raise TypeError("dtype must be a floating torch.dtype of at most 32 bits (float64 keeps every eps)")
    return formats.get(dtype)


_NORM_TYPES = (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm, nn.modules.batchnorm._NormBase) \
    if hasattr(nn, "RMSNorm") else (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)


def preflight(model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None, *,
              dtype: torch.dtype = torch.float16, scaler: bool = True) -> list[str]:
    """Settings that break in ``dtype``, as sentences (an empty list means none found).

    * an ``eps`` of an optimizer or a norm module that rounds to 0 in ``dtype`` (Adam's 1e-8 and
      BERT's layer-norm 1e-12 in fp16; for the latter even ``1/sqrt(eps)``, the reciprocal std of
      a constant input, overflows fp16). It matters where the eps is *applied* in ``dtype``: a
      pure-fp16 model (``model.half()``), or a hand-written norm under autocast;
    * with ``scaler=True``: parameters in fp16, which ``GradScaler`` refuses to unscale.
    """
    if model is None and optimizer is None:
        raise ValueError("give a model, an optimizer, or both")
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float16 or torch.bfloat16 (the low precision to check for), got {dtype!r}")
    if not isinstance(scaler, bool):
        raise TypeError(f"scaler must be True or False (will a GradScaler be used?), got {type(scaler).__name__}")
    name = formats.dtype_name(dtype)
    found: list[str] = []

    def judge(where: str, eps: float, norm: bool) -> None:
        if eps is None or eps <= 0 or effective_eps(eps, dtype) != 0.0:
            return
        msg = (f"{where}: eps={eps:g} rounds to 0 in {name} (anything up to "
               f"{effective_floor(dtype) / 2:.3g} does), so where it is added in {name} a zero "
               f"{'variance' if norm else 'second moment'} divides by zero")
        if norm and 1.0 / math.sqrt(eps) > formats.get(dtype).max:
            msg += (f"; and 1/sqrt(eps) = {1 / math.sqrt(eps):.3g}, the reciprocal std of a constant "
                    f"input, overflows {name} in a kernel that keeps its statistics in {name}")
        found.append(msg + "; keep this computation in fp32")

    if optimizer is not None:
        for i, group in enumerate(optimizer.param_groups):
            if isinstance(group.get("eps"), (int, float)):
                judge(f"{type(optimizer).__name__} param group {i}", group["eps"], False)
    if model is not None:
        for mname, mod in model.named_modules():
            if isinstance(mod, _NORM_TYPES) and isinstance(getattr(mod, "eps", None), (int, float)):
                judge(f"{mname or '(model)'} ({type(mod).__name__})", mod.eps, True)
    if scaler:
        params = []
        if optimizer is not None:
            params = [p for g in optimizer.param_groups for p in g["params"]]
        elif model is not None:
            params = list(model.parameters())
        n16 = sum(p.numel() for p in params if p.dtype == torch.float16)
        if n16:
            found.append(f"{n16} parameter values are float16: GradScaler refuses them "
                         "(\"Attempting to unscale FP16 gradients.\"); keep parameters in fp32 and "
                         "let autocast make the fp16 copies")
    return found


def effective_floor(dtype: torch.dtype) -> float:
    """The smallest positive value of ``dtype`` (subnormals included): eps below half of it is 0."""
    return _format(dtype).smallest_subnormal
