"""Lesson 13's explorer: one op on a bf16/fp16 input, as the ATen graph Inductor lowers shows it.

:class:`CastExplorer`: pick an op and a low-precision dtype; see every node of the forward graph
that AOTAutograd (with Inductor's decompositions) makes of it, with the dtype each node produces,
and a sentence saying whether the math ran in the input's dtype or was upcast to fp32. The logic is
:func:`op_graph` (traced with :func:`amp_edu.compile.capture`: no C++ is compiled, about a second
per op, remembered after the first time).
"""

from __future__ import annotations

import functools
import html

import ipywidgets as W
import torch

from .. import compile as comp
from .base import Explorer

__all__ = ["OPS", "op_graph", "graph_text", "CastExplorer", "cast_explorer"]

#: the ops the explorer offers: name -> function of one tensor
OPS = {
    "softmax": lambda t: t.softmax(-1),
    "layer_norm": lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:]),
    "gelu": torch.nn.functional.gelu,
    "relu": torch.relu,
    "add": lambda t: t + t,
    "mul by a constant": lambda t: t * 3.0,
    "sum": lambda t: t.sum(-1),
    "exp": torch.exp,
    "sigmoid": torch.sigmoid,
}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@functools.lru_cache(maxsize=None)
def op_graph(op: str, dtype: str = "bf16") -> dict:
    """Trace ``OPS[op]`` on an ``(4, 16)`` input of ``dtype``; return the graph's rows
    (``(node, ATen op, dtype)``), its casts, and the dtype the computation ran in."""
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0)).to(_DTYPES[dtype])
    fn = OPS[op]
    gm = comp.capture(lambda t: fn(t), x).forward[0]
    rows = comp.dtype_rows(gm)
    casts = comp.casts(gm)
    compute = [r for r in rows if r[1] not in comp.CAST_OPS | comp.VIEW_OPS]
    ran_in = sorted({r[2] for r in compute})
    return {"rows": rows, "casts": casts, "computes_in": ran_in, "upcast": any(c[2] == "float32" for c in casts)}


def graph_text(op: str, dtype: str = "bf16") -> str:
    """The explorer's text for :func:`op_graph` (one line per node, then a sentence)."""
    g = op_graph(op, dtype)
    lines = [f"{name:<24}{aten:<22}{dt}" for name, aten, dt in g["rows"]]
    if g["upcast"]:
        verdict = (f"{op} on {dtype}: upcast to float32, computed in {', '.join(g['computes_in'])}, "
                   f"{'rounded back to ' + dtype if any(c[2] != 'float32' for c in g['casts']) else 'result kept in fp32'}.")
    else:
        verdict = f"{op} on {dtype}: no cast in the graph; it computes in {', '.join(g['computes_in'])}."
    return "\n".join(lines) + "\n\n" + verdict


class CastExplorer(Explorer):
    """An op and a dtype in; the traced ATen graph with dtypes out."""

    def __init__(self, op: str = "softmax", dtype: str = "bf16"):
        self.op = W.Dropdown(options=list(OPS), value=op, description="op")
        self.dtype = W.Dropdown(options=list(_DTYPES), value=dtype, description="input")
        self.text = W.HTML()
        self._wire((self.op, self.dtype), W.HBox([self.op, self.dtype]), self.text)

    def update(self):
        self.text.value = f"<pre>{html.escape(graph_text(self.op.value, self.dtype.value))}</pre>"


def cast_explorer(**kw) -> CastExplorer:
    """The cast explorer, ready to display."""
    return CastExplorer(**kw)
