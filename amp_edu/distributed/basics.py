"""Small rank functions that show what :func:`~amp_edu.distributed.launch` does (and test it).

Each is ``fn(rank, world_size, ...)`` at module level, so spawned ranks can import it.
"""

from __future__ import annotations

import os
import subprocess
import time

import torch
import torch.distributed as dist

from .launch import current, progress

__all__ = ["hello", "fail_on", "hang", "exit_on"]


def hello(rank: int, world_size: int, steps: int = 3) -> dict:
    """Report progress, all-reduce the ranks' numbers, and return what this rank saw."""
    for step in range(1, steps + 1):
        progress(f"step {step}/{steps}")
    t = torch.tensor([float(rank + 1)], device=current().device)
    dist.all_reduce(t)                      # SUM over ranks: 1 + 2 + ... + world_size
    return {"rank": rank, "world_size": world_size, "pid": os.getpid(), "sum": t.item(),
            "backend": dist.get_backend(), "threads": torch.get_num_threads()}


def fail_on(rank: int, world_size: int, bad_rank: int = 1) -> int:
    """Rank ``bad_rank`` raises; the others wait in a collective that will never complete."""
    if rank == bad_rank:
        raise ValueError(f"rank {rank} was told to fail")
    dist.barrier()
    return rank


def hang(rank: int, world_size: int, seconds: float = 3600.0, with_child: bool = False) -> int:
    """Sleep far past any reasonable timeout (to show and test ``TimeoutError``). ``with_child``:
    first start a ``sleep`` process of our own and report its pid (``"child <pid>"``), to show
    that the rank's children are killed with it."""
    if with_child:
        child = subprocess.Popen(["sleep", str(int(seconds))])
        progress(f"child {child.pid}")
    progress(f"sleeping {seconds:g} s")
    time.sleep(seconds)
    return rank


def exit_on(rank: int, world_size: int, bad_rank: int = 1) -> int:
    """Rank ``bad_rank`` dies without a word (``os._exit``), as a crash or the OOM killer would."""
    if rank == bad_rank:
        os._exit(3)
    time.sleep(3600)
    return rank
