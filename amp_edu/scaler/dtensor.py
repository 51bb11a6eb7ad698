"""DTensor gradients (FSDP2): torch's dispatcher gives the fused check a rule of its own.

Under ``fully_shard`` every gradient is a ``DTensor`` and each rank holds one shard of it. Torch's
DTensor dispatcher has a rule for the fused check (``found_inf_reduce_handler`` in
``torch/distributed/tensor/_dispatch.py``): run it on the local shards, then replace ``found_inf``
by its MAX over the mesh dimensions that the group's first gradient is sharded on (``Replicate``
dimensions are left alone), once per device-and-dtype group. :class:`~amp_edu.scaler.GradScaler`
applies the same rule with :func:`max_over_mesh_`.
"""

from __future__ import annotations

import sys

import torch

__all__ = ["is_dtensor", "local_tensor", "max_over_mesh_", "refuse_mixed_", "dtensor_class"]

def dtensor_class():
    """``torch.distributed.tensor.DTensor`` once something has imported it, else ``None``: no DTensor
    can exist before that module is loaded, so the scaler never has to import it itself."""
    return getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)


def is_dtensor(t) -> bool:
    """Is ``t`` a ``torch.distributed.tensor.DTensor`` (what FSDP2's parameters and gradients are)?"""
    dtensor = dtensor_class()
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


def refuse_mixed_(grads: list, dtensor) -> None:
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
