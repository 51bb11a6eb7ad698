"""Small, real training tasks that need no download — so every lesson trains something real.

Mixed-precision failures only show on real training: gradients with a real spread of magnitudes,
weights that really move. These tasks are tiny (seconds on a laptop CPU) yet genuinely learnable,
fully generated from a seed, and bigger on a GPU (sizes through :func:`amp_edu.device.pick`).

=========== ============== ==================================================================
name        kind           what it is
=========== ============== ==================================================================
``blobs``   classification 8 Gaussian clusters in 32 dimensions, overlapping (MLP)
``spirals`` classification 3 interleaved 2-D spirals: needs a non-linear model (MLP)
``shapes``  classification 1×16×16 images: stripes (3 orientations), squares, rings, crosses (CNN)
``chars``   language model next character of *The Zen of Python* (``import this``) (transformer)
=========== ============== ==================================================================

``chars`` has only 856 characters, so it has no held-out text: its eval set is the whole text
once (windows at stride ``block_size``) and its metric says how well the model has *learned* it.
The classification tasks hold out 20% of their examples.

Every task is a :class:`Task` with the same interface, so one training loop serves them all::

    task = get_task("shapes", seed=0)            # tensors on amp_edu.device.pick_device()
    x, y = task.batch(64, generator)             # a random training batch
    loss = task.loss(model(x), y)                # cross-entropy (per character for ``chars``)
    acc = task.accuracy(model(x), y)             # fraction right (next-character accuracy)
    for x, y in task.eval_batches(256): ...      # the held-out set, in order
    task.evaluate(model)                         # {"loss": ..., "accuracy": ...} on it

Inputs are float32 (``chars``: int64 token ids, shape ``(batch, block_size)``); labels are int64
(``chars``: the next token at every position). ``task.n_classes`` is the number of outputs a model
needs (``chars``: the vocabulary size); ``task.input_shape`` the shape of one example.
"""

from __future__ import annotations

import codecs
import math
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn.functional as F

from .device import pick, pick_device
from .validate import check_int

__all__ = ["Task", "TASKS", "get_task", "zen_text", "make_blobs", "make_spirals", "make_shapes",
           "SHAPE_CLASSES"]


@dataclass
class Task:
    """One dataset, split into train and eval, with the loss and metric that go with it."""

    name: str
    kind: str                       # "classification" or "lm"
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    n_classes: int                  # model outputs per example (vocabulary size for "lm")
    input_shape: tuple              # shape of one example (block_size,) for "lm"
    vocab: str = ""                 # "lm" only: the characters, index = token id
    meta: dict = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return self.x_train.device

    @property
    def n_train(self) -> int:
        return self.x_train.shape[0]

    def to(self, device) -> "Task":
        """The same task with its tensors on ``device``."""
        d = torch.device(device)
        return Task(self.name, self.kind, self.x_train.to(d), self.y_train.to(d), self.x_eval.to(d),
                    self.y_eval.to(d), self.n_classes, self.input_shape, self.vocab, dict(self.meta))

    def batch(self, batch_size: int, generator: torch.Generator | None = None):
        """A random training batch ``(x, y)`` of ``batch_size`` examples (with replacement).

        The indices are drawn on the CPU from ``generator``, so a seeded generator gives the same
        batches on every device.
        """
        batch_size = check_int(batch_size, "batch_size", min=1)
        idx = torch.randint(0, self.n_train, (batch_size,), generator=generator)
        idx = idx.to(self.device)
        return self.x_train[idx], self.y_train[idx]

    def eval_batches(self, batch_size: int = 512) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The held-out set in order, in batches of ``batch_size``."""
        batch_size = check_int(batch_size, "batch_size", min=1)
        for i in range(0, self.x_eval.shape[0], batch_size):
            yield self.x_eval[i:i + batch_size], self.y_eval[i:i + batch_size]

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy, computed in float32 whatever the logits' dtype.

        (Upcasting here is what autocast does for losses; pure-fp16 recipes keep their fp16
        logits, the upcast only makes the *loss value* comparable across recipes.)
        """
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

    def accuracy(self, logits: torch.Tensor, y: torch.Tensor) -> float:
        """Fraction of examples (``lm``: of characters) whose arg-max prediction is right."""
        pred = logits.reshape(-1, logits.shape[-1]).argmax(-1)
        return (pred == y.reshape(-1)).float().mean().item()

    @torch.no_grad()
    def evaluate(self, model, *, batch_size: int = 512, input_dtype: torch.dtype | None = None,
                 context=None) -> dict:
        """``{"loss": ..., "accuracy": ...}`` of ``model`` over the eval set (example-weighted).

        ``input_dtype`` casts float inputs (e.g. ``torch.float16`` for a ``.half()`` model);
        ``context`` is a zero-argument callable returning a context manager to run the forward
        in (e.g. ``lambda: torch.autocast("cpu", torch.bfloat16)``). The model's train/eval mode
        is restored afterwards.
        """
        was_training = model.training
        model.eval()
        tot_loss = tot_acc = 0.0
        n = 0
        try:
            for x, y in self.eval_batches(batch_size):
                if input_dtype is not None and x.is_floating_point():
                    x = x.to(input_dtype)
                if context is None:
                    logits = model(x)
                else:
                    with context():
                        logits = model(x)
                k = y.numel()
                tot_loss += self.loss(logits, y).item() * k
                tot_acc += self.accuracy(logits, y) * k
                n += k
        finally:
            model.train(was_training)
        return {"loss": tot_loss / n, "accuracy": tot_acc / n}

    def __repr__(self) -> str:
        return (f"Task({self.name!r}, {self.kind}, train={tuple(self.x_train.shape)}, "
                f"eval={tuple(self.x_eval.shape)}, n_classes={self.n_classes}, device={self.device})")


def _split(x, y, eval_frac: float, gen: torch.Generator):
    perm = torch.randperm(x.shape[0], generator=gen)
    n_eval = max(1, int(round(x.shape[0] * eval_frac)))
    ev, tr = perm[:n_eval], perm[n_eval:]
    return x[tr], y[tr], x[ev], y[ev]


def make_blobs(n: int, *, n_classes: int = 8, dim: int = 32, spread: float = 2.5, seed: int = 0):
    """``n`` points from ``n_classes`` Gaussian clusters in ``dim`` dimensions (centres ~ N(0, 1)).

    ``spread`` is the clusters' standard deviation relative to the centres' scale; at 2.5 they
    overlap enough that accuracy climbs over many steps and stays short of 100%.
    """
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(n_classes, dim, generator=gen)
    y = torch.randint(0, n_classes, (n,), generator=gen)
    x = centres[y] + spread * torch.randn(n, dim, generator=gen)
    return x, y


def make_spirals(n: int, *, n_classes: int = 3, noise: float = 0.15, seed: int = 0):
    """``n`` 2-D points on ``n_classes`` interleaved spiral arms (radius 0 → 1, 1.5 turns)."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, n_classes, (n,), generator=gen)
    r = torch.rand(n, generator=gen)
    theta = 3 * math.pi * r + 2 * math.pi * y / n_classes
    x = torch.stack([r * torch.cos(theta), r * torch.sin(theta)], 1)
    x = x + noise * r.unsqueeze(1) * torch.randn(n, 2, generator=gen)
    return x * 2.0, y


SHAPE_CLASSES = ("horizontal stripes", "vertical stripes", "diagonal stripes", "square", "ring", "cross")


def make_shapes(n: int, *, size: int = 16, noise: float = 0.3, seed: int = 0):
    """``n`` procedurally drawn ``1×size×size`` images of the :data:`SHAPE_CLASSES`.

    Stripes have a random period (3–6 px) and phase; squares, rings and crosses a random centre and
    size. Pixels are 0/1 plus Gaussian ``noise``, then standardised (mean 0, std 1 overall).
    """
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, len(SHAPE_CLASSES), (n,), generator=gen)
    u = lambda *s: torch.rand(*s, generator=gen)  # noqa: E731
    r = torch.arange(size, dtype=torch.float32)
    yy, xx = r.view(1, size, 1), r.view(1, 1, size)
    period = (3 + 4 * u(n)).floor().view(n, 1, 1)
    phase = (u(n) * 6).view(n, 1, 1)
    stripes = lambda t: (((t + phase) % period) < period / 2).float()  # noqa: E731
    cy = (size * (0.3 + 0.4 * u(n))).view(n, 1, 1)
    cx = (size * (0.3 + 0.4 * u(n))).view(n, 1, 1)
    half = (size * (0.15 + 0.15 * u(n))).view(n, 1, 1)
    dist = torch.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
    imgs = torch.stack([
        stripes(yy.expand(n, size, size)),
        stripes(xx.expand(n, size, size)),
        stripes((xx + yy).expand(n, size, size)),
        (((yy - cy).abs() <= half) & ((xx - cx).abs() <= half)).float(),
        ((dist - half).abs() <= 1.0).float(),
        ((((yy - cy).abs() <= 1.0) & ((xx - cx).abs() <= half))
         | (((xx - cx).abs() <= 1.0) & ((yy - cy).abs() <= half))).float(),
    ], 1)                                                  # (n, classes, size, size)
    x = imgs[torch.arange(n), y] + noise * torch.randn(n, size, size, generator=gen)
    x = (x - x.mean()) / x.std()
    return x.unsqueeze(1), y


def zen_text() -> str:
    """*The Zen of Python*: ships with every Python as ``this.s``, ROT13-encoded."""
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the poem
        import this
    return codecs.decode(this.s, "rot13")


def _chars(block_size: int):
    text = zen_text()
    vocab = "".join(sorted(set(text)))
    ids = torch.tensor([vocab.index(c) for c in text], dtype=torch.long)
    # every window of block_size + 1 characters is one example: x = first T, y = the next T
    windows = ids.unfold(0, block_size + 1, 1)
    # 856 characters leave nothing to generalise to: the task is to *learn this text*, so the
    # eval set is every window at stride block_size (the whole text once), in order.
    ev = windows[::block_size]
    return windows[:, :-1], windows[:, 1:], ev[:, :-1], ev[:, 1:], vocab


TASKS = ("blobs", "spirals", "shapes", "chars")


def get_task(name: str, *, seed: int = 0, device=None, n: int | None = None,
             block_size: int | None = None) -> Task:
    """Build task ``name`` (one of :data:`TASKS`), seeded, on ``device`` (default: the course's).

    ``n`` (examples, classification tasks) and ``block_size`` (``chars``) default to sizes from
    :func:`amp_edu.device.pick`: tiny in smoke mode, small on a CPU, larger on a GPU.
    """
    if not isinstance(name, str) or name not in TASKS:
        raise ValueError(f"unknown task {name!r}; accepted: {', '.join(TASKS)}")
    seed = check_int(seed, "seed")
    if n is not None:
        n = check_int(n, "n", min=8)
    if block_size is not None:
        block_size = check_int(block_size, "block_size", min=1, max=256)
    dev = torch.device(device) if device is not None else pick_device()
    gen = torch.Generator().manual_seed(seed + 1)
    if name == "chars":
        T = block_size or pick(smoke=16, cpu=32, gpu=64, device=dev)
        xt, yt, xe, ye, vocab = _chars(T)
        task = Task(name, "lm", xt, yt, xe, ye, len(vocab), (T,), vocab, {"text_chars": len(zen_text())})
        return task.to(dev)
    if name == "blobs":
        n = n or pick(smoke=1024, cpu=8192, gpu=65536, device=dev)
        x, y = make_blobs(n, seed=seed)
        k = 8
    elif name == "spirals":
        n = n or pick(smoke=1024, cpu=8192, gpu=65536, device=dev)
        x, y = make_spirals(n, seed=seed)
        k = 3
    else:
        n = n or pick(smoke=1024, cpu=6144, gpu=49152, device=dev)
        x, y = make_shapes(n, seed=seed)
        k = len(SHAPE_CLASSES)
    xt, yt, xe, ye = _split(x, y, 0.2, gen)
    return Task(name, "classification", xt, yt, xe, ye, k, tuple(x.shape[1:])).to(dev)
