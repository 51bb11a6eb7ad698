"""Lesson 05's explorer: pick an op, a policy and input dtypes; see what autocast does and why.

:class:`AutocastExplorer` — an op (matmul-like, fp32-list, promote, banned or unlisted), the
policy (CUDA table or CPU table), the region's dtype and the dtypes of two inputs. It shows the op's
category, the dtypes the inputs are cast to, the result dtype under ``amp_edu.autocast`` — and,
for the CPU policy, under ``torch.autocast`` too — with the reason for the category.
The logic is :func:`explain_op`.
"""

from __future__ import annotations

import html

import ipywidgets as W
import torch
import torch.nn.functional as F

from .. import formats
from ..autocast import autocast
from ..autocast.policy import decide, kind_of
from ..tree import tensors
from ..autocast.trace import short_dtype
from .base import Explorer

__all__ = ["OPS", "DTYPES", "explain_op", "AutocastExplorer", "autocast_explorer"]

# The input dtypes on offer, by their short names (amp_edu.formats names them; fp64 is never cast).
DTYPES = {formats.short_name(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64)}


def _t(shape, dtype, seed, positive=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g) if positive else torch.randn(shape, generator=g)
    return x.to(dtype)


# name -> (ATen op, builder(a_dtype, b_dtype) -> (callable, args)); unary ops ignore b.
OPS = {
    "torch.mm": ("mm", lambda a, b: (torch.mm, (_t((4, 4), a, 1), _t((4, 4), b, 2)))),
    "F.linear": ("linear", lambda a, b: (F.linear, (_t((2, 4), a, 1), _t((3, 4), b, 2)))),
    "F.conv2d": ("conv2d", lambda a, b: (F.conv2d, (_t((1, 2, 5, 5), a, 1), _t((3, 2, 3, 3), b, 2)))),
    "torch.exp": ("exp", lambda a, b: (torch.exp, (_t((4,), a, 1),))),
    "x ** 2": ("pow", lambda a, b: (torch.pow, (_t((4,), a, 1), 2))),
    "F.softmax": ("softmax", lambda a, b: (F.softmax, (_t((2, 4), a, 1), -1))),
    "F.layer_norm": ("layer_norm", lambda a, b: (F.layer_norm, (_t((2, 4), a, 1), (4,)))),
    "Tensor.sum": ("sum", lambda a, b: (torch.sum, (_t((4,), a, 1),))),
    "torch.cumsum": ("cumsum", lambda a, b: (torch.cumsum, (_t((4,), a, 1), 0))),
    "F.mse_loss": ("mse_loss", lambda a, b: (F.mse_loss, (_t((4,), a, 1), _t((4,), b, 2)))),
    "F.cross_entropy": ("cross_entropy_loss", lambda a, b: (F.cross_entropy, (_t((2, 4), a, 1), torch.tensor([0, 3])))),
    "F.binary_cross_entropy": ("binary_cross_entropy",
                               lambda a, b: (F.binary_cross_entropy, (_t((4,), a, 1, True), _t((4,), b, 2, True)))),
    "torch.cat": ("cat", lambda a, b: (torch.cat, ([_t((2,), a, 1), _t((2,), b, 2)],))),
    "torch.dot": ("dot", lambda a, b: (torch.dot, (_t((4,), a, 1), _t((4,), b, 2)))),
    "torch.addcmul": ("addcmul", lambda a, b: (torch.addcmul, (_t((4,), a, 1), _t((4,), b, 2), _t((4,), b, 3)))),
    "x + y (unlisted)": ("add", lambda a, b: (torch.add, (_t((4,), a, 1), _t((4,), b, 2)))),
    "F.gelu (unlisted)": ("gelu", lambda a, b: (F.gelu, (_t((4,), a, 1),))),
}

WHY = {
    "lower": "matmul-like: fast on Tensor Cores / AMX, and the kernel accumulates in fp32, so "
             "low-precision inputs cost little accuracy",
    "fp32": "the result can overflow fp16 (exp, pow, sums of squares) or needs more than 8-11 bits: "
            "inputs are cast to fp32",
    "fp32_dtype": "a reduction or normalisation: inputs stay as they are, the kernel is asked for an "
                  "fp32 result (dtype=torch.float32)",
    "promote": "needs all inputs in one dtype: everything goes to the widest input dtype, so no input "
               "loses precision",
    "banned": "unsafe in fp16 (log of a probability rounded to 1): use the *_with_logits version",
    None: "not in this policy's table: runs in the dtype of its inputs (ordinary type promotion applies)",
}


def _outcome(fn, args):
    try:
        out = fn(*args)
    except RuntimeError as exc:
        return f"RuntimeError: {str(exc).splitlines()[0]}"
    return short_dtype(out.dtype)


def explain_op(op: str, policy: str = "cuda", dtype: str = "fp16", a: str = "fp32", b: str = "fp32") -> dict:
    """What autocast does to op ``op`` (a key of :data:`OPS`) with inputs of dtypes ``a`` and ``b``."""
    if op not in OPS:
        raise ValueError(f"op must be one of {sorted(OPS)}, got {op!r}")
    for name, v in (("dtype", dtype), ("a", a), ("b", b)):
        if v not in DTYPES:
            raise ValueError(f"{name} must be one of {sorted(DTYPES)}, got {v!r}")
    if dtype not in ("fp16", "bf16"):
        raise ValueError(f"the region's dtype must be 'fp16' or 'bf16', got {dtype!r}")
    if policy not in ("cuda", "cpu"):
        raise ValueError(f"policy must be 'cuda' or 'cpu', got {policy!r}")
    aten, build = OPS[op]
    fn, args = build(DTYPES[a], DTYPES[b])
    low = DTYPES[dtype]
    kind = kind_of(policy, aten, args, {})
    try:
        cast_args = decide(kind, args, {}, device_type="cpu", dtype=low)[0] if kind else args
        cast = [short_dtype(t.dtype) for t in tensors(cast_args)]
    except RuntimeError:
        cast = []
    with autocast("cpu", dtype=low, policy=policy):
        ours = _outcome(fn, args)
    theirs = None
    if policy == "cpu":
        with torch.autocast("cpu", dtype=low):
            theirs = _outcome(fn, args)
    return {"op": op, "aten": aten, "policy": policy, "kind": kind or "untouched",
            "inputs": [short_dtype(t.dtype) for t in tensors(args)], "cast_inputs": cast,
            "ours": ours, "torch": theirs, "why": WHY[kind]}


def explain_html(e: dict) -> str:
    torch_row = (f"<tr><td>torch.autocast</td><td><b>{html.escape(e['torch'])}</b></td></tr>" if e["torch"]
                 else "<tr><td>torch.autocast</td><td>(the CUDA table runs only on a GPU)</td></tr>")
    return (f"<table><tr><td>op</td><td><code>{html.escape(e['op'])}</code> (ATen <code>{e['aten']}</code>), "
            f"{e['policy']} policy</td></tr>"
            f"<tr><td>category</td><td><b>{e['kind']}</b>: {html.escape(e['why'])}</td></tr>"
            f"<tr><td>inputs</td><td>{', '.join(e['inputs'])} &rarr; {', '.join(e['cast_inputs']) or 'error'}</td></tr>"
            f"<tr><td>amp_edu.autocast</td><td><b>{html.escape(e['ours'])}</b></td></tr>{torch_row}</table>")


class AutocastExplorer(Explorer):
    """Controls for op, policy, region dtype and two input dtypes; an HTML panel with the answer."""

    def __init__(self, op: str = "F.softmax", policy: str = "cuda", dtype: str = "fp16", a: str = "fp16",
                 b: str = "fp32"):
        self.op = W.Dropdown(options=list(OPS), value=op, description="op")
        self.policy = W.ToggleButtons(options=["cuda", "cpu"], value=policy, description="policy")
        self.dtype = W.ToggleButtons(options=["fp16", "bf16"], value=dtype, description="region")
        self.a = W.Dropdown(options=list(DTYPES), value=a, description="input A")
        self.b = W.Dropdown(options=list(DTYPES), value=b, description="input B")
        self.out = W.HTML()
        self._wire((self.op, self.policy, self.dtype, self.a, self.b),
                   self.op, self.policy, self.dtype, W.HBox([self.a, self.b]), self.out)

    def update(self) -> dict:
        e = explain_op(self.op.value, self.policy.value, self.dtype.value, self.a.value, self.b.value)
        self.out.value = explain_html(e)
        self.last = e
        return e


def autocast_explorer(**kwargs) -> AutocastExplorer:
    """The autocast explorer, ready to display (see :class:`AutocastExplorer`)."""
    return AutocastExplorer(**kwargs)
