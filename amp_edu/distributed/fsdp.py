"""FSDP2 and mixed precision: rank functions for lesson 11 (run them with ``launch``).

``fully_shard(module, mp_policy=MixedPrecisionPolicy(param_dtype, reduce_dtype))`` splits every
parameter into one shard per rank, kept as an **fp32 DTensor** -- the master weights. Before a
layer runs, each rank casts its shard to ``param_dtype`` and the cast shards are all-gathered
(``all_gather_inputs``, line 901 of torch 2.13's ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``),
giving the compute copy, freed after use; after backward the full gradients are **reduce-scattered** in ``reduce_dtype`` and
each rank keeps its fp32 gradient shard, which the optimizer applies to its fp32 parameter shard.

* :func:`train_policies` trains the same model with several policies and seeds, side by side;
* :func:`reduce_error` isolates what the reduce dtype does to one gradient;
* :func:`memory` counts the bytes each rank really keeps, against the unsharded model;
* :func:`collective_bytes` records the dtype and bytes of every all-gather and reduce-scatter;
* :func:`fp8_all_gather` runs torchao's and amp_edu's fp8 all-gather (:mod:`amp_edu.fp8.fsdp`)
  side by side, and :func:`fp8_weight_paths` compares the two fp8 casts of the weight (from its
  bf16 copy, or from the fp32 shard).
"""

from __future__ import annotations

import torch
from torch import nn

from ..formats import dtype_name
from ..scaler import local_tensor
from .launch import current, progress
from .parity import shard, tiny_mlp

__all__ = ["POLICIES", "policy", "train_policies", "to_study", "reduce_error", "memory", "WIDTHS", "BYTES_WIDTHS",
           "collective_bytes", "fp8_all_gather", "fp8_weight_paths", "FP8_VARIANTS", "FP8_LIBRARIES"]

# name -> (param_dtype, reduce_dtype); None: keep the parameter's own dtype (fp32)
POLICIES = {"bf16/bf16": (torch.bfloat16, torch.bfloat16), "bf16/fp32": (torch.bfloat16, torch.float32),
            "fp32/fp32": (None, None)}
WIDTHS = (32, 128, 128, 8)       # blobs: 32 features, 8 classes


def policy(name: str):
    """The ``MixedPrecisionPolicy`` for one of :data:`POLICIES` (``"param/reduce"``)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; accepted: {', '.join(POLICIES)}")
    param_dtype, reduce_dtype = POLICIES[name]
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)


@torch.no_grad()
def _evaluate(model, task) -> tuple[float, float]:
    logits = model(task.x_eval)
    return task.loss(logits, task.y_eval).item(), task.accuracy(logits, task.y_eval)


def train_policies(rank: int, world_size: int, seeds=(0, 1, 2), steps: int = 150, policies=tuple(POLICIES),
                   batch: int = 32, lr: float = 3e-3, n: int = 4096, eval_every: int = 10) -> dict:
    """Train ``tiny_mlp(seed, WIDTHS)`` on the ``blobs`` task under each FSDP2 policy and seed.

    Each rank draws its own batches (``batch`` examples, from a generator seeded by seed and
    rank; the same for every policy); the seed also fixes the initial weights. Every rank
    evaluates the same held-out set, so the numbers are equal on every rank.
    Returns ``{policy: [{"eval_steps", "eval_loss", "eval_accuracy", "loss"} per seed]}``.
    """
    from ..data import get_task
    device = current().device
    task = get_task("blobs", seed=0, device=device, n=n)
    out = {p: [] for p in policies}
    for s, seed in enumerate(seeds):
        for name in policies:
            model = shard(tiny_mlp(seed, WIDTHS).to(device), policy(name), per_layer=False)
            opt = torch.optim.AdamW(model.parameters(), lr=lr)
            gen = torch.Generator().manual_seed(1000 * seed + rank)
            run = {"eval_steps": [], "eval_loss": [], "eval_accuracy": [], "loss": []}
            for step in range(1, steps + 1):
                x, y = task.batch(batch, gen)
                loss = task.loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                run["loss"].append(loss.item())
                if step % eval_every == 0 or step == steps:
                    el, ea = _evaluate(model, task)
                    run["eval_steps"].append(step)
                    run["eval_loss"].append(el)
                    run["eval_accuracy"].append(ea)
            out[name].append(run)
            progress(f"seed {seed} ({s + 1}/{len(seeds)}) {name}: eval loss {run['eval_loss'][-1]:.4f}, "
                     f"accuracy {run['eval_accuracy'][-1]:.3f}")
    return out


def to_study(result: dict, seeds, steps: int):
    """:func:`train_policies`' result as an :class:`amp_edu.study.Study`, so lesson 08's verdict
    (difference against fp32's seed-to-seed spread) applies unchanged."""
    from ..study import Study
    from ..train import History
    runs = {}
    for name, per_seed in result.items():
        runs[name] = []
        for r in per_seed:
            h = History(recipe=name)
            h.loss, h.eval_steps = list(r["loss"]), list(r["eval_steps"])
            h.eval_loss, h.eval_accuracy = list(r["eval_loss"]), list(r["eval_accuracy"])
            runs[name].append(h)
    return Study(task="blobs (FSDP2, 2 ranks)", model="mlp", steps=steps, seeds=tuple(seeds),
                 recipes=tuple(result), runs=runs)


def _full_grads(model) -> list[torch.Tensor]:
    return [p.grad.full_tensor().double().cpu() for p in model.parameters()]


def reduce_error(rank: int, world_size: int, seed: int = 0, batch: int = 256, n: int = 4096) -> dict:
    """One forward/backward of the same model on the same per-rank batches under each policy; the
    full (all-gathered) gradients compared, as ``||g - g_ref|| / ||g_ref||`` over all parameters:

    * ``bf16/bf16`` against ``bf16/fp32``: the same bf16 compute, only the reduction differs --
      the error the reduce dtype adds;
    * each against ``fp32/fp32``: everything bf16 does to the gradient.
    """
    from ..data import get_task
    device = current().device
    task = get_task("blobs", seed=0, device=device, n=n)
    gen = torch.Generator().manual_seed(77 + rank)
    x, y = task.batch(batch, gen)
    grads = {}
    for name in POLICIES:
        model = shard(tiny_mlp(seed, WIDTHS).to(device), policy(name), per_layer=False)
        task.loss(model(x), y).backward()
        grads[name] = _full_grads(model)
        grads[name + " dtype"] = dtype_name(next(model.parameters()).grad.dtype)

    def rel(a, b):
        num = sum((u - v).pow(2).sum() for u, v in zip(grads[a], grads[b])).sqrt()
        den = sum(v.pow(2).sum() for v in grads[b]).sqrt()
        return (num / den).item()

    progress("gradients compared")
    return {"reduce only (bf16/bf16 vs bf16/fp32)": rel("bf16/bf16", "bf16/fp32"),
            "bf16/bf16 vs fp32/fp32": rel("bf16/bf16", "fp32/fp32"),
            "bf16/fp32 vs fp32/fp32": rel("bf16/fp32", "fp32/fp32"),
            "grad dtype kept": {p: grads[p + " dtype"] for p in POLICIES}}


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _cast_copies_bytes(model, x, dtype) -> int:
    """Bytes of weight copies autocast makes and saves for backward (its cast cache)."""
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() >= 2}
    shapes |= {s[::-1] for s in shapes}
    seen: dict[int, int] = {}

    def pack(t):
        if t.dtype == dtype and tuple(t.shape) in shapes:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(x.device.type, dtype=dtype):
            model(x).float().sum().backward()
    return sum(seen.values())


def memory(rank: int, world_size: int, widths=(32, 512, 512, 512, 8), batch: int = 16) -> dict:
    """Bytes this rank keeps under FSDP2 ``bf16/fp32`` with AdamW after one step, by kind, and the
    same for the unsharded model trained with autocast bf16 in one process.

    ``transient_params`` is the largest all-gathered bf16 copy of one layer's parameters seen
    during forward (FSDP2 frees it after the layer, with ``reshard_after_forward=True``).
    """
    device = current().device
    gen = torch.Generator().manual_seed(5 + rank)
    x = torch.randn(batch, widths[0], generator=gen).to(device)
    # --- FSDP2, bf16 compute / fp32 reduce
    model = shard(tiny_mlp(0, widths).to(device), policy("bf16/fp32"))
    gathered = []

    def during_forward(module, args):
        # registered after fully_shard, so it runs after FSDP2's own pre-forward hook, which has
        # all-gathered the layer: its parameters are now the full bf16 compute copies
        gathered.append(_nbytes(local_tensor(p) for p in module.parameters(recurse=False)))
        dtypes.add(dtype_name(next(module.parameters(recurse=False)).dtype))

    dtypes: set = set()
    for m in model:
        if isinstance(m, nn.Linear):
            m.register_forward_pre_hook(during_forward)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(x).float().sum().backward()
    opt.step()
    params = [local_tensor(p) for p in model.parameters()]
    sharded = {
        "params": _nbytes(params),
        "params dtype": dtype_name(params[0].dtype),
        "grads": _nbytes(local_tensor(p.grad) for p in model.parameters()),
        "grads dtype": dtype_name(local_tensor(next(model.parameters()).grad).dtype),
        "optimizer": _nbytes(local_tensor(v) for st in opt.state.values() for k, v in st.items()
                             if torch.is_tensor(v) and k != "step"),
        "transient_params": max(gathered),
        "transient dtype": "/".join(sorted(dtypes)),
        "local_numel": sum(p.numel() for p in params),
    }
    # --- the same model, unsharded, autocast bf16 (what one process keeps)
    plain = tiny_mlp(0, widths).to(device)
    opt = torch.optim.AdamW(plain.parameters(), lr=1e-3)
    cast = _cast_copies_bytes(plain, x, torch.bfloat16)
    opt.step()
    unsharded = {
        "params": _nbytes(plain.parameters()),
        "grads": _nbytes(p.grad for p in plain.parameters()),
        "optimizer": _nbytes(v for st in opt.state.values() for k, v in st.items()
                             if torch.is_tensor(v) and k != "step"),
        "transient_params": cast,
        "numel": sum(p.numel() for p in plain.parameters()),
    }
    progress("bytes counted")
    return {"fsdp2": sharded, "unsharded": unsharded, "world_size": world_size}


BYTES_WIDTHS = (64, 128, 128, 16)      # every dimension a multiple of 16, as fp8 GEMMs on GPUs need


def _one_step(model, opt, x, after_step=None):
    model(x).float().sum().backward()
    opt.step()
    opt.zero_grad()
    if after_step is not None:
        after_step(model)


def _summarise(log) -> dict:
    """Per collective kind: calls, the dtypes of the inputs, and the bytes of this rank's inputs
    and outputs (:class:`.wire.Collective`)."""
    out: dict = {}
    for c in log:
        row = out.setdefault(c.op, {"calls": 0, "dtypes": [], "input_bytes": 0, "output_bytes": 0})
        row["calls"] += 1
        row["input_bytes"] += c.input_bytes
        row["output_bytes"] += c.output_bytes
        if c.dtype not in row["dtypes"]:
            row["dtypes"].append(c.dtype)
    return out


def collective_bytes(rank: int, world_size: int, policies=tuple(POLICIES), batch: int = 32) -> dict:
    """One training step of ``tiny_mlp(0, BYTES_WIDTHS)`` sharded per layer under each policy,
    with every FSDP2 all-gather and reduce-scatter recorded (:func:`.wire.count_collectives`):
    the dtype of each one's input and the bytes of this rank's inputs and outputs. The second step is
    recorded (the first also runs FSDP2's lazy initialisation)."""
    from .wire import count_collectives
    device = current().device
    gen = torch.Generator().manual_seed(31 + rank)
    x = torch.randn(batch, BYTES_WIDTHS[0], generator=gen).to(device)
    out = {}
    for name in policies:
        model = shard(tiny_mlp(0, BYTES_WIDTHS).to(device), policy(name))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        _one_step(model, opt, x)
        log: list = []
        with count_collectives(log, ops=("all_gather_single", "reduce_scatter_single")):
            _one_step(model, opt, x)
        out[name] = _summarise(log)
    out["numel"] = sum(p.numel() for p in tiny_mlp(0, BYTES_WIDTHS).parameters())
    out["weight_numel"] = sum(p.numel() for p in tiny_mlp(0, BYTES_WIDTHS).parameters() if p.dim() == 2)
    progress("bytes per collective counted")
    return out


# name -> (enable_fsdp_float8_all_gather, precompute the scales after each optimizer step)
FP8_VARIANTS = {"bf16 all-gather": (False, False), "fp8 all-gather": (True, False),
                "fp8 all-gather, precomputed scales": (True, True)}
FP8_LIBRARIES = ("torchao", "amp_edu")


def fp8_all_gather(rank: int, world_size: int, steps: int = 3, batch: int = 32, libraries=FP8_LIBRARIES) -> dict:
    """fp8 training under FSDP2 (``bf16/fp32`` policy, per-layer sharding) by torchao and by
    amp_edu (:mod:`amp_edu.fp8.fsdp`), each in the three :data:`FP8_VARIANTS`: the weights
    all-gathered in bf16 (``enable_fsdp_float8_all_gather=False``) or in fp8 (``True``), the fp8
    variant with and without precomputed scales (each library's
    ``precompute_float8_dynamic_scale_for_fsdp`` after each optimizer step). Same model, seed,
    batches and tensorwise recipe everywhere.

    Returns ``{library: {variant: [row per step]}}``; a row holds FSDP2's all-gathers and
    reduce-scatters (:func:`.wire.count_collectives`), the calls ``CommDebugMode`` counts
    (``"calls"``; it also sees the amax all-reduces: torchao issues them as functional
    collectives, amp_edu with ``dist.all_reduce``; ``"all_reduces"`` adds both kinds up), the
    loss, and this rank's master-weight shards after the step (``"weights"``, float32 on the CPU).
    A library that does not import or cannot run here gives ``{"error": why}`` instead.
    """
    out = {}
    for lib in libraries:
        if lib not in FP8_LIBRARIES:
            raise ValueError(f"libraries must be among {FP8_LIBRARIES}, got {lib!r}")
        try:
            out[lib] = _fp8_runs(lib, steps, batch, rank)
        except Exception as exc:  # noqa: BLE001 - e.g. a GPU without fp8 GEMMs: the lesson says why
            out[lib] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    out["weight_numel"] = sum(p.numel() for p in tiny_mlp(0, BYTES_WIDTHS).parameters() if p.dim() == 2)
    out["numel"] = sum(p.numel() for p in tiny_mlp(0, BYTES_WIDTHS).parameters())
    return out


def _fp8_library(lib: str):
    """``(make_config(fp8_gather), convert(model, config), precompute)`` of one library."""
    if lib == "torchao":
        from ..fp8.torchao_import import import_torchao
        status = import_torchao("torchao.float8")          # its CPU-only CUDA-extension notices filtered
        if not status:
            raise ImportError(status.error)
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training, precompute_float8_dynamic_scale_for_fsdp
        return (lambda gather: Float8LinearConfig(enable_fsdp_float8_all_gather=gather),
                lambda model, config: convert_to_float8_training(model, config=config),
                precompute_float8_dynamic_scale_for_fsdp)
    from ..fp8 import Float8LinearConfig, convert_to_float8_training
    from ..fp8.fsdp import precompute_float8_dynamic_scale_for_fsdp
    return (lambda gather: Float8LinearConfig.from_recipe_name("tensorwise", enable_fsdp_float8_all_gather=gather),
            convert_to_float8_training, precompute_float8_dynamic_scale_for_fsdp)


def _master_shards(model) -> list[torch.Tensor]:
    """This rank's fp32 shards of the parameters (inside either library's fp8-all-gather wrapper)."""
    shards = (local_tensor(p) for p in model.parameters())
    return [getattr(t, "_tensor", t).detach().to("cpu", copy=True) for t in shards]


def _fp8_runs(lib: str, steps: int, batch: int, rank: int) -> dict:
    from torch.distributed.tensor.debug import CommDebugMode

    from .wire import count_collectives
    make_config, convert, precompute = _fp8_library(lib)
    device = current().device
    out = {}
    for name, (fp8_gather, precomputed) in FP8_VARIANTS.items():
        model = convert(tiny_mlp(0, BYTES_WIDTHS).to(device), make_config(fp8_gather))
        model = shard(model, policy("bf16/fp32"))
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(41 + rank)
        rows = []
        for _ in range(steps):
            x = torch.randn(batch, BYTES_WIDTHS[0], generator=gen).to(device)
            log: list = []
            with CommDebugMode() as comm, count_collectives(log, ops=("all_gather_single", "reduce_scatter_single")):
                loss = model(x).float().pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                if precomputed:
                    precompute(model)
            counts = {str(k).split(".")[-1].strip("_"): v for k, v in comm.get_comm_counts().items()}
            rows.append({"fsdp": _summarise(log), "calls": counts, "loss": loss.item(),
                         "all_reduces": counts.get("all_reduce", 0) + counts.get("allreduce", 0),
                         "weights": _master_shards(model)})
        out[name] = rows
        progress(f"{lib}, {name}: {len(rows)} steps")
    return out


def fp8_weight_paths(seed: int = 0, widths=BYTES_WIDTHS) -> dict:
    """The two ways amp_edu's fp8 weight is made at the first step, on ``tiny_mlp(seed, widths)``'s
    initial weights (no ranks needed: the cast is elementwise with one tensorwise scale):

    * bf16 all-gather: FSDP2 casts the fp32 shard to bf16 (``param_dtype``), ``Float8Linear``
      casts the gathered bf16 weight to e4m3 with the bf16 weight's scale;
    * fp8 all-gather: the fp32 shard is cast to e4m3 directly, with the fp32 weight's scale.

    Per layer: the elements, how many e4m3 codes differ between the two, both scales, and each
    path's error against the fp32 weight, ``||fp8 / scale - W|| / ||W||``."""
    from ..fp8.cast import cast_to_float8

    def rel_error(q, w):
        return ((q.data.float() / q.scale - w).norm() / w.norm()).item()

    rows = []
    for lin in (m for m in tiny_mlp(seed, widths) if isinstance(m, nn.Linear)):
        w = lin.weight.detach()
        direct = cast_to_float8(w, torch.float8_e4m3fn)
        via_bf16 = cast_to_float8(w.to(torch.bfloat16), torch.float8_e4m3fn)
        rows.append({"shape": tuple(w.shape), "numel": w.numel(),
                     "codes differ": (direct.data.view(torch.uint8) != via_bf16.data.view(torch.uint8)).sum().item(),
                     "scale fp32": direct.scale.item(), "scale bf16": via_bf16.scale.item(),
                     "error fp32": rel_error(direct, w), "error bf16": rel_error(via_bf16, w)})
    return {"layers": rows}
