"""Small models for the course's tasks: an MLP, a CNN and a tiny character transformer.

They are deliberately plain ``nn.Module`` code (no fused kernels, attention written out), so that
every layer can be hooked, cast to fp16 with ``.half()``, or run under autocast, and its gradients
inspected layer by layer (:mod:`amp_edu.gradients`).

=============== ============================================================================
``mlp``         flatten → [Linear → GELU] × depth → Linear          (any classification task)
``cnn``         [Conv3×3 → ReLU → MaxPool] × 2 → Linear              (``shapes``)
``transformer`` token + position embedding → TransformerBlock × n_layers → LayerNorm → Linear
                (``chars``; a block is pre-norm causal self-attention + a GELU MLP)
=============== ============================================================================

Build one for a task by name; the task fixes the input shape and the number of outputs::

    task = amp_edu.data.get_task("chars")
    model = amp_edu.models.build("transformer", task, seed=0)   # on task.device, float32
    logits = model(x)                                           # (batch, T, vocab) for chars

``build(name, task, seed=...)`` is deterministic: the same seed gives the same weights on every
device. :data:`DEFAULT_MODEL` names each task's natural model; ``build(None, task)`` uses it.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .device import pick
from .validate import check_int

__all__ = ["MLP", "CNN", "TransformerBlock", "CharTransformer", "MODELS", "DEFAULT_MODEL", "build",
           "n_params", "seeded", "mlp"]


@contextlib.contextmanager
def seeded(seed: int):
    """Run the block with torch's global CPU RNG seeded to ``seed``, and put the RNG back after.

    Modules draw their initial weights from the global RNG, so building one inside ``seeded(s)``
    gives the same weights every time (and on every device, if built on the CPU first), without
    disturbing the random numbers the learner's own code draws next."""
    seed = check_int(seed, "seed")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def mlp(widths: Sequence[int], *, activation: Callable[[], nn.Module] = nn.ReLU, final_activation: bool = False,
        seed: int | None = None, device=None, dtype: torch.dtype | None = None) -> nn.Sequential:
    """``Linear(w0, w1) → act → Linear(w1, w2) → ... → Linear(w_{n-2}, w_{n-1})`` as one
    ``nn.Sequential`` (an ``act`` after the last Linear too if ``final_activation``).

    ``activation`` is a module class (``nn.ReLU``, ``nn.GELU``...). With a ``seed`` the weights
    come from :func:`seeded` (the same seed gives the same weights); then the model is moved to
    ``device`` / ``dtype``."""
    if not isinstance(widths, (list, tuple)) or len(widths) < 2:
        raise ValueError(f"widths must be a list of at least 2 ints, got {widths!r}")
    widths = [check_int(w, "each width", min=1) for w in widths]
    with (seeded(seed) if seed is not None else contextlib.nullcontext()):
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            layers.append(nn.Linear(a, b))
            if final_activation or i < len(widths) - 2:
                layers.append(activation())
    return nn.Sequential(*layers).to(device=device, dtype=dtype)


class MLP(nn.Module):
    """``in_features`` → ``depth`` hidden layers of ``width`` (GELU) → ``n_classes`` logits."""

    def __init__(self, in_features: int, n_classes: int, width: int = 128, depth: int = 3):
        super().__init__()
        depth = check_int(depth, "depth", min=0)
        self.body = (mlp([in_features] + [width] * depth, activation=nn.GELU, final_activation=True)
                     if depth else nn.Sequential())
        self.head = nn.Linear(width if depth else in_features, n_classes)

    def forward(self, x):
        return self.head(self.body(x.flatten(1)))


class CNN(nn.Module):
    """Two 3×3 conv blocks (``channels``, 2×``channels``) with ReLU and 2×2 max-pooling, then a
    linear classifier. For ``1×H×W`` inputs with H, W divisible by 4."""

    def __init__(self, input_shape: tuple, n_classes: int, channels: int = 16):
        super().__init__()
        c, h, w = input_shape
        if h % 4 or w % 4:
            raise ValueError(f"CNN needs H and W divisible by 4, got input_shape={input_shape}")
        self.features = nn.Sequential(
            nn.Conv2d(c, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * channels * (h // 4) * (w // 4), n_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class TransformerBlock(nn.Module):
    """Pre-norm block: ``x + attn(ln1(x))`` then ``x + mlp(ln2(x))``; causal multi-head attention.

    Attention is written out — ``softmax(q @ k^T / sqrt(d_head))`` — so its intermediate values
    (the scores whose ``exp`` overflows fp16, the sums) are visible and hookable.
    """

    def __init__(self, d_model: int, n_heads: int, mlp_ratio: int = 4):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, mlp_ratio * d_model)
        self.fc_out = nn.Linear(mlp_ratio * d_model, d_model)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class CharTransformer(nn.Module):
    """A tiny GPT: token and learned position embeddings, ``n_layers`` blocks, a linear head."""

    def __init__(self, vocab_size: int, block_size: int, d_model: int = 64, n_heads: int = 4,
                 n_layers: int = 2):
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.Sequential(*[TransformerBlock(d_model, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx):
        T = idx.shape[1]
        if T > self.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.block_size}")
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        return self.head(self.ln_f(self.blocks(x)))


MODELS = ("mlp", "cnn", "transformer")
DEFAULT_MODEL = {"blobs": "mlp", "spirals": "mlp", "shapes": "cnn", "chars": "transformer"}


def n_params(model: nn.Module) -> int:
    """Number of scalar parameters."""
    return sum(p.numel() for p in model.parameters())


def build(name: str | None, task, *, seed: int = 0, **kwargs) -> nn.Module:
    """Model ``name`` (one of :data:`MODELS`, or ``None`` for the task's default) sized for ``task``.

    ``kwargs`` override the size (``width``/``depth`` for mlp, ``channels`` for cnn,
    ``d_model``/``n_heads``/``n_layers`` for transformer); defaults come from
    :func:`amp_edu.device.pick`. Weights come from ``torch.manual_seed(seed)``-style seeding of a
    private generator, so building a model does not disturb the global RNG.
    """
    if name is None:
        name = DEFAULT_MODEL.get(getattr(task, "name", None))
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; accepted: {', '.join(MODELS)}")
    if not hasattr(task, "kind") or not hasattr(task, "n_classes"):
        raise TypeError(f"task must be an amp_edu.data.Task, got {type(task).__name__}")
    seed = check_int(seed, "seed")
    dev = task.device
    if name == "transformer":
        if task.kind != "lm":
            raise ValueError(f"the transformer is a language model: it needs the 'chars' task, got {task.name!r}")
        cfg = dict(d_model=pick(smoke=32, cpu=64, gpu=256, device=dev), n_heads=4,
                   n_layers=pick(smoke=1, cpu=2, gpu=4, device=dev))
        cfg.update(kwargs)
        ctor = lambda: CharTransformer(task.n_classes, task.input_shape[0], **cfg)  # noqa: E731
    elif task.kind == "lm":
        raise ValueError(f"model {name!r} is a classifier; for the 'chars' task use 'transformer'")
    elif name == "cnn":
        if len(task.input_shape) != 3:
            raise ValueError(f"the CNN needs image inputs (C, H, W), task {task.name!r} has {task.input_shape}")
        cfg = dict(channels=pick(smoke=8, cpu=16, gpu=32, device=dev))
        cfg.update(kwargs)
        ctor = lambda: CNN(task.input_shape, task.n_classes, **cfg)  # noqa: E731
    else:
        cfg = dict(width=pick(smoke=64, cpu=128, gpu=512, device=dev), depth=3)
        cfg.update(kwargs)
        ctor = lambda: MLP(math.prod(task.input_shape), task.n_classes, **cfg)  # noqa: E731
    # Build on the CPU under a forked RNG so weights are identical on every device.
    with seeded(seed):
        model = ctor()
    return model.to(dev)
