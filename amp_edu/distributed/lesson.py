"""Lesson 11's experiments grouped into few launches (starting ranks costs seconds each).

Each function is a rank function for :func:`~amp_edu.distributed.launch`; ``size`` is a dict of
sizes chosen in the notebook (smaller under ``AMP_EDU_SMOKE=1``).
"""

from __future__ import annotations

import warnings

from . import ddp, fsdp, parity, scaling
from .launch import progress

__all__ = ["sizes", "ddp_experiments", "fsdp_experiments", "scaler_experiments", "all_experiments"]


def sizes(smoke: bool) -> dict:
    """The lesson's sizes: tiny in smoke mode, a couple of minutes in all on a 2-core CPU otherwise."""
    if smoke:
        return dict(ddp_steps=5, hook_numel=2_000, seeds=(0, 1), fsdp_steps=10, drift_steps=6,
                    memory_widths=(32, 64, 64, 8), parity_cases=1)
    return dict(ddp_steps=8, hook_numel=100_000, seeds=(0, 1, 2), fsdp_steps=60, drift_steps=12,
                memory_widths=(32, 512, 512, 512, 8), parity_cases=2)


def _quiet():
    # torch's own ShardedGradScaler hands DTensor ops a (1,)-shaped found_inf and DTensor warns;
    # under torchao's float8 modules FSDP2 warns about view outputs and autograd about a full
    # backward hook with no input requiring grad (both harmless here: no in-place op follows)
    warnings.filterwarnings("ignore", message="Found a non-scalar tensor with numel=1")
    warnings.filterwarnings("ignore", message=".*returned a view tensor.*")
    warnings.filterwarnings("ignore", message="Full backward hook is firing")


def ddp_experiments(rank: int, world_size: int, size: dict) -> dict:
    """Section 2: DDP skip decisions with an inf on one rank, the compression hooks, and
    fp16_compress_hook's cast-then-divide overflow."""
    _quiet()
    progress("DDP + GradScaler, an inf on rank 1 at step 3")
    skips = ddp.skip_decisions(rank, world_size, steps=size["ddp_steps"])
    progress("compression hooks")
    hooks = ddp.compress_hooks(rank, world_size, n=size["hook_numel"])
    return {"skips": skips, "hooks": hooks, "overflow": ddp.hook_overflow(rank, world_size)}


def fsdp_experiments(rank: int, world_size: int, size: dict) -> dict:
    """Section 3: the policies side by side, the reduce dtype's error, bytes per rank, bytes per
    collective, and the fp8 all-gather (torchao's and amp_edu's)."""
    _quiet()
    out = {"train": fsdp.train_policies(rank, world_size, seeds=size["seeds"], steps=size["fsdp_steps"])}
    out["reduce"] = fsdp.reduce_error(rank, world_size)
    out["memory"] = fsdp.memory(rank, world_size, widths=size["memory_widths"])
    out["wire"] = fsdp.collective_bytes(rank, world_size)
    out["fp8"] = fsdp.fp8_all_gather(rank, world_size)
    return out


def scaler_experiments(rank: int, world_size: int, size: dict, ckpt_dir: str) -> dict:
    """Sections 4-5: the scalers on DTensor gradients, the drift bug, parity, the pitfalls."""
    _quiet()
    out = {"checks": scaling.dtensor_checks(rank, world_size),
           "drift": scaling.drift(rank, world_size, steps=size["drift_steps"])}
    cases = dict(list(parity.CASES.items())[:size["parity_cases"]])
    out["parity"] = parity.scaler_parity(rank, world_size, cases)
    out["resume"] = scaling.resume_mismatch(rank, world_size)
    out["clip"] = scaling.clipping(rank, world_size)
    out["checkpoint"] = scaling.checkpoint(rank, world_size, ckpt_dir)
    return out


def all_experiments(rank: int, world_size: int, size: dict, ckpt_dir: str) -> dict:
    """Sections 2-5 in one launch: each rank imports torch.distributed's FSDP and DTensor code once
    (the slowest part of starting a rank)."""
    return {"ddp": ddp_experiments(rank, world_size, size), "fsdp": fsdp_experiments(rank, world_size, size),
            "scaler": scaler_experiments(rank, world_size, size, ckpt_dir)}
