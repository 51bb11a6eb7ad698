"""What travels between the ranks: the dtype and bytes of every collective, as the library calls it.

:func:`count_collectives` wraps the ``torch.distributed`` functions that DDP's Python comm hooks
and FSDP2 call, for the length of a ``with`` block, and records one :class:`Collective` per
call. It wraps the names where the libraries look them up, so it sees exactly the tensors they
hand over:

* ``dist.all_reduce``: DDP's comm hooks (``allreduce_hook``, ``fp16_compress_hook``, ...;
  ``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``). DDP without a hook runs
  its all-reduce in C++, unseen here -- ``allreduce_hook`` is the same fp32 all-reduce in Python;
* ``dist.all_gather_single`` and ``dist.reduce_scatter_single``: FSDP2's default all-gather
  and reduce-scatter (``DefaultAllGather`` / ``DefaultReduceScatter`` in
  ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``, torch 2.13).

Collectives issued through DTensor or functional collectives (``torch.distributed._functional_
collectives``, e.g. the amax all-reduce of torchao's fp8 scales) go another way;
``torch.distributed.tensor.debug.CommDebugMode`` counts those (it counts calls, not bytes).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch.distributed as dist

from ..formats import dtype_name

__all__ = ["Collective", "count_collectives", "OPS"]

OPS = ("all_reduce", "all_gather_single", "reduce_scatter_single")


@dataclass(frozen=True)
class Collective:
    """One call: ``op``, the dtype of the tensor this rank handed to it, and the bytes of that
    input and of its output (for an all-reduce, the same tensor).

    These are the tensors' sizes, not what crosses the network: that depends on the collective's
    algorithm. In a ring over N ranks, for example, each rank sends (N-1)/N of the gathered (or
    reduced) tensor in an all-gather or a reduce-scatter, and twice that in an all-reduce. For
    an all-gather the input is this rank's shard and for a reduce-scatter the whole tensor, so
    the two inputs differ by N although a ring sends the same bytes for both."""

    op: str
    dtype: str
    input_bytes: int
    output_bytes: int


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


@contextlib.contextmanager
def count_collectives(log: list, ops=OPS):
    """Append a :class:`Collective` to ``log`` for every call of the ``ops`` in the block."""
    unknown = set(ops) - set(OPS)
    if unknown:
        raise ValueError(f"ops must be among {', '.join(OPS)}; got {sorted(unknown)}")
    real = {op: getattr(dist, op) for op in ops}

    def all_reduce(tensor, *args, **kwargs):
        log.append(Collective("all_reduce", dtype_name(tensor.dtype), _nbytes(tensor), _nbytes(tensor)))
        return real["all_reduce"](tensor, *args, **kwargs)

    def all_gather_single(output_tensor, input_tensor, *args, **kwargs):
        log.append(Collective("all_gather", dtype_name(input_tensor.dtype), _nbytes(input_tensor), _nbytes(output_tensor)))
        return real["all_gather_single"](output_tensor, input_tensor, *args, **kwargs)

    def reduce_scatter_single(output, input, *args, **kwargs):
        log.append(Collective("reduce_scatter", dtype_name(input.dtype), _nbytes(input), _nbytes(output)))
        return real["reduce_scatter_single"](output, input, *args, **kwargs)

    wrappers = {"all_reduce": all_reduce, "all_gather_single": all_gather_single,
                "reduce_scatter_single": reduce_scatter_single}
    for op in ops:
        setattr(dist, op, wrappers[op])
    try:
        yield log
    finally:
        for op, fn in real.items():
            setattr(dist, op, fn)
