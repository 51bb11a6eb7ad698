"""Eager mode's side of the comparison: one kernel per ATen op, each reading and writing memory.

Eagerly, every ATen op that computes is one kernel: it reads its inputs from memory and writes its
output back, and an autocast cast (``aten._to_copy``) is an op like any other. A
``torch.utils._python_dispatch.TorchDispatchMode`` sees every ATen op *after* autocast and
autograd have run (it sits at the Python dispatch key, below both), so it sees the casts too.
:func:`count_eager` counts the ops that are kernels (views only re-describe memory and are
skipped) and the bytes each reads and writes (its tensor inputs and outputs, whole), the same
accounting Inductor's ``count_bytes`` applies per kernel (:func:`amp_edu.compile.inductor.run_and_count`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .capture import VIEW_OPS

__all__ = ["EagerCount", "count_eager"]


@dataclass
class EagerCount:
    """Kernels (computing ATen ops) one eager call ran, by op, and the bytes they read and wrote."""

    ops: Counter = field(default_factory=Counter)
    bytes: int = 0

    @property
    def kernels(self) -> int:
        return sum(self.ops.values())


def _nbytes(obj) -> int:
    leaves, _ = tree_flatten(obj)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


class _Counter(TorchDispatchMode):
    def __init__(self, into: EagerCount):
        super().__init__()
        self.into = into

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        if name not in VIEW_OPS and not name.startswith("_has") and not name.startswith("is_"):
            self.into.ops[name] += 1
            self.into.bytes += _nbytes((args, kwargs)) + _nbytes(out)
        return out


def count_eager(fn: Callable[[], object]) -> EagerCount:
    """Run ``fn()`` eagerly and count its kernels and the bytes they move (see the module docstring)."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable that runs the eager computation, got {type(fn).__name__}")
    result = EagerCount()
    with _Counter(result):
        fn()
    return result
