"""A loss scaler for sharded gradients: a drop-in for torch's ``ShardedGradScaler``.

With FSDP each rank holds only its **shard** of every gradient. A loss scaler that checks for
inf/NaN in what it holds sees only that shard, so after an overflow that landed in rank 1's shard,
rank 1 skips the step while rank 0 takes it -- and from then on the ranks' weights differ (the
lesson measures the drift with :class:`LocalShardGradScaler`, the scaler with exactly that bug).
The fix is one collective: each rank's ``found_inf`` is **all-reduced** (summed) over the ranks
before anyone decides, so every rank skips or steps together and updates its scale alike.

What torch does, and so what this class does (``torch/distributed/fsdp/sharded_grad_scaler.py``):

* ``scale(loss)`` casts the scaled loss back to the loss's dtype (FSDP's mixed precision may
  hand back an fp16/bf16 loss);
* ``unscale_`` allows fp16 gradients (the parameters may be fp16 under FSDP), checks and unscales
  each rank's local tensors, then ``all_reduce``s (SUM) every ``found_inf`` over
  ``process_group``; a rank with no gradient at all still contributes a 0 -- it must take part in
  the collective or the others wait forever;
* FSDP2's gradients are DTensors; torch's DTensor dispatch already turns the fused check into
  "local check, then MAX over the sharded mesh dimensions" (``found_inf_reduce_handler`` in
  ``torch/distributed/tensor/_dispatch.py``); the course's ``GradScaler`` applies that rule
  itself, on ``grad.to_local()``, and this class inherits it -- so after the SUM below an inf
  anywhere reads ``found_inf`` = 2 on each of two ranks, exactly as torch's classes compose;
* ``update`` on a CPU applies its own rule on the tensors (``_amp_update_scale_cpu_``): a
  ``found_inf >= 1`` backs off; growth after ``growth_interval`` good steps with no guard against
  a float32 overflow of the scale. On other devices the fused rule
  (:func:`amp_edu.scaler.update_scale_`) runs.

Everything else -- the state machine, ``step``, the state dict, the errors -- is the course's
from-scratch :class:`amp_edu.scaler.GradScaler`, which this class extends. ``tests/
test_distributed_scaler.py`` runs it beside torch's under FSDP2 with injected infs in two
processes and compares scales, skip decisions and parameters bit for bit.
"""

from __future__ import annotations

from collections import abc, defaultdict
from typing import Any

import torch
import torch.distributed as dist

from ..scaler import GradScaler, OptState, inverse_scale, is_dtensor, local_tensor, update_scale_

# local_tensor and is_dtensor live in amp_edu.scaler; re-exported here for older imports
__all__ = ["ShardedGradScaler", "LocalShardGradScaler", "local_tensor", "is_dtensor"]


def _is_supported_device(tensor: torch.Tensor) -> bool:
    return tensor.is_cuda or tensor.device.type in ("xla", "cpu", "hpu", "mtia", "xpu",
                                                     torch._C._get_privateuse1_backend_name())


def _refresh_per_optimizer_state() -> dict[str, Any]:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class _OnDevice:
    """``master`` copied lazily to each device that asks (CPU-offloaded shards included)."""

    def __init__(self, master: torch.Tensor) -> None:
        if not _is_supported_device(master):
            raise AssertionError(f"Expected supported device, got {master.device}")
        self.master = master
        self.copies: dict[torch.device, torch.Tensor] = {}

    def get(self, device: torch.device) -> torch.Tensor:
        if device not in self.copies:
            self.copies[device] = self.master.to(device=device, non_blocking=True, copy=True) \
                if device != self.master.device else self.master
        return self.copies[device]


class ShardedGradScaler(GradScaler):
    """Dynamic loss scaling whose skip decision agrees across ranks; a drop-in for
    ``torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler``::

        scaler = ShardedGradScaler("cpu")        # "cuda" (the default) on GPUs
        for x, y in data:
            opt.zero_grad()
            loss = loss_fn(fsdp_model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)                     # unscale_: local check + all-reduce of found_inf
            scaler.update()

    Args are torch's, in torch's order (note: ``backoff_factor`` before ``growth_factor``, unlike
    ``GradScaler``); ``process_group`` is the group the inf checks are summed over (the default
    group when ``None``).
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, backoff_factor: float = 0.5,
                 growth_factor: float = 2.0, growth_interval: int = 2000, enabled: bool = True,
                 process_group: dist.ProcessGroup | None = dist.group.WORLD) -> None:
        super().__init__(device, init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)
        if self._enabled:
            self.process_group = process_group
            self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    # ---- 1. scale: the scaled loss keeps the loss's dtype ---------------------------------------

    def scale(self, outputs):
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):
            if not _is_supported_device(outputs):
                raise AssertionError(f"Expected supported device, got {outputs.device}")
            if self._scale is None:
                self._lazy_init_scale_growth_tracker(outputs.device)
            # a bf16/fp16 loss (FSDP's output dtype) stays bf16/fp16: S * loss may overflow fp16!
            return (outputs * self._scale.to(device=outputs.device, non_blocking=True)).type(outputs.dtype)

        stash: list[_OnDevice] = []

        def apply(val):
            if isinstance(val, torch.Tensor):
                if not _is_supported_device(val):
                    raise AssertionError(f"Expected supported device, got {val.device}")
                if not stash:
                    if self._scale is None:
                        self._lazy_init_scale_growth_tracker(val.device)
                    stash.append(_OnDevice(self._scale))
                return (val * stash[0].get(val.device)).type(val.dtype)
            if isinstance(val, abc.Iterable):
                scaled = map(apply, val)
                return type(val)(scaled) if isinstance(val, (list, tuple)) else scaled
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply(outputs)

    # ---- 2. unscale: check the local shards, then agree ----------------------------------------

    def _unscale_grads_(self, optimizer, inv_scale: torch.Tensor, found_inf: torch.Tensor,
                        allow_fp16: bool = True) -> dict[torch.device, torch.Tensor]:
        inv_scales, found_infs = _OnDevice(inv_scale), _OnDevice(found_inf)
        groups: dict[tuple, list] = defaultdict(list)       # (device, dtype) -> [(grad, local)]
        with torch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    if not allow_fp16 and param.grad.dtype == torch.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    if param.grad.is_sparse:
                        if param.grad.dtype is torch.float16:   # coalesce has no fp16 kernel
                            param.grad = param.grad.type(torch.float32).coalesce().type(torch.float16)
                        to_unscale = param.grad._values()
                    else:
                        to_unscale = param.grad
                    groups[(to_unscale.device, to_unscale.dtype)].append(to_unscale)
            for (device, _), grads in groups.items():
                # the local check, and for DTensor gradients the MAX over the mesh (as torch's dispatcher)
                self._check_and_unscale_group_(grads, found_infs.get(device), inv_scales.get(device))
        # a rank with no gradients (an empty shard) still needs a found_inf to take part in the
        # all-reduce below: without it the other ranks would wait for it forever
        if not found_infs.copies:
            found_infs.get(self._scale.device)
        return found_infs.copies

    def _agree_across_ranks_(self, found_infs: dict) -> None:
        """SUM every rank's ``found_inf`` over ``process_group``: nonzero on every rank if any rank
        saw an inf/NaN. A CPU-offloaded ``found_inf`` is reduced on the scaler's device (NCCL
        cannot reduce CPU tensors) and copied back."""
        works, on_cpu, moved = [], [], []
        for found_inf in found_infs.values():
            if self._device != "cpu" and found_inf.device.type == "cpu":
                on_cpu.append(found_inf)
                moved.append(found_inf.to(self._device))
                works.append(dist.all_reduce(moved[-1], async_op=True, group=self.process_group))
            else:
                works.append(dist.all_reduce(found_inf, async_op=True, group=self.process_group))
        for work in works:
            work.wait()
        if on_cpu:
            torch._foreach_copy_(on_cpu, moved)

    def unscale_(self, optimizer) -> None:
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = inverse_scale(self._scale)
        found_inf = torch.full((1,), 0.0, dtype=torch.float32, device=self._scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, True)
        state["stage"] = OptState.UNSCALED
        self._agree_across_ranks_(state["found_inf_per_device"])

    # ---- 4. update: torch's sharded CPU rule ---------------------------------------------------

    def _update_scale_cpu_(self, found_inf: torch.Tensor) -> None:
        """The rule torch's ``ShardedGradScaler`` applies on a CPU, with the same tensor ops (so
        the same float32 roundings): a summed ``found_inf >= 1`` backs off; otherwise count a good
        step and grow at ``growth_interval`` -- without ``GradScaler``'s guard against growing
        the scale to inf."""
        if found_inf.item() >= 1.0:
            self._scale *= self._backoff_factor
            self._growth_tracker.fill_(0)
        else:
            successful = self._growth_tracker + 1
            if successful == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker.fill_(0)
            else:
                self._growth_tracker = successful

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        if not self._enabled:
            return
        if new_scale is not None:
            super().update(new_scale)
            return
        scale, tracker = self._check_scale_growth_tracker("update")
        found_infs = [f.to(device=scale.device, non_blocking=True)
                      for state in self._per_optimizer_states.values()
                      for f in state["found_inf_per_device"].values()]
        if len(found_infs) == 0:
            raise AssertionError("No inf checks were recorded prior to update.")
        found_inf = found_infs[0]
        for more in found_infs[1:]:
            found_inf += more
        if scale.device.type == "cpu":
            self._update_scale_cpu_(found_inf)
        else:
            update_scale_(scale, tracker, found_inf, self._growth_factor, self._backoff_factor,
                          self._growth_interval)
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)


class LocalShardGradScaler(ShardedGradScaler):
    """**The bug, on purpose**: a sharded scaler whose inf check sees only this rank's shard.

    It unscales each rank's local shards exactly as :class:`ShardedGradScaler` does but never
    tells the other ranks what it found: the rank whose shard overflowed skips the step and backs
    off its scale; the others step with their (finite) shards and keep theirs. Parameters and
    scales drift apart from that step on. For the lesson only.
    """

    def _agree_within_mesh_(self, found_inf, dtensor_grad) -> None:
        pass                                   # keep the local answer

    def _agree_across_ranks_(self, found_infs) -> None:
        pass                                   # ... and tell no one
