"""One training step of the same model in fp32, AMP fp16 and AMP bf16: time, speed-up, memory.

A step is what a training loop repeats: zero the gradients, forward under autocast, loss,
backward, optimizer step (through a GradScaler for fp16). Matmul speed-ups shrink end to end
because the rest — element-wise ops, the optimizer, casts, Python — does not get faster, and
autocast even adds the casts. This benchmark measures what is left of the matmul speed-up.

Memory is reported two ways: the bytes autograd saves for backward (:mod:`amp_edu.memory`, any
device) and, on a GPU, the allocator's peak during a step (``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import formats, memory
from ..device import DeviceInfo
from ..models import MLP, n_params, seeded
from ..recipes import names, parse_recipe
from ..validate import check_int
from .env import tf32
from .matmul import slow_path
from ..measure.timing import measure

__all__ = ["recipe_dtype", "unsupported", "make_step", "run_train_step"]

def recipe_dtype(recipe: str) -> torch.dtype:
    """The dtype a timed recipe computes its matmuls in (the recipes the benchmark times are the
    registry's ``"timed"`` set, :func:`amp_edu.recipes.names`)."""
    timed = names("timed")
    if recipe not in timed:
        raise ValueError(f"recipe must be one of {', '.join(timed)}; got {recipe!r}")
    built = parse_recipe(recipe)
    return getattr(built, "autocast_dtype", built.param_dtype)


def unsupported(recipe: str, dev: DeviceInfo) -> str | None:
    """Why ``recipe`` cannot run on this device, or ``None``."""
    recipe_dtype(recipe)
    if recipe == "amp_bf16" and dev.device == "cuda" and not dev.bf16_native:
        return "this GPU has no native bf16 (it would be emulated)"
    return None


def make_step(model, x, y, recipe: str):
    """``step()`` doing one full training step of ``model`` on ``(x, y)`` with ``recipe``."""
    recipe_dtype(recipe)                             # one of the benchmarked recipes
    rec = parse_recipe(recipe)                       # the step amp_edu.train runs (amp_edu.recipes)
    rec.before_fit(model, lambda params: torch.optim.AdamW(params, lr=1e-3))

    def step():
        rec.zero_grad()
        with rec.forward_context():
            loss = F.cross_entropy(model(x), y)
        rec.backward(loss)
        rec.step()
        return loss

    return step


def run_train_step(recipe: str, *, batch: int, in_features: int, width: int, depth: int,
                   n_classes: int = 10, device="cpu", repeats: int = 10, min_time_s: float = 0.1,
                   seed: int = 0) -> dict:
    """Time one training step of an :class:`amp_edu.models.MLP` with ``recipe``; a result row."""
    dtype = recipe_dtype(recipe)
    for name, v in (("batch", batch), ("in_features", in_features), ("width", width),
                    ("depth", depth), ("n_classes", n_classes)):
        check_int(v, name, min=1)
    dev = torch.device(device)
    with seeded(seed):
        model = MLP(in_features, n_classes, width=width, depth=depth).to(dev)
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(batch, in_features, generator=g, device=dev)
    y = torch.randint(0, n_classes, (batch,), generator=g, device=dev)
    step = make_step(model, x, y, recipe)
    with tf32(False):  # the fp32 baseline is IEEE fp32, recorded as such
        t = measure(step, device=dev, warmup=2, repeats=repeats, min_time_s=min_time_s)
        peak = memory.peak_cuda_bytes(step, dev) if dev.type == "cuda" else None
    saved = memory.saved_bytes(model, x, dtype=dtype, loss_fn=F.cross_entropy, target=y)
    return {
        "kind": "train_step", "dtype": formats.dtype_name(dtype), "recipe": recipe,
        "shape": [batch, in_features, width, depth, n_classes],
        "model": f"MLP({in_features}→{width}×{depth}→{n_classes}), AdamW, batch {batch}",
        "n_params": n_params(model),
        "median_s": t.median_s, "iqr_s": t.iqr_s, "n_repeats": t.n, "cpu_share": t.cpu_share,
        "samples_per_s": batch / t.median_s,
        "saved_activation_bytes": saved.activation_bytes,
        "saved_weight_copy_bytes": saved.weight_copy_bytes,
        "peak_memory_bytes": peak,
    }


def slow_recipe(recipe: str, dev: DeviceInfo) -> str | None:
    """The slow-path label of the recipe's matmul dtype on this device (see :func:`slow_path`)."""
    return None if recipe == "fp32" else slow_path(formats.dtype_name(recipe_dtype(recipe)), dev)
