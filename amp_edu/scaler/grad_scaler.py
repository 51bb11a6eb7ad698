"""The GradScaler itself: a small state machine around the two kernels.

The numbers are done by :mod:`amp_edu.scaler.kernels` (readable) through their fast twins in
:mod:`amp_edu.scaler._fast`; DTensor gradients follow :mod:`amp_edu.scaler.dtensor`. What this
class adds is the bookkeeping torch's ``torch/amp/grad_scaler.py`` does: the scale and growth
tracker living on the device, created lazily by the first ``scale()``; one state per optimizer
(READY -> UNSCALED -> STEPPED -> READY, see the package docstring); the optimizers that unscale
inside their own fused kernel; the getters, setters and the state dict.
"""

from __future__ import annotations

import inspect
import warnings
from collections import abc, defaultdict
from importlib.util import find_spec
from typing import Any

import torch
from torch.amp import grad_scaler as _torch_grad_scaler

from . import _fast
from .dtensor import dtensor_class, local_tensor, max_over_mesh_, refuse_mixed_
from .kernels import inverse_scale

__all__ = ["GradScaler", "OptState"]

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
                check = None if own_check and _fast.all_tensors(params) else self._check_param
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
        dtensor = dtensor_class()
        # the few distinct types of the gradients, not an isinstance per gradient (5x cheaper)
        if dtensor is None or not any(issubclass(t, dtensor) for t in set(map(type, grads))):
            _fast.check_and_unscale_uniform_(grads, found_inf, inv_scale)
            return
        refuse_mixed_(grads, dtensor)
        _fast.check_and_unscale_uniform_([local_tensor(g) for g in grads], found_inf, inv_scale)
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
        _fast.update_scale_(scale, tracker, found_inf, self._growth_factor, self._backoff_factor,
                            self._growth_interval)

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
