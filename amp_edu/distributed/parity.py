"""Side by side under FSDP2: :class:`~amp_edu.distributed.ShardedGradScaler` and torch's, and
:class:`amp_edu.scaler.GradScaler` and ``torch.amp.GradScaler``.

:func:`scaler_parity` is a rank function (run it with :func:`~amp_edu.distributed.launch`): for
each case it builds two identical FSDP2 models, trains one with torch's ``ShardedGradScaler`` and
one with ours on the same batches, injects infs into chosen ranks' gradient shards at chosen
steps, and records per step what each scaler did: the scale, the growth tracker, the summed
``found_inf``, whether the optimizer stepped, and at the end the bytes of every local parameter
shard. ``tests/distributed/test_experiments.py`` and lesson 11 compare the two records bit for
bit. :func:`grad_scaler_parity` does the same for the plain scalers, which do no all-reduce of
their own (both rely on DTensor's MAX rule for the fused check), and
:func:`dtensor_kernel_parity` compares that rule itself with torch's dispatcher, placement by
placement.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from ..models import mlp
from ..scaler import local_tensor
from .launch import current, progress
from .sharded_scaler import LocalShardGradScaler, ShardedGradScaler

__all__ = ["CASES", "GRAD_SCALER_CASES", "DTENSOR_KINDS", "scaler_parity", "grad_scaler_parity",
           "dtensor_kernel_parity", "tiny_mlp", "shard", "compare_records", "inject_inf_"]

# name -> settings; "inject": {step: [ranks whose first gradient shard gets an inf]}
CASES = {
    "fp16 params (mp_policy), injected infs": dict(
        policy="fp16", steps=12, inject={2: [1], 5: [0], 6: [0, 1]}, scaler=dict(growth_interval=3)),
    "fp16 parameters (model.half()), Adam, a NaN": dict(
        policy="half", steps=10, optimizer="adam", inject={3: [1]}, nan_at={7: [0]},
        scaler=dict(init_scale=2.0 ** 10, growth_interval=2)),
    "overflow of the fp16 loss itself (init_scale 2^24)": dict(
        policy="fp16", steps=8, inject={}, scaler=dict(init_scale=2.0 ** 24, growth_interval=4)),
    # a 1-wide layer: FSDP2 splits its weight (1, 32) and bias (1,) along dim 0 into [1, 0] rows,
    # so the second optimizer (that layer's two parameters) holds empty shards on rank 1
    "unscale_ then global clipping, two optimizers (one with an empty shard on rank 1)": dict(
        policy="fp16", steps=8, inject={1: [1], 4: [0]}, clip=0.5, widths=(16, 32, 1, 4),
        second_optimizer=(2, 4), per_layer=True,
        scaler=dict(growth_interval=2, backoff_factor=0.25, growth_factor=4.0)),
}


def tiny_mlp(seed: int = 0, widths=(16, 32, 32, 4), dtype=torch.float32) -> nn.Sequential:
    """A small ReLU MLP (:func:`amp_edu.models.mlp`) whose initial weights depend only on ``seed``:
    ``W ~ N(0, 1/fan_in)``, ``b ~ N(0, 0.01)``, drawn from a generator of its own, so building
    one changes no other random numbers."""
    model = mlp(list(widths), seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for lin in (m for m in model if isinstance(m, nn.Linear)):
            b, a = lin.weight.shape
            lin.weight.copy_(torch.randn(b, a, generator=g) / math.sqrt(a))
            lin.bias.copy_(torch.randn(b, generator=g) * 0.1)
    return model.to(dtype)


def shard(model: nn.Module, policy=None, *, per_layer: bool = True) -> nn.Module:
    """``fully_shard`` every Linear (``per_layer``), then the root, with ``mp_policy=policy``.

    Per layer is FSDP's usual recipe: one all-gather per layer, its full copy freed after use, so
    only one layer is ever unsharded. ``per_layer=False`` shards the root only: one all-gather for
    the whole (small) model, kept through backward -- fewer collectives, faster for tiny models.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = policy or MixedPrecisionPolicy()
    if per_layer:
        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m, mp_policy=policy)
    fully_shard(model, mp_policy=policy, reshard_after_forward=per_layer)
    return model


def inject_inf_(params, value: float = math.inf) -> bool:
    """Set the first element of the first non-empty local gradient shard to ``value``."""
    for p in params:
        if p.grad is not None:
            local = local_tensor(p.grad)
            if local.numel():
                local.view(-1)[0] = value
                return True
    return False


class _CountingStep:
    """Wrap ``opt.step`` to count the steps the scaler really took."""

    def __init__(self, opt):
        self.opt, self.inner, self.calls = opt, opt.step, 0
        opt.step = self

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


def _build(case: dict, seed: int, scaler_cls, device):
    from torch.distributed.fsdp import MixedPrecisionPolicy
    policy_name = case["policy"]
    widths = case.get("widths", (16, 32, 32, 4))
    if policy_name == "half":
        model, policy = tiny_mlp(seed, widths, dtype=torch.float16), MixedPrecisionPolicy()
    else:
        model, policy = tiny_mlp(seed, widths), MixedPrecisionPolicy(param_dtype=torch.float16)
    model = shard(model.to(device), policy, per_layer=case.get("per_layer", False))
    params = list(model.parameters())
    groups = [params]
    if "second_optimizer" in case:              # params[a:b] get an optimizer of their own
        a, b = case["second_optimizer"]
        groups = [params[:a] + params[b:], params[a:b]]
    if case.get("optimizer") == "adam":
        opts = [torch.optim.Adam(g, lr=1e-3, eps=1e-4) for g in groups]
    else:
        opts = [torch.optim.SGD(g, lr=0.05, momentum=0.9) for g in groups]
    scaler = scaler_cls(device.type, **case.get("scaler", {}))
    return model, opts, scaler


def _run_one(case: dict, scaler_cls, rank: int, seed: int = 0) -> dict:
    device = current().device
    model, opts, scaler = _build(case, seed, scaler_cls, device)
    counters = [_CountingStep(o) for o in opts]
    g = torch.Generator().manual_seed(1000 + rank)
    in_dtype = torch.float16 if case["policy"] == "half" else torch.float32
    rec = {"scale": [], "tracker": [], "found_inf": [], "steps_taken": []}
    for step in range(case["steps"]):
        x = torch.randn(8, 16, generator=g).to(device, in_dtype)
        y = torch.randint(0, 4, (8,), generator=g).to(device)
        for o in opts:
            o.zero_grad()
        loss = nn.functional.cross_entropy(model(x).float(), y)
        if case["policy"] != "half":
            loss = loss.to(torch.float16)            # an fp16 loss: scale() keeps its dtype
        scaler.scale(loss).backward()
        if rank in case.get("inject", {}).get(step, []):
            inject_inf_(model.parameters())
        if rank in case.get("nan_at", {}).get(step, []):
            inject_inf_(model.parameters(), math.nan)
        if case.get("clip"):
            for o in opts:
                scaler.unscale_(o)
            torch.nn.utils.clip_grad_norm_(model.parameters(), case["clip"])
        for o in opts:
            scaler.step(o)
        rec["found_inf"].append([sum(float(v.sum()) for v in scaler._found_inf_per_device(o).values())
                                 for o in opts])
        scaler.update()
        rec["scale"].append(scaler.get_scale())
        rec["tracker"].append(scaler._get_growth_tracker())
        rec["steps_taken"].append([c.calls for c in counters])
    rec["params"] = [local_tensor(p).detach().cpu().clone() for p in model.parameters()]
    rec["local_numel"] = [sum(local_tensor(p).numel() for grp in o.param_groups for p in grp["params"])
                          for o in opts]                  # per optimizer: what this rank's shards hold
    rec["state_dict"] = scaler.state_dict()
    return rec


def _side_by_side(rank: int, cases: dict, scalers: dict) -> dict:
    out = {}
    for i, (name, case) in enumerate(cases.items()):
        progress(f"case {i + 1}/{len(cases)}: {name}")
        out[name] = {key: _run_one(case, cls, rank) for key, cls in scalers.items()}
    return out


def scaler_parity(rank: int, world_size: int, cases: dict | None = None, with_local: bool = False) -> dict:
    """Rank function: ``{case: {"torch": record, "ours": record[, "local": record]}}`` for this rank."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as TorchSharded
    scalers = {"torch": TorchSharded, "ours": ShardedGradScaler}
    if with_local:
        scalers["local"] = LocalShardGradScaler
    return _side_by_side(rank, CASES if cases is None else cases, scalers)


# The plain GradScaler refuses fp16 gradients (``model.half()``), so its cases keep fp32 shards.
GRAD_SCALER_CASES = {
    **{name: case for name, case in CASES.items() if case["policy"] != "half"},
    "infs and a NaN on one rank at a time, Adam": dict(
        policy="fp16", steps=10, optimizer="adam", inject={2: [1], 4: [0]}, nan_at={6: [1]},
        scaler=dict(init_scale=2.0 ** 10, growth_interval=2)),
}


def grad_scaler_parity(rank: int, world_size: int, cases: dict | None = None) -> dict:
    """Rank function: ``torch.amp.GradScaler`` and :class:`amp_edu.scaler.GradScaler` side by side
    under FSDP2, with no all-reduce of their own: both rely on DTensor's MAX rule for the fused
    check. ``{case: {"torch": record, "ours": record}}`` for this rank."""
    from ..scaler import GradScaler as CourseGradScaler
    return _side_by_side(rank, GRAD_SCALER_CASES if cases is None else cases,
                         {"torch": torch.amp.GradScaler, "ours": CourseGradScaler})


def _dtensor_grads(kind: str, rank: int):
    """Gradients as DTensors on a 1-d mesh of the world or a 2-d (world, 1) mesh, with an inf in
    rank 1's local piece only; ``kind`` picks the placements (torch's rule reads the first)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    world = dist.get_world_size()
    device = current().device
    flat = init_device_mesh(device.type, (world,))
    grid = init_device_mesh(device.type, (world, 1), mesh_dim_names=("outer", "inner"))
    layouts = {
        "shard": [(flat, (Shard(0),))] * 2,
        "replicate": [(flat, (Replicate(),))] * 2,
        "replicate first, then shard": [(flat, (Replicate(),)), (flat, (Shard(0),))],
        "shard first, then replicate": [(flat, (Shard(0),)), (flat, (Replicate(),))],
        "2-d mesh, sharded on the outer dim": [(grid, (Shard(0), Replicate()))] * 2,
        "2-d mesh, sharded on the inner (size-1) dim": [(grid, (Replicate(), Shard(0)))] * 2,
    }
    grads = []
    for i, (mesh, placements) in enumerate(layouts[kind]):
        local = torch.full((3, 2), 2.0 ** (i + 3), device=device)
        if rank == 1 and i == 1:
            local[0, 0] = math.inf
        grads.append(DTensor.from_local(local, mesh, placements, run_check=False))
    return grads


DTENSOR_KINDS = ("shard", "replicate", "replicate first, then shard", "shard first, then replicate",
                 "2-d mesh, sharded on the outer dim", "2-d mesh, sharded on the inner (size-1) dim")


def dtensor_kernel_parity(rank: int, world_size: int) -> dict:
    """Rank function: torch's fused check on DTensor gradients (through the DTensor dispatcher) and
    :class:`amp_edu.scaler.GradScaler`'s group check on the same gradients, for each placement
    layout in :data:`DTENSOR_KINDS`, and for a list mixing DTensors with a plain tensor (an
    error). ``{kind: {"torch": (found_inf, local grads), "ours": ...}}`` for this rank."""
    from ..scaler import GradScaler as CourseGradScaler
    device = current().device
    inv = torch.full((), 0.25, device=device)
    ours = CourseGradScaler(device.type)

    def run(kind, check):
        found = torch.zeros((), device=device)
        if kind == "mixed":
            grads = [_dtensor_grads("shard", rank)[0], torch.ones(2, device=device)]
        else:
            grads = _dtensor_grads(kind, rank)
        try:
            check(grads, found, inv)
        except Exception as e:                                      # compared by type and message
            return (type(e).__name__, str(e))
        return (found.item(), [local_tensor(g).clone() for g in grads])

    out = {}
    for kind in DTENSOR_KINDS + ("mixed",):
        out[kind] = {"torch": run(kind, torch._amp_foreach_non_finite_check_and_unscale_),
                     "ours": run(kind, ours._check_and_unscale_group_)}
    return out


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.view(torch.int16 if a.element_size() == 2 else torch.int32),
        b.view(torch.int16 if b.element_size() == 2 else torch.int32))


def compare_records(a: dict, b: dict) -> list[str]:
    """What differs between two records (empty: identical, parameters compared bit for bit)."""
    diffs = [f"{k}: {a[k]} vs {b[k]}" for k in ("scale", "tracker", "found_inf", "steps_taken", "state_dict")
             if a[k] != b[k]]
    for i, (p, q) in enumerate(zip(a["params"], b["params"])):
        if not _bits_equal(p, q):
            diffs.append(f"parameter {i}: bits differ (max |diff| {(p.double() - q.double()).abs().max().item():.3g})")
    return diffs
