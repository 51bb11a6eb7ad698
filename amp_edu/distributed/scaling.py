"""Loss scaling on sharded gradients, and its pitfalls: rank functions for lesson 11.

* :func:`dtensor_checks` -- what torch's ``GradScaler``, the course's from-scratch
  ``amp_edu.scaler.GradScaler`` and the two sharded scalers find when only rank 1's shard holds
  an inf;
* :func:`drift` -- the bug (:class:`LocalShardGradScaler`) against the fix
  (:class:`ShardedGradScaler`) over a short run: scales per rank, steps taken, and how far the
  buggy model moves from the correct one;
* :func:`resume_mismatch`, :func:`clipping`, :func:`checkpoint` -- the pitfalls, each measured.
"""

from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist
from torch import nn

from ..scaler import local_tensor
from .launch import current, progress
from .parity import _CountingStep, inject_inf_, shard, tiny_mlp
from .sharded_scaler import LocalShardGradScaler, ShardedGradScaler

__all__ = ["dtensor_checks", "drift", "resume_mismatch", "clipping", "checkpoint"]


def _fp16_model(seed: int = 0, per_layer: bool = False):
    from torch.distributed.fsdp import MixedPrecisionPolicy
    return shard(tiny_mlp(seed).to(current().device), MixedPrecisionPolicy(param_dtype=torch.float16),
                 per_layer=per_layer)


def _batch(gen, device, n: int = 16):
    return torch.randn(n, 16, generator=gen).to(device), torch.randint(0, 4, (n,), generator=gen).to(device)


def _loss(model, x, y):
    return nn.functional.cross_entropy(model(x).float(), y)


def dtensor_checks(rank: int, world_size: int, inf_rank: int = 1) -> dict:
    """One backward under FSDP2; an inf put into rank ``inf_rank``'s gradient shard; then each
    scaler's ``unscale_``: the ``found_inf`` it recorded on this rank."""
    from torch.amp import GradScaler as TorchGradScaler
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as TorchSharded

    from ..scaler import GradScaler as CourseGradScaler
    device = current().device
    gen = torch.Generator().manual_seed(3 + rank)
    x, y = _batch(gen, device)
    out = {}
    for name, make in (("torch.amp.GradScaler", lambda: TorchGradScaler(device.type)),
                       ("amp_edu.scaler.GradScaler", lambda: CourseGradScaler(device.type)),
                       ("LocalShardGradScaler (the bug)", lambda: LocalShardGradScaler(device.type)),
                       ("torch ShardedGradScaler", lambda: TorchSharded(device.type)),
                       ("amp_edu ShardedGradScaler", lambda: ShardedGradScaler(device.type))):
        model = _fp16_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = make()
        scaler.scale(_loss(model, x, y)).backward()
        if rank == inf_rank:
            inject_inf_(model.parameters())
        scaler.unscale_(opt)
        out[name] = sum(float(v.sum()) for v in scaler._found_inf_per_device(opt).values())
    progress("five scalers checked")
    return out


def _gather_full(model) -> torch.Tensor:
    return torch.cat([p.full_tensor().detach().double().flatten().cpu() for p in model.parameters()])


def drift(rank: int, world_size: int, steps: int = 12, inject=((3, 1),), seed: int = 0) -> dict:
    """Train two identical FSDP2 fp16 models on the same batches, one with the buggy local-only
    scaler, one with :class:`ShardedGradScaler`; ``inject`` lists ``(step, rank)`` where an inf
    goes into that rank's gradient shard. Per step: this rank's scale under each, whether each
    stepped, and ``||theta_bug - theta_fix|| / ||theta_fix||`` over the whole (all-gathered) model."""
    device = current().device
    models = {k: _fp16_model(seed) for k in ("bug", "fix")}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for k, m in models.items()}
    scalers = {"bug": LocalShardGradScaler(device.type, growth_interval=4),
               "fix": ShardedGradScaler(device.type, growth_interval=4)}
    counts = {k: _CountingStep(o) for k, o in opts.items()}
    gen = torch.Generator().manual_seed(50 + rank)
    rows = []
    for step in range(steps):
        x, y = _batch(gen, device)
        row = {"step": step}
        for k in ("bug", "fix"):
            model, opt, scaler = models[k], opts[k], scalers[k]
            opt.zero_grad()
            scaler.scale(_loss(model, x, y)).backward()
            if (step, rank) in inject:
                inject_inf_(model.parameters())
            before, calls = scaler.get_scale(), counts[k].calls
            scaler.step(opt)
            scaler.update()
            row[f"{k}_scale"] = before
            row[f"{k}_stepped"] = counts[k].calls > calls
        a, b = _gather_full(models["bug"]), _gather_full(models["fix"])
        row["drift"] = ((a - b).norm() / b.norm()).item()
        rows.append(row)
    progress(f"{steps} steps, final drift {rows[-1]['drift']:.3g}")
    return {"rows": rows}


def resume_mismatch(rank: int, world_size: int, scales=(2.0 ** 16, 2.0 ** 10), seed: int = 0) -> dict:
    """Pitfall: after a bad resume rank ``r`` has scale ``scales[r]``. FSDP2 averages the ranks'
    *scaled* gradients, then each rank divides its shard by its own scale -- so each shard comes
    out multiplied by ``mean(S) / S_r``. Returns this rank's scale, the ratio of its unscaled
    gradient shard's norm to the correct one, and what a one-line check (all-gather the scales)
    sees."""
    device = current().device
    gen = torch.Generator().manual_seed(9 + rank)
    x, y = _batch(gen, device)
    norms = {}
    for name, mine in (("right", scales[0]), ("mismatched", scales[rank % len(scales)])):
        model = _fp16_model(seed)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = ShardedGradScaler(device.type, init_scale=mine)
        scaler.scale(_loss(model, x, y)).backward()
        scaler.unscale_(opt)
        norms[name] = torch.cat([local_tensor(p.grad).double().flatten() for p in model.parameters()]).norm().item()
    seen = [None] * world_size
    dist.all_gather_object(seen, scales[rank % len(scales)])
    progress("scales compared")
    return {"scale": scales[rank % len(scales)], "norm_ratio": norms["mismatched"] / norms["right"],
            "all_scales": seen, "agree": len(set(seen)) == 1}


def clipping(rank: int, world_size: int, max_norm: float = 0.1, seed: int = 0) -> dict:
    """Pitfall: the clipping norm must be the norm of the *whole* gradient. Each rank's local
    shard norm, the global norm (``clip_grad_norm_`` on FSDP2's DTensor gradients reduces across
    ranks), and the clip coefficient each would give."""
    device = current().device
    gen = torch.Generator().manual_seed(21 + rank)
    x, y = _batch(gen, device)
    model = _fp16_model(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = ShardedGradScaler(device.type)
    scaler.scale(_loss(model, x, y)).backward()
    scaler.unscale_(opt)
    local = torch.cat([local_tensor(p.grad).double().flatten() for p in model.parameters()]).norm().item()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    total = (total.full_tensor() if hasattr(total, "full_tensor") else total).item()
    progress("norms compared")
    return {"local_norm": local, "global_norm": total, "local_coef": min(1.0, max_norm / (local + 1e-6)),
            "global_coef": min(1.0, max_norm / (total + 1e-6))}


def _train(model, opt, scaler, gen, steps, device, log):
    for _ in range(steps):
        x, y = _batch(gen, device)
        opt.zero_grad()
        scaler.scale(_loss(model, x, y)).backward()
        log.append(scaler.get_scale())
        scaler.step(opt)
        scaler.update()


def checkpoint(rank: int, world_size: int, path: str, steps=(6, 6), init_scale: float = 2.0 ** 20,
               seed: int = 0) -> dict:
    """Pitfall: saving a sharded checkpoint **with** the scaler. Train ``steps[0]`` steps; save the
    sharded model and optimizer with ``torch.distributed.checkpoint`` and the scaler's state dict
    beside them; train ``steps[1]`` more (the reference). Then resume twice from the checkpoint --
    with the scaler's state, and without it (a fresh scaler at ``init_scale``) -- and compare."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    device = current().device

    def fresh():
        m = _fp16_model(seed)
        return m, torch.optim.Adam(m.parameters(), lr=1e-3, eps=1e-4), ShardedGradScaler(device.type, init_scale=init_scale)

    model, opt, scaler = fresh()
    gen = torch.Generator().manual_seed(60 + rank)
    log: list = []
    _train(model, opt, scaler, gen, steps[0], device, log)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd, "scaler": scaler.state_dict()}, checkpoint_id=path)
    gen_state = gen.get_state()
    ref: list = []
    _train(model, opt, scaler, gen, steps[1], device, ref)
    reference = _gather_full(model)
    out = {"before": log, "reference": ref, "files": sorted(os.listdir(path))}
    for variant in ("with scaler state", "without scaler state"):
        model, opt, scaler = fresh()
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "scaler": scaler.state_dict()}   # keys to fill
        dcp.load(state, checkpoint_id=path)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        if variant == "with scaler state":
            scaler.load_state_dict(state["scaler"])
        gen.set_state(gen_state)
        got: list = []
        _train(model, opt, scaler, gen, steps[1], device, got)
        full = _gather_full(model)
        out[variant] = {"scales": got, "identical": bool(torch.equal(full, reference)),
                        "rel_diff": ((full - reference).norm() / reference.norm()).item()}
    progress("checkpoint resumed twice")
    return out
