"""The scaler's fast paths: :mod:`amp_edu.scaler.kernels` tuned against torch's overhead.

Not lesson code. Each function here gives exactly what its readable twin in :mod:`.kernels`
gives -- the same bits in every gradient, the same ``found_inf``, the same scale and tracker, the
same errors after the same partial work -- and ``tests/scaler/test_fastpath.py`` proves it on
random gradient lists (every dtype, inf/NaN anywhere, sums that overflow from finite terms,
empty tensors, refused inputs). What they change is only the cost:

* **CPU, the check.** ``torch.isfinite(g).all()`` per gradient has a fixed cost per call that
  dominates for a model's many small tensors. Same-shaped small gradients are stacked and summed
  (a sum is finite only if every term is), and only a non-finite sum -- rare, an overflow step
  -- is checked element by element.
* **GPU, the check.** Reading ``isfinite(...).all()`` into Python makes the CPU wait for the GPU.
  One fused ``torch._foreach_norm(grads, inf)`` gives ``max |g|`` per tensor, inf or NaN exactly
  where a tensor holds one, and ``found_inf`` is set on the device with ``masked_fill_``.
* **GPU, the update.** The rule written with ``torch.where``: every branch computed, nothing read.
* **Grouping.** The scaler hands over gradients already grouped by device and dtype, so their
  device and dtype are asked once per group (``uniform``).
"""

from __future__ import annotations

import math

import torch

from .contract import check_unscale_scalars, check_update_args, check_update_tensors, first_bad_grad
from . import kernels

__all__ = ["non_finite_check_and_unscale_", "check_and_unscale_uniform_", "update_scale_", "all_tensors"]

# On a CPU, same-shaped small gradients are stacked into buffers of fewer than this many elements,
# each reduced by one call; a larger gradient is reduced on its own, in place. 2^15 is torch's
# parallel grain: a smaller op runs on one thread and never wakes the thread pool (which can cost
# milliseconds on a busy machine).
_CPU_CHUNK = (1 << 15) - 1


def _cpu_parts(same_shape: list[torch.Tensor]) -> list[torch.Tensor]:
    """``same_shape`` (tensors of one shape and dtype) as a few tensors to reduce: stacked groups of
    small tensors (one reduction per group instead of one per tensor), or each large one as is."""
    n = same_shape[0].numel()
    if n == 0:
        return []                                     # nothing to check
    if n >= _CPU_CHUNK:
        return list(same_shape)
    per = _CPU_CHUNK // n
    return [torch.stack(same_shape[i:i + per]) if len(same_shape[i:i + per]) > 1 else same_shape[i]
            for i in range(0, len(same_shape), per)]


def _cpu_has_non_finite(by_shape: dict) -> bool:
    """Does any gradient in ``by_shape`` (on the CPU) hold inf or NaN?

    Reading a CPU tensor is free, so ask a cheap question first: a sum is finite only if every
    term is (inf and NaN propagate; +inf and -inf give NaN). A non-finite sum may still come from
    finite terms that overflow together, so only then ask the exact, dearer question.
    """
    parts = [part for same_shape in by_shape.values() for part in _cpu_parts(same_shape)]
    if not parts:
        return False
    if math.isfinite(torch.stack([part.sum() for part in parts]).sum().item()):
        return False
    return not all(torch.isfinite(part).all() for part in parts)


def _reads_are_free(device: torch.device) -> bool:
    """Reading a tensor's value into Python costs nothing on a CPU; on a GPU it makes the CPU wait
    until the GPU has finished all the work queued so far (a *sync*), so the scaler avoids it."""
    return device.type == "cpu"


def _check_and_unscale_(by_shape: dict, found_inf: torch.Tensor, inv_scale: torch.Tensor,
                        uniform: bool = False) -> None:
    """:func:`non_finite_check_and_unscale_` for gradients already grouped by shape and dtype
    (``uniform``: all of one device and dtype, see :func:`amp_edu.scaler.contract.first_bad_grad`)."""
    grads = [g for same_shape in by_shape.values() for g in same_shape]
    if not grads:
        return
    device_type = grads[0].device.type
    check_unscale_scalars(found_inf, inv_scale, device_type)
    inv_scale = inv_scale.reshape(())              # a (1,)-shaped inv_scale is accepted, like torch
    bad_at, error = first_bad_grad(grads, device_type, uniform)
    if error is not None:
        good: dict = {}
        for g in grads[:bad_at]:
            good.setdefault((g.shape, g.dtype), []).append(g)
        _check_and_unscale_(good, found_inf, inv_scale)
        raise error
    if _reads_are_free(grads[0].device):
        if _cpu_has_non_finite(by_shape):
            found_inf.fill_(1.0)
    else:
        # GPU: no value may be read back (that would make the CPU wait for the GPU). One fused
        # multi-tensor kernel gives max |g| per tensor, inf or NaN where a tensor has one; and
        # x * 0 is 0 for a finite x but NaN for inf and NaN, so the sum below is 0 or NaN.
        nonempty = [g for g in grads if g.numel() > 0]       # _foreach_norm refuses an empty list
        if nonempty:
            maxima = torch._foreach_norm(nonempty, math.inf)
            found_inf.masked_fill_(torch.stack(maxima).mul_(0).sum().ne(0), 1.0)
    torch._foreach_mul_(grads, inv_scale)     # after the check; bf16/fp16: in float32, rounded back


def non_finite_check_and_unscale_(grads: list[torch.Tensor], found_inf: torch.Tensor,
                                  inv_scale: torch.Tensor) -> None:
    """:func:`amp_edu.scaler.kernels.non_finite_check_and_unscale_`, fast (see the module docstring)."""
    by_shape: dict[tuple, list[torch.Tensor]] = {}
    for g in grads:
        by_shape.setdefault((g.shape, g.dtype), []).append(g)     # stacking needs one dtype
    _check_and_unscale_(by_shape, found_inf, inv_scale)


def check_and_unscale_uniform_(grads: list[torch.Tensor], found_inf: torch.Tensor,
                                inv_scale: torch.Tensor) -> None:
    """:func:`non_finite_check_and_unscale_` for gradients of one device and dtype (the scaler's
    groups): the same work, with each gradient's device and dtype not asked again."""
    by_shape: dict[torch.Size, list[torch.Tensor]] = {}
    for g in grads:
        by_shape.setdefault(g.shape, []).append(g)
    _check_and_unscale_(by_shape, found_inf, inv_scale, uniform=True)


def update_scale_(scale: torch.Tensor, growth_tracker: torch.Tensor, found_inf: torch.Tensor,
                  growth_factor: float, backoff_factor: float, growth_interval: int) -> torch.Tensor:
    """:func:`amp_edu.scaler.kernels.update_scale_`, without a sync on a GPU: on a CPU (reads are
    free) the readable version itself, elsewhere :func:`_update_scale_on_device_`."""
    if all(_reads_are_free(t.device) for t in (scale, growth_tracker, found_inf)):
        return kernels.update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                                     growth_interval)
    check_update_args(growth_factor, backoff_factor, growth_interval)
    check_update_tensors(scale, growth_tracker, found_inf)
    return _update_scale_on_device_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                                    growth_interval)


def _update_scale_on_device_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """:func:`update_rule` without reading anything back: every branch is computed, ``where`` picks."""
    found = found_inf.ne(0)                                         # NaN != 0: NaN counts as found
    counted = growth_tracker + 1
    grow = counted.eq(growth_interval).logical_and_(found.logical_not())
    wide = scale.double()
    grown = (wide * growth_factor).float()
    backed_off = (wide * backoff_factor).float()
    grown_ok = grow.logical_and(grown.mul(0).eq(0))                  # finite: x*0 == 0; inf*0 is NaN
    scale.copy_(torch.where(found, backed_off, torch.where(grown_ok, grown, scale)))
    growth_tracker.copy_(torch.where(found.logical_or(grow), 0, counted))
    return scale


def all_tensors(items) -> bool:
    """Is every item a tensor? (asked of the few distinct types, not of each item)"""
    return all(issubclass(kind, torch.Tensor) for kind in set(map(type, items)))
