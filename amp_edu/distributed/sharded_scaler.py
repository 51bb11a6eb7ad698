"""A loss scaler for sharded gradients: a drop-in for torch's ``ShardedGradScaler``.

With FSDP each rank holds only its **shard** of every gradient. A loss scaler that checks for
inf/NaN in what it holds sees only that shard, so after an overflow that landed in rank 1's shard,
rank 1 skips the step while rank 0 takes it -- each rank updates its own shard, so the model
the shards form together is updated on two schedules and drifts away from the correctly trained
one (the lesson measures the drift with :class:`LocalShardGradScaler`, the scaler with exactly
that bug).
The fix is one collective: each rank's ``found_inf`` is **all-reduced** (summed) over the ranks
before anyone decides, so every rank skips or steps together and updates its scale alike.

What torch does, and so what this class does (``torch/distributed/fsdp/sharded_grad_scaler.py``):

* ``scale(loss)`` casts the scaled loss back to the loss's dtype (FSDP's mixed precision may
  hand back an fp16/bf16 loss; lines 142-148 of that file in torch 2.13);
* ``unscale_`` allows fp16 gradients (the parameters may be fp16 under FSDP), checks and unscales
  each rank's local tensors, then ``all_reduce``s (SUM) every ``found_inf`` over
  ``process_group`` (lines 263-286); a rank with no gradient at all still contributes a 0 -- it
  must take part in the collective or the others wait forever (lines 226-232);
* FSDP2's gradients are DTensors; torch's DTensor dispatch already turns the fused check into
  "local check, then MAX over the sharded mesh dimensions" (``found_inf_reduce_handler`` in
  ``torch/distributed/tensor/_dispatch.py``); the course's ``GradScaler`` applies that rule
  itself, on ``grad.to_local()``, and this class inherits it -- so after the SUM below an inf
  anywhere reads ``found_inf`` = 2 on each of two ranks, exactly as torch's classes compose;
* ``update`` on a CPU applies its own rule on the tensors (``_amp_update_scale_cpu_``, lines
  288-307, called at line 365): a
  ``found_inf >= 1`` backs off; growth after ``growth_interval`` good steps with no guard against
  a float32 overflow of the scale. On other devices the fused rule
  (:func:`amp_edu.scaler.update_scale_`) runs.

Everything else -- the state machine, ``step``, the state dict, the errors -- is the course's
from-scratch :class:`amp_edu.scaler.GradScaler`, which this class extends through small hooks
(``_check_output``, ``_scaled``, ``_check_param``, ``_coalesce_fp16``, ``_update_scale_``).
``tests/distributed/test_sharded_scaler.py`` compares the two classes' API and errors in one process;
``tests/distributed/test_experiments.py`` runs them side by side under FSDP2 with injected infs
in two processes (the cases of :data:`.parity.CASES`) and compares scales, skip decisions and
parameters bit for bit.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..scaler import GradScaler

__all__ = ["ShardedGradScaler", "LocalShardGradScaler"]


def _is_supported_device(tensor: torch.Tensor) -> bool:
    return tensor.is_cuda or tensor.device.type in ("xla", "cpu", "hpu", "mtia", "xpu",
                                                     torch._C._get_privateuse1_backend_name())


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

    # ---- 1. scale: the scaled loss keeps the loss's dtype ---------------------------------------

    def _check_output(self, output: torch.Tensor) -> None:
        if not _is_supported_device(output):
            raise AssertionError(f"Expected supported device, got {output.device}")

    @staticmethod
    def _scaled(output: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        # a bf16/fp16 loss (FSDP's output dtype) stays bf16/fp16: S * loss may overflow fp16!
        return (output * scale).type(output.dtype)

    # ---- 2. unscale: check the local shards, then agree ----------------------------------------

    _FOUND_INF_SHAPE = (1,)          # torch's shape (DTensor warns about it: "non-scalar tensor")
    _UNSCALE_ALLOWS_FP16 = True      # FSDP may keep fp16 parameters, so fp16 gradients

    @staticmethod
    def _check_param(param) -> None:
        pass                         # torch's class does not check that a parameter is a tensor

    @staticmethod
    def _coalesce_fp16(grad: torch.Tensor) -> torch.Tensor:
        # torch's class coalesces a sparse fp16 gradient in fp32 (the sums rounded once, to fp16)
        return grad.type(torch.float32).coalesce().type(torch.float16)

    def _unscale_grads_(self, optimizer, inv_scale: torch.Tensor, found_inf: torch.Tensor,
                        allow_fp16: bool = True) -> dict[torch.device, torch.Tensor]:
        """Lesson 04's check and unscale of this rank's gradients (for DTensors: of the local
        shards, then the MAX over the mesh, as torch's dispatcher does), one ``found_inf`` per
        device."""
        found_infs = super()._unscale_grads_(optimizer, inv_scale, found_inf, allow_fp16)
        # a rank with no gradients (an empty shard) still needs a found_inf to take part in the
        # all-reduce below: without it the other ranks would wait for it forever
        if not found_infs:
            found_infs[self._scale.device] = found_inf.to(device=self._scale.device, copy=True)
        return found_infs

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
        """``GradScaler.unscale_`` (fp16 gradients allowed), then the whole fix: the ranks agree."""
        super().unscale_(optimizer)
        if self._enabled:
            self._agree_across_ranks_(self._found_inf_per_device(optimizer))

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

    def _update_scale_(self, scale: torch.Tensor, tracker: torch.Tensor, found_inf: torch.Tensor) -> None:
        if scale.device.type == "cpu":
            self._update_scale_cpu_(found_inf)
        else:
            super()._update_scale_(scale, tracker, found_inf)


class LocalShardGradScaler(ShardedGradScaler):
    """**The bug, on purpose**: a sharded scaler whose inf check sees only this rank's shard.

    It unscales each rank's local shards exactly as :class:`ShardedGradScaler` does but never
    tells the other ranks what it found: the rank whose shard overflowed skips the step and backs
    off its scale; the others step with their (finite) shards and keep theirs. From that step on
    the ranks' scales differ and the model (the shards together) drifts away from the correctly
    trained one. For the lesson only.
    """

    def _agree_within_mesh_(self, found_inf, dtensor_grad) -> None:
        pass                                   # keep the local answer

    def _agree_across_ranks_(self, found_infs) -> None:
        pass                                   # ... and tell no one
