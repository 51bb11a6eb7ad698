"""A tiny GPT-2 built from a config, trained on the course's own text: no download anywhere.

Lesson 14 runs Hugging Face's ``Trainer`` for real, so it needs a ``transformers`` model and a data
set. Both come from what is already here:

* the model is ``GPT2LMHeadModel(GPT2Config(...))`` — random weights from a config, 2 layers and a
  64-wide embedding by default (about 0.1 M parameters), seeded by :func:`tiny_gpt2`;
* the data is *The Zen of Python* (``amp_edu.data.zen_text()``) as characters: every window of
  ``block_size`` characters at stride ``stride`` is one example, ``{"input_ids": ids, "labels": ids}``
  — the labels are the inputs themselves, because a Hugging Face causal LM shifts them inside its
  loss (position *t* predicts label *t + 1*).

Sizes for the lesson come from :class:`Sizes` through :func:`amp_edu.device.pick` (tiny in smoke
mode).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..data import zen_text
from ..device import pick
from ..validate import check_int, check_number

__all__ = ["Sizes", "zen_vocab", "zen_lm_dataset", "tiny_gpt2"]


@dataclass(frozen=True)
class Sizes:
    """One run's sizes: ``steps`` optimizer steps of ``batch_size`` windows of ``block_size`` chars
    (windows every ``stride`` characters), learning rate ``lr``, ``seed`` for the model, the
    Trainer's ``set_seed`` and its sampler, and the GPT-2's ``n_layer`` × ``n_embd`` (``n_head``)."""

    steps: int = 24
    batch_size: int = 16
    block_size: int = 32
    stride: int = 8
    lr: float = 1e-3
    seed: int = 0
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4

    def __post_init__(self):
        for name in ("steps", "batch_size", "block_size", "stride", "n_layer", "n_embd", "n_head"):
            check_int(getattr(self, name), name, min=1)
        check_int(self.seed, "seed", min=0)
        check_number(self.lr, "lr", min=0.0)
        if self.block_size > 256:
            raise ValueError(f"block_size must be an int in [1, 256], got {self.block_size}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")

    @classmethod
    def default(cls, **overrides) -> "Sizes":
        """The lesson's sizes for this mode (fewer steps in smoke mode), with ``overrides``."""
        kw = dict(steps=pick(smoke=6, cpu=24, gpu=24))
        kw.update(overrides)
        return cls(**kw)


def zen_vocab() -> str:
    """The characters of *The Zen of Python*, sorted: token id = index in this string."""
    return "".join(sorted(set(zen_text())))


def zen_lm_dataset(block_size: int = 32, stride: int = 8) -> list[dict]:
    """Every window of ``block_size`` characters at stride ``stride``, as ``{"input_ids", "labels"}``
    (int64 tensors of length ``block_size``, labels equal to the inputs). A plain list: the Trainer
    accepts any object with ``__len__`` and ``__getitem__``."""
    block_size = check_int(block_size, "block_size", min=2, max=256)
    stride = check_int(stride, "stride", min=1)
    vocab = zen_vocab()
    ids = torch.tensor([vocab.index(c) for c in zen_text()], dtype=torch.long)
    return [{"input_ids": w.clone(), "labels": w.clone()} for w in ids.unfold(0, block_size, stride)]


def tiny_gpt2(sizes: Sizes | None = None, *, vocab_size: int | None = None):
    """A randomly initialised ``GPT2LMHeadModel`` for ``sizes`` (default :meth:`Sizes.default`),
    built under ``torch.manual_seed(sizes.seed)``; ``vocab_size`` defaults to the Zen's characters.
    Dropout keeps GPT-2's default 0.1, so the random state at each forward matters (lesson 14 §3)."""
    from ._lib import load
    transformers, _ = load()
    sizes = Sizes.default() if sizes is None else sizes
    if not isinstance(sizes, Sizes):
        raise TypeError(f"sizes must be an amp_edu.hf.Sizes, got {type(sizes).__name__}")
    vocab_size = len(zen_vocab()) if vocab_size is None else check_int(vocab_size, "vocab_size", min=2)
    cfg = transformers.GPT2Config(vocab_size=vocab_size, n_positions=sizes.block_size, n_embd=sizes.n_embd,
                                  n_layer=sizes.n_layer, n_head=sizes.n_head, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(sizes.seed)
    return transformers.GPT2LMHeadModel(cfg)
