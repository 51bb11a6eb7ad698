"""``custom_fwd`` / ``custom_bwd``: autocast for custom ``torch.autograd.Function``\\ s.

Ops inside a custom Function's ``forward`` are autocast like any others. Two things need help:

* a forward that must run in one dtype (a hand-written kernel that only supports fp32, or a sum
  that would overflow fp16): ``@custom_fwd(device_type=..., cast_inputs=torch.float32)`` casts the
  floating inputs to that dtype and runs ``forward`` with autocast *off*;
* ``backward`` runs wherever autograd calls it, usually outside the region: ``@custom_bwd``
  re-enters the autocast state that ``forward`` saw, so both passes agree.

Same contract as ``torch.amp.custom_fwd`` / ``custom_bwd``, and the same bookkeeping on ``ctx``
(``ctx._dtype``, ``ctx._fwd_used_autocast``), so the two pairs mix: torch's ``custom_fwd`` works
inside ``amp_edu.autocast`` (a region sets torch's autocast state, which torch's decorator reads,
and the ``torch.autocast(enabled=False)`` it opens switches our casting off too). What ours adds:
``custom_bwd`` re-enters an ``amp_edu.autocast`` region with the *policy* ``forward`` saw
(``ctx._amp_edu_policy``), where torch's re-enters ``torch.autocast`` and so torch's own table.
"""

from __future__ import annotations

import functools

import torch

from .policy import is_eligible
from .region import autocast
from .state import get_autocast_dtype, get_autocast_policy, is_autocast_enabled

__all__ = ["custom_fwd", "custom_bwd"]


def _check(device_type) -> None:
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")


def _cast(value, device_type: str, dtype: torch.dtype):
    """Cast eligible tensors in ``value`` (and inside lists, tuples and dicts) to ``dtype``."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if is_eligible(value, device_type) else value
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {k: _cast(v, device_type, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, device_type, dtype) for v in value)
    return value


def custom_fwd(fwd=None, *, device_type: str, cast_inputs: torch.dtype | None = None):
    """Decorate ``forward`` of a custom autograd Function (see the module docstring)."""
    _check(device_type)
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        ctx = args[0]
        ctx._dtype = get_autocast_dtype(device_type)
        ctx._amp_edu_policy = get_autocast_policy(device_type)
        if cast_inputs is None:
            ctx._fwd_used_autocast = is_autocast_enabled(device_type)
            return fwd(*args, **kwargs)
        ctx._fwd_used_autocast = False
        if is_autocast_enabled(device_type):
            with autocast(device_type, enabled=False):
                return fwd(*_cast(args, device_type, cast_inputs), **_cast(kwargs, device_type, cast_inputs))
        return fwd(*args, **kwargs)

    return decorate_fwd


def custom_bwd(bwd=None, *, device_type: str):
    """Decorate ``backward`` so it runs with the autocast state its ``forward`` had."""
    _check(device_type)
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        ctx = args[0]
        policy = getattr(ctx, "_amp_edu_policy", device_type)   # a forward decorated by torch's custom_fwd
        with autocast(device_type, enabled=ctx._fwd_used_autocast, dtype=ctx._dtype, policy=policy):
            return bwd(*args, **kwargs)

    return decorate_bwd
