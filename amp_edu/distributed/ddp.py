"""DDP and mixed precision: rank functions for lesson 11 (run them with ``launch``).

With ``DistributedDataParallel`` every rank holds the whole model; after ``backward`` the
gradients are **all-reduced** (averaged) so every rank holds the same gradient. A loss scaler
then sees the *same* gradients on every rank: an inf on one rank becomes an inf (or NaN) in the
average on all of them, and every rank skips the step together. :func:`skip_decisions` shows it.

The all-reduce itself moves ``4 bytes x parameters`` per step in fp32. DDP's communication hooks
``fp16_compress_hook`` / ``bf16_compress_hook`` **cast** the bucket to 16 bits, **then** divide it
by the world size (``buffer.to(dtype).div_(world_size)``, line 71 of torch 2.13's
``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``), all-reduce that and cast back:
half the bytes, at the price of 16-bit roundings (and, in fp16, of gradients below fp16's range
flushing to zero). :func:`compress_hooks` measures both. Because the cast comes first, a rank's
gradient above fp16's max 65504 becomes inf even when the average would fit:
:func:`hook_overflow` shows it. (The fp32 ``allreduce_hook`` divides first, "to avoid overflow,
especially for FP16", lines 24-26 of the same file.)
"""

from __future__ import annotations

import hashlib
import math

import torch
import torch.distributed as dist
from torch import nn

from .launch import current, progress
from .parity import tiny_mlp
from .wire import count_collectives

__all__ = ["skip_decisions", "compress_hooks", "HOOKS", "hook_overflow", "param_digest"]


def param_digest(model: nn.Module) -> str:
    """A short hash of every parameter's bytes: equal digests = bit-identical weights."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:12]


def skip_decisions(rank: int, world_size: int, steps: int = 8, inf_rank: int = 1, inf_steps=(3,),
                   seed: int = 0) -> dict:
    """Train a DDP model with fp16 autocast and the course's ``GradScaler``; at ``inf_steps`` put an
    inf into one gradient element **on rank ``inf_rank`` only**, before the all-reduce. Returns,
    per step: whether this rank injected, whether its scaler found an inf, whether it skipped, its
    scale, and a digest of its weights."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..scaler import GradScaler
    device = current().device
    model = DDP(tiny_mlp(seed).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = GradScaler(device.type, growth_interval=2)
    first = next(model.module.parameters())
    inject = {"now": False}

    def poison(g):                        # runs before DDP's all-reduce of this gradient
        if inject["now"]:
            g = g.clone()
            g.view(-1)[0] = math.inf
        return g

    first.register_hook(poison)
    gen = torch.Generator().manual_seed(100 + rank)        # each rank its own data
    rows = []
    for step in range(steps):
        x = torch.randn(16, 16, generator=gen).to(device)
        y = torch.randint(0, 4, (16,), generator=gen).to(device)
        inject["now"] = rank == inf_rank and step in inf_steps
        opt.zero_grad()
        with torch.autocast(device.type, dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x).float(), y)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        scaler.step(opt)
        found = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
        scaler.update()
        rows.append({"step": step, "injected": inject["now"], "found_inf": found > 0,
                     "skipped": scaler.get_scale() < scale, "scale": scale, "digest": param_digest(model)})
        progress(f"step {step + 1}/{steps}: scale {scale:g}, {'skipped' if found else 'stepped'}")
    return {"rows": rows}


HOOKS = ("allreduce_hook", "fp16_compress_hook", "bf16_compress_hook")   # allreduce_hook: fp32, as DDP without a hook


class _Probe(nn.Module):
    """One parameter ``w``; ``forward(x)`` returns ``(w * x).sum()``, so ``w.grad`` is exactly ``x``:
    each rank's gradient is whatever we choose."""

    def __init__(self, n: int):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return (self.w * x).sum()


def _rank_grad(r: int, n: int, magnitude: float) -> torch.Tensor:
    """Rank ``r``'s gradient: log-normal magnitudes around ``magnitude`` (a decade either side), random signs."""
    g = torch.Generator().manual_seed(7000 + r)
    mags = magnitude * torch.exp(torch.randn(n, generator=g, dtype=torch.float64) * math.log(10) / 2)
    signs = torch.randint(0, 2, (n,), generator=g, dtype=torch.float64) * 2 - 1
    return (mags * signs).float()


def _call_through(hook):
    def same_hook(process_group, bucket):
        return hook(process_group, bucket)
    return same_hook


def _registrable(hook):
    """``hook``, or off NCCL for ``bf16_compress_hook`` a function that calls it: DDP refuses to
    register a hook *named* ``bf16_compress_hook`` unless torch is built with CUDA and NCCL >= 2.10
    (or XCCL) (its error: "BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+");
    gloo reduces bf16 tensors, so the same code runs through a wrapper with another name."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    if hook is default_hooks.bf16_compress_hook and dist.get_backend() != "nccl":
        return _call_through(hook)
    return hook


def compress_hooks(rank: int, world_size: int, n: int = 100_000, magnitudes=(1e-2, 1e-6, 1e-8)) -> dict:
    """For each hook and gradient magnitude: DDP's averaged gradient against the exact (float64)
    average of every rank's gradient -- relative error, the fraction of nonzero true averages that
    came back as 0, and the bytes of the tensors handed to the all-reduces (their inputs)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    device = current().device
    out = {}
    for mag in magnitudes:
        exact = torch.stack([_rank_grad(r, n, mag).double() for r in range(world_size)]).mean(0)
        for hook in HOOKS:
            model = DDP(_Probe(n).to(device), bucket_cap_mb=1024)
            model.register_comm_hook(None, _registrable(getattr(default_hooks, hook)))
            log: list = []
            with count_collectives(log, ops=("all_reduce",)):
                model(_rank_grad(rank, n, mag).to(device)).backward()
            got = model.module.w.grad.double().cpu()
            sent = sum(c.input_bytes for c in log)
            dtype = log[0].dtype
            err = ((got - exact).norm() / exact.norm()).item()
            flushed = ((got == 0) & (exact != 0)).double().mean().item()
            out[(hook, mag)] = {"rel_error": err, "flushed": flushed, "bytes": sent, "dtype": dtype,
                                "max_abs_error": (got - exact).abs().max().item()}
        progress(f"gradients around {mag:g}: 3 hooks measured")
    return out


def divide_first_fp16_hook(process_group, bucket):
    """``fp16_compress_hook`` with the two steps swapped: divide by the world size in fp32, then
    cast to fp16 (what ``allreduce_hook`` does before its fp32 all-reduce)."""
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.div(group.size()).to(torch.float16)
    fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(fut):
        buffer.copy_(fut.value()[0])
        return buffer
    return fut.then(decompress)


def hook_overflow(rank: int, world_size: int, values=None) -> dict:
    """Each rank's gradient is chosen exactly (``values[rank]``, one element per column); DDP
    averages it with ``fp16_compress_hook`` and with :func:`divide_first_fp16_hook`. Returns the
    per-rank gradients, the exact average, and what each hook gave."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    if values is None:   # per rank: over 65504 on rank 0 only / both under / both over / tiny
        values = [[70000.0, 60000.0, 40000.0, 70000.0, 4.0e-8], [10000.0, 60000.0, 40000.0, 70000.0, 4.0e-8]]
        values = values + [values[1]] * (world_size - 2)
    device = current().device
    out = {"grads": [list(map(float, v)) for v in values[:world_size]]}
    exact = torch.tensor(values[:world_size], dtype=torch.float64).mean(0)
    out["exact"] = exact.tolist()
    for name, hook in (("fp16_compress_hook", default_hooks.fp16_compress_hook),
                       ("divide first, then cast", divide_first_fp16_hook)):
        model = DDP(_Probe(len(values[rank])).to(device))
        model.register_comm_hook(None, hook)
        model(torch.tensor(values[rank], dtype=torch.float32, device=device)).backward()
        out[name] = model.module.w.grad.cpu().tolist()
    progress("fp16 hooks: cast-then-divide against divide-then-cast")
    return out
