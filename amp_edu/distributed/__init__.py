"""Mixed precision across processes (lesson 11), built on ``torch.distributed``.

* :mod:`.launch`: :func:`launch` runs ``fn(rank, world_size, ...)`` in several processes (gloo on
  CPUs, NCCL on GPUs), from a notebook, and always cleans up; :mod:`.byvalue` sends it a function
  written in a notebook cell (or a script's ``__main__``, a lambda, a closure) by value.
* :mod:`.wire`: the dtype and bytes of every collective DDP's hooks and FSDP2 call.
* :mod:`.sharded_scaler`: :class:`ShardedGradScaler`, a drop-in for torch's, built on the course's
  from-scratch :class:`amp_edu.scaler.GradScaler`.
* :mod:`.basics`: small rank functions that show (and test) what ``launch`` does;
* :mod:`.ddp`, :mod:`.fsdp`, :mod:`.scaling`: the lesson's experiments, as rank functions;
  :mod:`.parity` runs both sharded scalers side by side; :mod:`.lesson` groups the experiments
  into few launches (starting ranks costs seconds).
"""

from .launch import BACKENDS, LAST_RUN, RankInfo, backend_sentence, current, launch, leftovers, pick_backend, progress
from .sharded_scaler import LocalShardGradScaler, ShardedGradScaler

__all__ = ["launch", "LAST_RUN", "leftovers", "progress", "current", "RankInfo", "pick_backend", "backend_sentence", "BACKENDS",
           "ShardedGradScaler", "LocalShardGradScaler"]
