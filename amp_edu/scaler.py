"""Dynamic loss scaling, written out in full: a drop-in for ``torch.amp.GradScaler``.

Why a scaler at all? fp16 gradients below 2^-24 round to zero. Multiplying the loss by a scale
``S`` multiplies every gradient by ``S`` (the chain rule is linear), lifting small gradients into
fp16's range; before the optimizer uses them we divide by ``S`` again. Too large an ``S`` and some
gradient overflows to inf (or an inf - inf makes a NaN). *Dynamic* loss scaling picks ``S`` by
trial and error, every iteration:

1. ``scale(loss)``    -- multiply the loss by ``S`` (a float32 0-dim tensor kept on the device);
2. ``unscale_(opt)``  -- multiply every gradient by ``1/S`` (computed in float64, stored as
   float32) and record whether any gradient held an inf or NaN (``found_inf``);
3. ``step(opt)``      -- run ``opt.step()`` only if ``found_inf`` is 0: a bad step is *skipped*;
4. ``update()``       -- the update rule (:func:`update_scale_`): after an overflow multiply ``S``
   by ``backoff_factor`` (0.5) and reset the *growth tracker*; otherwise count one more good
   step, and when ``growth_interval`` (2000) good steps in a row have happened multiply ``S`` by
   ``growth_factor`` (2.0), unless that would make the float32 ``S`` infinite.

Each optimizer moves through a small state machine between two ``update()`` calls::

    READY --unscale_()--> UNSCALED --step()--> STEPPED --update()--> READY
      \\_________________step() unscales first_____/

Calling ``unscale_`` twice, ``unscale_`` after ``step``, or ``step`` twice raises, because each
would divide the gradients by ``S`` twice or step on stale checks.

Everything a user can observe matches ``torch.amp.GradScaler``: the constructor and its checks,
the getters and setters, the state dict, the exception types and messages, and -- bit for bit --
the scale, the growth tracker, which steps are skipped and the parameters (``tests/test_scaler.py``
drives both side by side). Torch does steps 2 and 4 in two fused private kernels
(``_amp_foreach_non_finite_check_and_unscale_`` and ``_amp_update_scale_``); here they are
:func:`non_finite_check_and_unscale_` and :func:`update_scale_` (the rule itself, on plain
numbers, is :func:`update_rule`), written with public tensor ops. On a GPU, like torch's, they
never read a value back to Python, so the CPU does not wait for the GPU until ``step`` asks
whether to skip.

**DTensor gradients (FSDP2).** Under ``fully_shard`` every gradient is a ``DTensor`` and each rank
holds one shard of it. Torch's DTensor dispatcher has a rule for the fused check
(``found_inf_reduce_handler`` in ``torch/distributed/tensor/_dispatch.py``): run it on the local
shards, then replace ``found_inf`` by its MAX over the mesh dimensions that the group's first
gradient is sharded on (``Replicate`` dimensions are left alone), once per device-and-dtype group.
So an inf in any rank's shard makes *every* rank's ``found_inf`` 1 and every rank skips alike.
This class applies the same rule itself (:func:`max_over_mesh_`), with the same collective per
group, so its ``found_inf``, skip decisions, scale and parameters match torch's under FSDP2 too
(``tests/test_distributed_experiments.py``). FSDP's ``ShardedGradScaler`` then also *sums* the
result over the process group, so there it reads 2 on each of two ranks.
"""

from __future__ import annotations

import inspect
import math
import struct
import sys
import warnings
from collections import abc, defaultdict
from importlib.util import find_spec
from typing import Any

import numpy as np
import torch
from torch.amp import grad_scaler as _torch_grad_scaler

__all__ = ["GradScaler", "OptState", "inverse_scale", "is_dtensor", "local_tensor", "max_over_mesh_",
           "non_finite_check_and_unscale_", "update_rule", "update_scale_"]


# --------------------------------------------------------------------------------------------
# The two numerical pieces: unscale-with-check, and the update rule.
# --------------------------------------------------------------------------------------------

def inverse_scale(scale: torch.Tensor) -> torch.Tensor:
    """``1/scale`` as float32, computed in float64.

    A correctly rounded float32 division gives the same answer, but float32 division is not always
    correctly rounded (fast-math GPU builds use an approximate reciprocal); going through float64
    makes the result the correctly rounded one everywhere, so every machine unscales alike.
    """
    return scale.double().reciprocal().float()


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


# The dtypes torch's kernel is written for (AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16)).
_UNSCALABLE = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _check_one_element_float(tensor: torch.Tensor, name: str, kind: str, device_type: str) -> None:
    """torch's kernels take their scalars as 1-element float32 tensors of any shape (``()`` or
    ``(1,)``) on the gradients' device, and say so in these words."""
    if tensor.device.type != device_type:
        raise RuntimeError(f"{name} must be a {device_type.upper()} tensor.")
    if tensor.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if tensor.dtype != kind:
        raise RuntimeError(f"{name} must be a{'n int' if kind == torch.int32 else ' float'} tensor.")


def _first_bad_grad(grads: list[torch.Tensor], device_type: str,
                    uniform: bool = False) -> tuple[int, Exception | None]:
    """Index and error of the first gradient torch's kernel would refuse (it walks the list in
    order, so the gradients before it are already unscaled when it raises), or ``(len, None)``.
    A sparse tensor anywhere is refused before any work, by torch's dispatcher. ``uniform``: the
    caller grouped ``grads`` by device and dtype, so the first one speaks for all of them."""
    for g in grads:
        if g.layout != torch.strided:
            backend = {torch.sparse_coo: "Sparse", torch.sparse_csr: "SparseCsr"}.get(g.layout, str(g.layout))
            return 0, NotImplementedError(
                f"Could not run 'aten::_amp_foreach_non_finite_check_and_unscale_' with arguments from the "
                f"'{backend}{device_type.upper()}' backend.")
    for i, g in enumerate(grads[:1] if uniform else grads):
        if g.device.type != device_type:
            return i, RuntimeError(f"one of scaled_grads was not a {device_type.upper()} tensor.")
        if g.dtype not in _UNSCALABLE:
            name = g.type().removeprefix("torch.").removeprefix("cuda.").removesuffix("Tensor")  # C++ name: 'Long'
            return i, NotImplementedError(
                f'"_amp_foreach_non_finite_check_and_unscale_{device_type}" not implemented for \'{name}\'')
    return len(grads), None


def _check_and_unscale_(by_shape: dict, found_inf: torch.Tensor, inv_scale: torch.Tensor,
                        uniform: bool = False) -> None:
    """:func:`non_finite_check_and_unscale_` for gradients already grouped by shape and dtype
    (``uniform``: all of one device and dtype, see :func:`_first_bad_grad`)."""
    grads = [g for same_shape in by_shape.values() for g in same_shape]
    if not grads:
        return
    device_type = grads[0].device.type
    for tensor, name in ((inv_scale, "inv_scale"), (found_inf, "found_inf")):
        _check_one_element_float(tensor, name, torch.float32, device_type)
    inv_scale = inv_scale.reshape(())              # a (1,)-shaped inv_scale is accepted, like torch
    bad_at, error = _first_bad_grad(grads, device_type, uniform)
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
        maxima = torch._foreach_norm([g for g in grads if g.numel() > 0], math.inf)
        if maxima:
            found_inf.masked_fill_(torch.stack(maxima).mul_(0).sum().ne(0), 1.0)
    torch._foreach_mul_(grads, inv_scale)     # after the check; bf16/fp16: in float32, rounded back


def non_finite_check_and_unscale_(grads: list[torch.Tensor], found_inf: torch.Tensor,
                                  inv_scale: torch.Tensor) -> None:
    """Multiply each tensor in ``grads`` by ``inv_scale`` in place; set ``found_inf`` to 1.0 if any
    element was inf or NaN *before* the multiplication (``found_inf`` is never reset to 0).

    The same contract as torch's private ``_amp_foreach_non_finite_check_and_unscale_``: ``grads``
    are float32/float64/float16/bfloat16 strided tensors on one device (dtypes may mix);
    ``found_inf`` and ``inv_scale`` are float32 one-element tensors on that device, of shape ``()``
    or ``(1,)``. Anything else raises torch's error, with its message -- with two differences:
    for a sparse tensor torch's dispatcher appends its list of backends, which is left out here;
    and the CUDA messages are written from torch's CUDA kernel but, without a GPU at hand, not
    yet compared with it at test time (``tools/device_check.sh`` runs those tests on a GPU). The check looks at the scaled values: with a scale below 1, ``inv_scale > 1`` can
    push a large finite gradient to inf, and that is not an overflow of the *scaled* gradient.
    The gradients are multiplied even when a non-finite value is found (the step will be skipped).

    How the check works: on a GPU, ``torch._foreach_norm(grads, inf)`` gives ``max |g|`` of every
    tensor in one fused kernel, inf or NaN exactly where a tensor holds one. On a CPU that op loops
    over the tensors, and each reduction has a fixed cost that would dominate for a model's many
    small tensors; so same-shaped small tensors are stacked and summed together, and only a
    non-finite sum (rare: an overflow step) is checked element by element.
    """
    by_shape: dict[tuple, list[torch.Tensor]] = {}
    for g in grads:
        by_shape.setdefault((g.shape, g.dtype), []).append(g)     # stacking needs one dtype
    _check_and_unscale_(by_shape, found_inf, inv_scale)


def _check_and_unscale_uniform_(grads: list[torch.Tensor], found_inf: torch.Tensor,
                                inv_scale: torch.Tensor) -> None:
    """:func:`non_finite_check_and_unscale_` for gradients of one device and dtype (the scaler's
    groups): the same work, with each gradient's device and dtype not asked again."""
    by_shape: dict[torch.Size, list[torch.Tensor]] = {}
    for g in grads:
        by_shape.setdefault(g.shape, []).append(g)
    _check_and_unscale_(by_shape, found_inf, inv_scale, uniform=True)


# --------------------------------------------------------------------------------------------
# DTensor gradients (FSDP2): torch's dispatcher gives the fused check a rule of its own.
# --------------------------------------------------------------------------------------------

def _dtensor_class():
    """``torch.distributed.tensor.DTensor`` once something has imported it, else ``None``: no DTensor
    can exist before that module is loaded, so the scaler never has to import it itself."""
    return getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)


def is_dtensor(t) -> bool:
    """Is ``t`` a ``torch.distributed.tensor.DTensor`` (what FSDP2's parameters and gradients are)?"""
    dtensor = _dtensor_class()
    return dtensor is not None and isinstance(t, dtensor)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank holds: a DTensor's local shard (sharing its storage), or ``t``."""
    return t.to_local() if is_dtensor(t) else t


def _mesh_groups(dtensor) -> list:
    """The process groups over which a DTensor is split (its mesh dimensions that are not
    ``Replicate``): a ``found_inf`` computed on the local shard is MAX-reduced over them."""
    from torch.distributed.tensor import Replicate
    placements, mesh = dtensor.placements, dtensor.device_mesh
    return [mesh.get_group(d) for d, p in enumerate(placements) if not isinstance(p, Replicate)]


def max_over_mesh_(found_inf: torch.Tensor, dtensor) -> None:
    """DTensor's rule for the fused check (``found_inf_reduce_handler`` in
    ``torch/distributed/tensor/_dispatch.py``), after the local check: ``found_inf`` becomes its
    MAX over the mesh dimensions ``dtensor`` (the group's *first* gradient) is sharded on, so every
    rank holding a piece of the gradients ends with the same 0 or 1."""
    import torch.distributed as dist
    for group in _mesh_groups(dtensor):
        dist.all_reduce(found_inf, op=dist.ReduceOp.MAX, group=group)


def _refuse_mixed_(grads: list, dtensor) -> None:
    """Torch's dispatcher refuses a list that mixes DTensors with plain tensors of more than one
    element (a one-element tensor is taken as replicated), before any work is done."""
    if torch._C._get_dtensor_allow_implicit_replication():
        return
    if any(not isinstance(g, dtensor) and g.numel() != 1 for g in grads):
        raise RuntimeError(
            "aten._amp_foreach_non_finite_check_and_unscale_.default: got mixed torch.Tensor and DTensor, "
            "need to convert all torch.Tensor to DTensor before calling distributed operators! Please see "
            "https://docs.pytorch.org/docs/main/distributed.tensor.html#mixed-tensor-and-dtensor-operations "
            "for more details.")


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

    On a CPU the tensors are read into Python and written back: reading a CPU tensor is free. On a
    GPU, reading would make the CPU wait for the GPU to finish all queued work (a *sync*), so
    there the same rule is written with ``torch.where`` and runs on the device.
    """
    _check_update_args(growth_factor, backoff_factor, growth_interval)
    device_type = scale.device.type
    for tensor, name in ((growth_tracker, "growth_tracker"), (scale, "current_scale"), (found_inf, "found_inf")):
        if tensor.device.type != device_type:
            raise RuntimeError(f"{name} must be a {device_type.upper()} tensor.")
    for tensor, name in ((growth_tracker, "growth_tracker"), (scale, "current_scale"), (found_inf, "found_inf")):
        if tensor.numel() != 1:
            raise RuntimeError(f"{name} must be a 1-element tensor.")
    for tensor, name, kind in ((growth_tracker, "growth_tracker", torch.int32), (scale, "current_scale", torch.float32),
                               (found_inf, "found_inf", torch.float32)):
        _check_one_element_float(tensor, name, kind, device_type)
    if all(_reads_are_free(t.device) for t in (scale, growth_tracker, found_inf)):
        new_scale, new_tracker = update_rule(scale.item(), growth_tracker.item(), found_inf.item(),
                                             float(growth_factor), float(backoff_factor), int(growth_interval))
        scale.fill_(new_scale)
        growth_tracker.fill_(new_tracker)
        return scale
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


def _check_update_args(growth_factor, backoff_factor, growth_interval) -> None:
    """Reject what torch's argument parser rejects for ``_amp_update_scale_``, with its message:
    a float argument takes a Python or NumPy number or a 0-dim tensor; an int argument an integer
    (not a bool) or a 0-dim integer tensor. So ``set_growth_interval(1e3)`` fails at ``update()``."""
    for pos, name, value, is_int in ((4, "scale_growth_factor", growth_factor, False),
                                     (5, "scale_backoff_factor", backoff_factor, False),
                                     (6, "growth_interval", growth_interval, True)):
        if isinstance(value, torch.Tensor):
            ok = value.dim() == 0 and (not is_int or not (value.is_floating_point() or value.is_complex()
                                                          or value.dtype == torch.bool))
        elif is_int:
            ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float, np.integer, np.floating, np.bool_))
        if not ok:
            kind = type(value)
            shown = kind.__name__ if kind.__module__ == "builtins" or kind.__flags__ & (1 << 9) \
                else f"{kind.__module__}.{kind.__name__}"   # C types show their module, like torch
            raise TypeError(f"_amp_update_scale_(): argument '{name}' (position {pos}) must be "
                            f"{'int' if is_int else 'float'}, not {shown}")


# --------------------------------------------------------------------------------------------
# The scaler: bookkeeping around the two pieces above.
# --------------------------------------------------------------------------------------------

# Where one optimizer is in the current iteration (reset to READY by ``update()``):
#   READY    -- nothing done since the last update();
#   UNSCALED -- unscale_() ran: gradients are divided by S, found_inf is recorded;
#   STEPPED  -- step() ran (or was skipped).
# The enum is torch's own (``torch.amp.grad_scaler.OptState``), not a copy: code that inspects
# ``_per_optimizer_states`` (torch's tests, FSDP's ShardedGradScaler) compares stages by identity.
OptState = _torch_grad_scaler.OptState


def _refresh_per_optimizer_state() -> dict[str, Any]:
    # a module-level function (not a lambda) so that the defaultdict can be pickled
    return {"stage": OptState.READY, "found_inf_per_device": {}}


def _all_tensors(items) -> bool:
    """Is every item a tensor? (asked of the few distinct types, not of each item)"""
    return all(issubclass(kind, torch.Tensor) for kind in set(map(type, items)))


class _PerDevice:
    """A *copy* of one tensor for each device that asks for it (model-parallel gradients), made
    lazily. A copy even on the tensor's own device, as torch does: ``l1, l2 = scaler.scale([a, b])``
    saves the scale for backward, and a later ``load_state_dict`` or ``update(new_scale)`` writes
    into the scaler's own tensor in place -- a shared tensor would make that backward fail with
    "modified by an inplace operation"."""

    def __init__(self, master: torch.Tensor) -> None:
        self.master = master
        self.copies: dict[torch.device, torch.Tensor] = {}

    def get(self, device: torch.device) -> torch.Tensor:
        if device not in self.copies:
            self.copies[device] = self.master.to(device=device, non_blocking=True, copy=True)
        return self.copies[device]


class GradScaler:
    """Dynamic loss scaling, a drop-in for ``torch.amp.GradScaler``::

        scaler = GradScaler("cuda")                # or "cpu"
        for x, y in data:
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()          # gradients are S times too big
            scaler.unscale_(opt)                   # optional: only to look at / clip true gradients
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)                       # unscales if needed; skips the step on inf/NaN
            scaler.update()                        # backoff or growth of S

    Args (defaults as torch's):
        device: ``"cuda"`` (default) or ``"cpu"``; with ``"cuda"`` on a machine without CUDA the
            scaler warns and disables itself, exactly as torch's does.
        init_scale: the first ``S``, 2^16. It is usually too big: the first steps overflow and
            are skipped while ``S`` halves down to a value that fits. That is expected.
        growth_factor: ``S`` is multiplied by it after ``growth_interval`` good steps (must be > 1).
        backoff_factor: ``S`` is multiplied by it after a step with inf/NaN (must be < 1).
        growth_interval: good steps in a row before ``S`` grows.
        enabled: ``False`` turns every method into a no-op (``step`` just calls ``opt.step()``).
    """

    # unscale_(): the shape of the found_inf it creates, and whether fp16 gradients are allowed
    _FOUND_INF_SHAPE: tuple[int, ...] = ()
    _UNSCALE_ALLOWS_FP16 = False

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled and not (torch.cuda.is_available() or find_spec("torch_xla")):
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                          stacklevel=2)
            self._enabled = False
        if not self._enabled:
            return          # a disabled scaler keeps no state at all (like torch's)
        if growth_factor <= 1.0:
            raise AssertionError("The growth factor must be > 1.0.")
        if backoff_factor >= 1.0:
            raise AssertionError("The backoff factor must be < 1.0.")
        self._init_scale = init_scale
        self._scale: torch.Tensor | None = None            # created by the first scale() call,
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._init_growth_tracker = 0
        self._growth_tracker: torch.Tensor | None = None   # on the device of the first output
        self._per_optimizer_states: dict[int, dict[str, Any]] = defaultdict(_refresh_per_optimizer_state)

    # ---- the scale and growth tracker live on the device, created lazily -----------------------

    def _lazy_init_scale_growth_tracker(self, device: torch.device) -> None:
        if self._growth_tracker is not None:
            raise AssertionError("_growth_tracker initialized before _scale")
        self._scale = torch.full((), self._init_scale, dtype=torch.float32, device=device)
        self._growth_tracker = torch.full((), self._init_growth_tracker, dtype=torch.int32, device=device)

    def _check_scale_growth_tracker(self, funcname: str) -> tuple[torch.Tensor, torch.Tensor]:
        fix = "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration."
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + fix)
        if self._growth_tracker is None:
            raise AssertionError(f"Attempted {funcname} but _growth_tracker is None.  " + fix)
        return self._scale, self._growth_tracker

    # ---- 1. scale -----------------------------------------------------------------------------

    def scale(self, outputs):
        """``outputs * S`` for a tensor, or for each tensor in a (nested) list, tuple or iterable.

        Lists and tuples come back as lists and tuples; any other iterable as a lazy ``map``.
        """
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):      # the common case: one loss
            self._check_output(outputs)
            if self._scale is None:
                self._lazy_init_scale_growth_tracker(outputs.device)
            return self._scaled(outputs, self._scale.to(device=outputs.device, non_blocking=True))

        per_device: list[_PerDevice] = []          # made when the first tensor is met

        def apply(value):
            if isinstance(value, torch.Tensor):
                self._check_output(value)
                if not per_device:
                    if self._scale is None:
                        self._lazy_init_scale_growth_tracker(value.device)
                    per_device.append(_PerDevice(self._scale))
                return self._scaled(value, per_device[0].get(value.device))
            if isinstance(value, abc.Iterable):
                scaled = map(apply, value)
                return type(value)(scaled) if isinstance(value, (list, tuple)) else scaled
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply(outputs)

    def _check_output(self, output: torch.Tensor) -> None:
        """Refuse an output this scaler cannot scale: none here (a subclass may refuse devices)."""

    @staticmethod
    def _scaled(output: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """One output times ``S``: type promotion decides the dtype (an fp16 loss becomes fp32)."""
        return output * scale

    # ---- 2. unscale ---------------------------------------------------------------------------

    def _unscale_grads_(self, optimizer, inv_scale: torch.Tensor, found_inf: torch.Tensor,
                        allow_fp16: bool) -> dict[torch.device, torch.Tensor]:
        """Unscale ``optimizer``'s gradients, grouped by device and dtype (one fused pass per group);
        returns ``{device: found_inf}``."""
        inv_scales, found_infs = _PerDevice(inv_scale), _PerDevice(found_inf)
        # {device: {dtype: [grads]}}: one fused check-and-unscale per device and dtype, in the
        # order torch visits them (so a refused dtype raises after the same groups are done)
        groups: dict[torch.device, dict[torch.dtype, list[torch.Tensor]]] = {}
        own_check = type(self)._check_param is GradScaler._check_param
        last_key, same = None, None          # most gradients share the previous one's group
        with torch.no_grad():
            for group in optimizer.param_groups:
                params = group["params"]
                # the check is a type test: ask the few distinct types, and only if one fails
                # check each parameter in turn (so errors come in torch's order)
                check = None if own_check and _all_tensors(params) else self._check_param
                for param in params:
                    if check is not None:
                        check(param)
                    grad = param.grad
                    if grad is None:
                        continue
                    dtype = grad.dtype
                    if dtype is torch.float16 and not allow_fp16:
                        # fp16 *parameters* (model.half()) give fp16 gradients: unscaling them
                        # in fp16 would underflow -- the master weights must be fp32.
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    if grad.is_sparse:
                        # duplicate indices add up when coalesced, which may overflow fp16
                        if dtype is torch.float16:
                            param.grad = grad = self._coalesce_fp16(grad)
                        grad = grad._values()
                    key = (grad.device, dtype)
                    if key != last_key:
                        last_key, same = key, groups.setdefault(key[0], {}).setdefault(dtype, [])
                    same.append(grad)
            for device, by_dtype in groups.items():
                for grads in by_dtype.values():
                    self._check_and_unscale_group_(grads, found_infs.get(device), inv_scales.get(device))
        return found_infs.copies

    @staticmethod
    def _check_param(param) -> None:
        if not isinstance(param, torch.Tensor):
            raise AssertionError(f"expected param to be torch.Tensor, got {type(param).__name__}")

    @staticmethod
    def _coalesce_fp16(grad: torch.Tensor) -> torch.Tensor:
        """A sparse fp16 gradient with its duplicate indices summed."""
        return grad.coalesce()

    def _check_and_unscale_group_(self, grads: list[torch.Tensor], found_inf: torch.Tensor,
                                  inv_scale: torch.Tensor) -> None:
        """Check and unscale gradients of one device and dtype: what torch does in one call of its
        fused kernel. For DTensor gradients (FSDP2) torch's dispatcher runs that call on each
        rank's local shards and then MAX-reduces ``found_inf`` over the mesh; so does this."""
        dtensor = _dtensor_class()
        # the few distinct types of the gradients, not an isinstance per gradient (5x cheaper)
        if dtensor is None or not any(issubclass(t, dtensor) for t in set(map(type, grads))):
            _check_and_unscale_uniform_(grads, found_inf, inv_scale)
            return
        _refuse_mixed_(grads, dtensor)
        _check_and_unscale_uniform_([local_tensor(g) for g in grads], found_inf, inv_scale)
        self._agree_within_mesh_(found_inf, grads[0])

    def _agree_within_mesh_(self, found_inf: torch.Tensor, first_grad) -> None:
        """DTensor's rule (:func:`max_over_mesh_`): MAX of ``found_inf`` over the mesh dimensions
        the group's first gradient is sharded on."""
        max_over_mesh_(found_inf, first_grad)

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by ``S`` in place, and record whether any was inf/NaN.

        Call it before anything that needs the true gradients, e.g. ``clip_grad_norm_``; at most
        once per optimizer per iteration, after all gradients are accumulated. ``step`` calls it
        if you did not.
        """
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        if self._scale.device == torch.device("mps:0"):   # no float64 on Apple GPUs
            inv_scale = self._scale.reciprocal()
        else:
            inv_scale = inverse_scale(self._scale)
        found_inf = torch.full(self._FOUND_INF_SHAPE, 0.0, dtype=torch.float32, device=self._scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf,
                                                             self._UNSCALE_ALLOWS_FP16)
        state["stage"] = OptState.UNSCALED

    # ---- 3. step ------------------------------------------------------------------------------

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless ``unscale_`` ran), then ``optimizer.step(*args, **kwargs)`` if no gradient
        was inf/NaN; returns what ``optimizer.step`` returned, or ``None`` for a skipped step.

        A ``closure=`` keyword is refused: a closure re-evaluates the loss inside ``step``, after
        the scaler has already decided on the gradients of the previous evaluation.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            return self._step_amp_aware(optimizer, state, *args, **kwargs)
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if len(state["found_inf_per_device"]) == 0:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = self._maybe_opt_step(optimizer, state, *args, **kwargs)
        state["stage"] = OptState.STEPPED
        return retval

    def _maybe_opt_step(self, optimizer, state, *args, **kwargs):
        # the one place the scaler waits for the device: is this step skipped?
        if not sum(v.item() for v in state["found_inf_per_device"].values()):
            return optimizer.step(*args, **kwargs)
        return None

    def _step_amp_aware(self, optimizer, state, *args, **kwargs):
        """Optimizers with ``_step_supports_amp_scaling`` (the fused Adam/AdamW/SGD) unscale and
        skip inside their own fused kernel: hand them ``grad_scale`` and ``found_inf`` attributes
        (or, for old-style optimizers whose ``step`` takes ``grad_scaler=``, the scaler itself)."""
        takes_scaler = "grad_scaler" in inspect.signature(optimizer.step).parameters
        if takes_scaler:
            warnings.warn(
                "GradScaler is going to stop passing itself as a keyword argument to the passed "
                "optimizer. In the near future GradScaler registers `grad_scale: Tensor` and "
                "`found_inf: Tensor` to the passed optimizer and let the optimizer use them directly.",
                FutureWarning, stacklevel=3)
            kwargs.update({"grad_scaler": self})
        else:
            if state["stage"] is OptState.READY:
                self._check_inf_per_device(optimizer)          # check only: the optimizer unscales
            found_inf = sum(t.to(self._scale.device, non_blocking=True)
                            for t in state["found_inf_per_device"].values())
            if state["stage"] == OptState.UNSCALED:            # gradients already divided by S
                optimizer.grad_scale = getattr(optimizer, "grad_scale", None)
            else:
                optimizer.grad_scale = self._get_scale_async() * getattr(optimizer, "grad_scale", 1)
            optimizer.found_inf = found_inf
        retval = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        if not takes_scaler:
            del optimizer.grad_scale
            del optimizer.found_inf
        return retval

    # ---- 4. update ----------------------------------------------------------------------------

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Apply the update rule (:func:`update_scale_`) with the inf/NaN checks of every optimizer
        stepped this iteration, or set ``S`` to ``new_scale`` (a float, or a one-element tensor on
        the scaler's device that does not require grad; it is copied). Call once per iteration,
        after every ``step``. Nothing stops ``S`` from falling below 1: a scale that keeps falling
        means the model, loss or data makes inf/NaN by itself.
        """
        if not self._enabled:
            return
        scale, tracker = self._check_scale_growth_tracker("update")
        if new_scale is not None:
            if isinstance(new_scale, float):
                scale.fill_(new_scale)
            else:
                reason = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                          "torch.FloatTensor with requires_grad=False.")
                if new_scale.device.type != self._device or new_scale.numel() != 1 or new_scale.requires_grad is True:
                    raise AssertionError(reason)
                scale.copy_(new_scale)
        else:
            found_infs = [f.to(device=scale.device, non_blocking=True)
                          for state in self._per_optimizer_states.values()
                          for f in state["found_inf_per_device"].values()]
            if len(found_infs) == 0:
                raise AssertionError("No inf checks were recorded prior to update.")
            found_inf = found_infs[0]
            for more in found_infs[1:]:
                found_inf += more       # in place, like torch: counts optimizers that overflowed
            self._update_scale_(scale, tracker, found_inf)
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _update_scale_(self, scale: torch.Tensor, tracker: torch.Tensor, found_inf: torch.Tensor) -> None:
        update_scale_(scale, tracker, found_inf, self._growth_factor, self._backoff_factor, self._growth_interval)

    # ---- getters and setters ------------------------------------------------------------------

    def _get_scale_async(self) -> torch.Tensor | None:
        """``S`` as the device tensor, without reading it (no sync); ``None`` before the first
        ``scale()``. Private in torch too, but part of the old ``grad_scaler=`` protocol: an
        optimizer handed the scaler asks it for the scale this way."""
        return self._scale

    def get_scale(self) -> float:
        """``S`` as a Python float (1.0 when disabled). Reads the device: a sync on a GPU."""
        if not self._enabled:
            return 1.0
        scale = self._get_scale_async()
        return self._init_scale if scale is None else scale.item()

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else self._growth_tracker.item()

    def is_enabled(self) -> bool:
        return self._enabled

    def _found_inf_per_device(self, optimizer) -> dict[torch.device, torch.Tensor]:
        return self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]

    def _check_inf_per_device(self, optimizer) -> dict[torch.device, torch.Tensor]:
        """Check ``optimizer``'s gradients for inf/NaN without unscaling them (fp16 allowed)."""
        scale, _ = self._check_scale_growth_tracker("_check_inf_per_device")
        one = torch.full((), 1.0, dtype=torch.float32, device=scale.device)
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=scale.device)
        state = self._per_optimizer_states[id(optimizer)]
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, one, found_inf, True)
        return state["found_inf_per_device"]

    # ---- checkpointing ------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval``, ``_growth_tracker``
        (Python numbers; ``{}`` when disabled). Save it with the model and optimizer, after
        ``update()``: a resumed run without it restarts at 2^16 and skips steps again."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (ours or torch's: the keys are the same)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale.fill_(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(state_dict["_growth_tracker"])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._enabled:
            if len(self._per_optimizer_states) != 0:
                raise AssertionError("A GradScaler instance may only be pickled at the beginning "
                                     "of an iteration, or at the end after scaler.update().")
            # pickle the numbers, not the tensors; the copy re-creates them lazily
            state["_init_scale"] = self.get_scale()
            state["_init_growth_tracker"] = self._get_growth_tracker()
            state["_scale"] = None
            state["_growth_tracker"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
