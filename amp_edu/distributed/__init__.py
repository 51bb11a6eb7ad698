"""Mixed precision across processes (lesson 11), built on ``torch.distributed``.

* :mod:`.launch`: :func:`launch` runs ``fn(rank, world_size, ...)`` in several processes (gloo on
  CPUs, NCCL on GPUs), from a notebook, and always cleans up.
* :mod:`.sharded_scaler`: :class:`ShardedGradScaler`, a drop-in for torch's, built on the course's
  from-scratch :class:`amp_edu.scaler.GradScaler`.
* :mod:`.ddp`, :mod:`.fsdp`, :mod:`.pitfalls`: the lesson's experiments, one function per launch.
* :mod:`.accounting`: bytes per parameter, counted and predicted.
"""

from .launch import BACKENDS, RankInfo, backend_sentence, current, launch, pick_backend, progress
from .sharded_scaler import LocalShardGradScaler, ShardedGradScaler

__all__ = ["launch", "progress", "current", "RankInfo", "pick_backend", "backend_sentence", "BACKENDS",
           "ShardedGradScaler", "LocalShardGradScaler"]
