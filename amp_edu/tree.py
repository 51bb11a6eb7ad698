"""Walking the tensors inside nested Python containers (a module's inputs and outputs).

A forward's arguments and results are trees: tensors inside tuples, lists and dicts, nested to any
depth (``(x, {"mask": m})``). :func:`tensors` visits every tensor of such a tree, left to right;
:func:`map_tensors` rebuilds the tree with each tensor replaced. Anything else (ints, strings,
``None``) is a leaf that is skipped or kept as it is. torch has the same idea in
``torch.utils._pytree``; this is the small public version the course needs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

__all__ = ["tensors", "floating", "map_tensors"]


def tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``obj`` (a tensor, or lists/tuples/dicts of them, nested), in order."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from tensors(item)


def floating(obj: Any) -> Iterator[torch.Tensor]:
    """The floating-point (and complex) tensors of :func:`tensors` ``(obj)``."""
    return (t for t in tensors(obj) if t.is_floating_point() or t.is_complex())


def map_tensors(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """``obj`` with every tensor ``t`` replaced by ``fn(t)``; lists, tuples (named ones too) and
    dicts keep their type, other leaves are kept as they are."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return type(obj)((k, map_tensors(fn, v)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(map_tensors(fn, v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(fn, v) for v in obj)
    return obj
