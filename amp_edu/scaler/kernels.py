"""The two numerical pieces of dynamic loss scaling, as lesson 04 builds them.

* :func:`non_finite_check_and_unscale_` -- multiply every gradient by ``1/S`` and record whether
  any held an inf or NaN (torch's private ``_amp_foreach_non_finite_check_and_unscale_``);
* :func:`update_rule` -- the rule on plain numbers: back off after an overflow, grow after
  ``growth_interval`` good steps -- and :func:`update_scale_`, the same rule on the scaler's
  one-element tensors (torch's ``_amp_update_scale_``);
* :func:`inverse_scale` -- ``1/S``, the same on every machine.

These are the readable versions: one gradient at a time, one question each. The scaler itself
calls their fast twins in :mod:`amp_edu.scaler._fast` (which stack small CPU gradients into one
reduction and never read a GPU value back), and ``tests/scaler/test_fastpath.py`` proves the two
give the same bits, the same ``found_inf`` and the same errors.
"""

from __future__ import annotations

import math
import struct

import torch

from .contract import check_unscale_scalars, check_update_args, check_update_tensors, first_bad_grad

__all__ = ["inverse_scale", "non_finite_check_and_unscale_", "unscale_by_", "update_rule", "update_scale_"]


def inverse_scale(scale: torch.Tensor) -> torch.Tensor:
    """``1/scale`` as float32, computed in float64.

    A correctly rounded float32 division gives the same answer, but float32 division is not always
    correctly rounded (fast-math GPU builds use an approximate reciprocal); going through float64
    makes the result the correctly rounded one everywhere, so every machine unscales alike.
    """
    return scale.double().reciprocal().float()


def non_finite_check_and_unscale_(grads: list[torch.Tensor], found_inf: torch.Tensor,
                                  inv_scale: torch.Tensor) -> None:
    """Multiply each tensor in ``grads`` by ``inv_scale`` in place; set ``found_inf`` to 1.0 if any
    element was inf or NaN *before* the multiplication (``found_inf`` is never reset to 0).

    The same contract as torch's private ``_amp_foreach_non_finite_check_and_unscale_``: ``grads``
    are float32/float64/float16/bfloat16 strided tensors on one device (dtypes may mix);
    ``found_inf`` and ``inv_scale`` are float32 one-element tensors on that device, of shape ``()``
    or ``(1,)``. Anything else raises torch's error, with its message (:mod:`.contract`), after
    the gradients before the refused one are done, as torch's loop leaves them. For a sparse
    tensor torch's dispatcher appends its list of backends, which is left out here; the CUDA
    messages are written from torch's CUDA kernel and compared with it only on a GPU
    (``tools/device_check.sh``).

    The check looks at the *scaled* values: with a scale below 1, ``inv_scale > 1`` can push a
    large finite gradient to inf, and that is not an overflow of the scaled gradient. The gradients
    are multiplied even when a non-finite value is found (the step will be skipped). An fp16 or
    bf16 gradient is multiplied in float32 and rounded back once.
    """
    if not grads:
        return
    device_type = grads[0].device.type
    check_unscale_scalars(found_inf, inv_scale, device_type)
    inv_scale = inv_scale.reshape(())              # a (1,)-shaped inv_scale is accepted, like torch
    bad_at, error = first_bad_grad(grads, device_type)
    for g in grads[:bad_at]:
        if not torch.isfinite(g).all():            # inf or NaN anywhere in the scaled gradient
            found_inf.fill_(1.0)
        g.mul_(inv_scale)
    if error is not None:
        raise error


def unscale_by_(grads: list[torch.Tensor], scale: torch.Tensor) -> torch.Tensor:
    """What one ``GradScaler.unscale_`` does to ``grads`` (in place) for the scale ``scale``:
    multiply by :func:`inverse_scale` with the inf/NaN check. Returns ``found_inf`` (0-dim
    float32). The reference the lesson 04 and 11 graders hold a learner's answer against."""
    found = torch.zeros((), dtype=torch.float32, device=scale.device)
    non_finite_check_and_unscale_(grads, found, inverse_scale(scale))
    return found


def _to_float32(x: float) -> float:
    """Round a Python float (a double) to the nearest float32, to inf when it overflows."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def update_rule(scale: float, growth_tracker: int, found_inf: float, growth_factor: float,
                backoff_factor: float, growth_interval: int) -> tuple[float, int]:
    """The dynamic loss-scaling rule on plain numbers: returns the new ``(scale, growth_tracker)``.

    ``scale`` is a float32 value, so the products are taken in float64 and rounded once to float32,
    as torch's kernel does. ``==``, not ``>=``: a tracker already past the interval (after
    ``set_growth_interval``) never grows the scale. A NaN ``found_inf`` counts as found.
    """
    if found_inf:                                   # some optimizer saw inf/NaN: back off
        return _to_float32(scale * backoff_factor), 0
    growth_tracker += 1                             # one more good step in a row
    if growth_tracker == growth_interval:
        grown = _to_float32(scale * growth_factor)
        return (grown if math.isfinite(grown) else scale), 0   # never grow the float32 scale to inf
    return scale, growth_tracker


def update_scale_(scale: torch.Tensor, growth_tracker: torch.Tensor, found_inf: torch.Tensor,
                  growth_factor: float, backoff_factor: float, growth_interval: int) -> torch.Tensor:
    """Apply :func:`update_rule` in place to the one-element tensors ``scale`` (float32) and
    ``growth_tracker`` (int32), shape ``()`` or ``(1,)``; returns ``scale``. Torch's
    ``_amp_update_scale_``, with its argument checks and messages.

    The tensors are read into Python, the rule applied, the results written back. Reading a CPU
    tensor is free; on a GPU it makes the CPU wait for the GPU to finish all queued work (a
    *sync*), so there the scaler uses :func:`amp_edu.scaler._fast.update_scale_`, the same rule
    written with ``torch.where`` on the device.
    """
    check_update_args(growth_factor, backoff_factor, growth_interval)
    check_update_tensors(scale, growth_tracker, found_inf)
    new_scale, new_tracker = update_rule(scale.item(), growth_tracker.item(), found_inf.item(),
                                         float(growth_factor), float(backoff_factor), int(growth_interval))
    scale.fill_(new_scale)
    growth_tracker.fill_(new_tracker)
    return scale
