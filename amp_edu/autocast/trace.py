"""``trace_dtypes``: what dtype is each tensor under autocast? Measure it.

``trace_dtypes(fn, *args, context=...)`` runs ``fn(*args)`` inside ``context`` (``torch.autocast``,
``amp_edu.autocast`` or nothing) and records every torch call ``fn`` makes — its name, the module
it ran in, the dtypes of its tensor inputs as the caller passed them, and the dtypes of its outputs
as autocast left them. With ``backward=True`` it also back-propagates the (scalar) result outside
the region and records each parameter's gradient dtype.

The recorder is itself a ``TorchFunctionMode``, entered *inside* the autocast region so it sees
each call before any autocast does; it records top-level calls only (``F.softmax``, not the ops
inside it). :func:`side_by_side` lines two traces up.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from .. import formats, tree
from ..hooks import module_stack

__all__ = ["OpRecord", "Trace", "trace_dtypes", "side_by_side", "short_dtype"]

def short_dtype(dtype: torch.dtype) -> str:
    """'fp32', 'bf16', 'fp64', 'int64' ... (:func:`amp_edu.formats.short_name` names them)."""
    return formats.short_name(dtype)


def _dtypes(obj) -> tuple[str, ...]:
    return tuple(short_dtype(t.dtype) for t in tree.tensors(obj))


@dataclass
class OpRecord:
    """One torch call: where it ran, its name, input and output dtypes."""

    where: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass
class Trace:
    """The ops of one run, plus parameter and gradient dtypes (when a module was traced)."""

    ops: list[OpRecord] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    grads: dict[str, str] = field(default_factory=dict)
    result: tuple[str, ...] = ()

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(where, what, inputs, outputs) for every op, then parameters and gradients."""
        out = [(r.where, r.op, ",".join(r.inputs), ",".join(r.outputs)) for r in self.ops]
        out += [(name, "parameter", "", d) for name, d in self.params.items()]
        out += [(name, "gradient", "", d) for name, d in self.grads.items()]
        return out

    def table(self) -> str:
        return _format([("where", "op", "inputs", "output")] + self.rows())


class _Recorder(TorchFunctionMode):
    def __init__(self, where: Callable[[], str]):
        super().__init__()
        self.where = where
        self.ops: list[OpRecord] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", repr(func))
        outputs = _dtypes(out)
        if outputs and name not in ("__get__", "__set__"):
            self.ops.append(OpRecord(self.where(), name, _dtypes((args, kwargs)), outputs))
        return out


@contextlib.contextmanager
def _module_names(fn):
    """Track which submodule of ``fn`` (if it is an nn.Module) is running."""
    with module_stack(fn) as current:
        yield lambda: current() or "(top)"


def _enter(context) -> contextlib.AbstractContextManager:
    if context is None:
        return contextlib.nullcontext()
    if hasattr(context, "__enter__"):
        return context
    if callable(context):
        made = context()
        if hasattr(made, "__enter__"):
            return made
    raise TypeError("context must be None, a context manager (torch.autocast(...), "
                    f"amp_edu.autocast(...)) or a function returning one; got {context!r}")


def trace_dtypes(fn: Callable, *args: Any, context=None, backward: bool = False, **kwargs) -> Trace:
    """Run ``fn(*args, **kwargs)`` in ``context`` and record the dtype of every op's inputs and outputs.

    ``fn`` may be any callable; for an ``nn.Module`` each op is labelled with the submodule that
    ran it and the parameters' dtypes are recorded. ``backward=True`` calls ``.backward()`` on the
    (scalar) result after leaving the region and records the gradients' dtypes.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable (a function or nn.Module), got {type(fn).__name__}")
    ctx = _enter(context)
    trace = Trace()
    with _module_names(fn) as where:
        rec = _Recorder(where)
        with ctx, rec:
            out = fn(*args, **kwargs)
    trace.ops = rec.ops
    trace.result = _dtypes(out)
    if isinstance(fn, torch.nn.Module):
        trace.params = {n: short_dtype(p.dtype) for n, p in fn.named_parameters()}
    if backward:
        if not (isinstance(out, torch.Tensor) and out.numel() == 1 and out.requires_grad):
            raise ValueError("backward=True needs fn to return a scalar tensor that requires grad")
        out.backward()
        if isinstance(fn, torch.nn.Module):
            trace.grads = {n: short_dtype(p.grad.dtype) for n, p in fn.named_parameters() if p.grad is not None}
    return trace


def _format(rows) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def side_by_side(a: Trace, b: Trace, names: tuple[str, str] = ("torch.autocast", "amp_edu.autocast")):
    """Side-by-side table of two traces of the same function; returns ``(text, n_same, n_rows)``."""
    ra, rb = a.rows(), b.rows()
    rows = [("where", "op", "inputs", names[0], names[1], "same")]
    same = 0
    for i in range(max(len(ra), len(rb))):
        x = ra[i] if i < len(ra) else ("", "", "", "-")
        y = rb[i] if i < len(rb) else ("", "", "", "-")
        ok = x[:2] == y[:2] and x[3] == y[3]
        same += ok
        rows.append((x[0] or y[0], x[1] or y[1], x[2] or y[2], x[3], y[3], "yes" if ok else "NO"))
    return _format(rows), same, len(rows) - 1
