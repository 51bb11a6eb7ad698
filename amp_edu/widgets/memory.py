"""Lesson 07's explorer: how many saved bytes does a batch cost, and how large a batch fits?

:class:`MemoryExplorer` — type an MLP's widths, pick a dtype, slide the batch size and a memory
budget: see the saved bytes *measured* for that model (:mod:`amp_edu.memory`, at batch 1 and 2,
extended along the exact line ``fixed + batch × per_sample``), next to fp32's, and the largest
batch whose saved tensors fit in the budget. The logic is :func:`memory_summary`.
"""

from __future__ import annotations

import html

import ipywidgets as W
import torch

from .. import formats, memory
from ..validate import check_int
from .base import Explorer

__all__ = ["memory_summary", "summary_text", "MemoryExplorer", "memory_explorer"]

_DTYPES = {name: formats.get(name).dtype for name in ("fp32", "bf16", "fp16")}


def memory_summary(widths, batch: int, dtype: str, budget_bytes: float) -> dict:
    """Saved bytes at ``batch`` for ``dtype`` and fp32, and the largest batch under ``budget_bytes``."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    batch = check_int(batch, "batch", min=1)
    fixed, per = memory.relu_mlp_line(widths, _DTYPES[dtype])
    fixed32, per32 = memory.relu_mlp_line(widths, torch.float32)
    return {"fixed": fixed, "per_sample": per, "total": fixed + batch * per,
            "total_fp32": fixed32 + batch * per32,
            "largest_batch": memory.largest_batch(budget_bytes, fixed, per),
            "largest_batch_fp32": memory.largest_batch(budget_bytes, fixed32, per32)}


def _mib(b: float) -> str:
    return f"{b / 2**20:.3g} MiB"


def summary_text(s: dict, dtype: str, batch: int) -> str:
    """The explorer's sentences for a :func:`memory_summary`."""
    return (f"{dtype}: {_mib(s['total'])} saved at batch {batch} ({_mib(s['per_sample'])} per sample + "
            f"{_mib(s['fixed'])} of weight copies) vs {_mib(s['total_fp32'])} in fp32 "
            f"(×{s['total'] / s['total_fp32']:.2f}). Largest batch in the budget: {s['largest_batch']} "
            f"({dtype}) vs {s['largest_batch_fp32']} (fp32).")


class MemoryExplorer(Explorer):
    """Widths, dtype, batch and budget in; measured saved bytes and the largest batch out."""

    def __init__(self, widths=(784, 1024, 1024, 10), batch: int = 256, dtype: str = "bf16", budget_gib: float = 1.0):
        self.widths = W.Text(value=",".join(map(str, widths)), description="widths")
        self.dtype = W.Dropdown(options=list(_DTYPES), value=dtype, description="dtype")
        self.batch = W.IntSlider(value=batch, min=1, max=8192, description="batch")
        self.budget = W.FloatLogSlider(value=budget_gib, base=2, min=-6, max=7, step=0.5, description="budget GiB")
        self.text = W.HTML()
        self._wire((self.widths, self.dtype, self.batch, self.budget),
                   W.HBox([self.widths, self.dtype]), W.HBox([self.batch, self.budget]), self.text)

    def update(self):
        try:
            widths = [int(w) for w in self.widths.value.split(",")]
            s = memory_summary(widths, self.batch.value, self.dtype.value, self.budget.value * 2**30)
        except ValueError as exc:
            self.text.value = html.escape(f"widths must be comma-separated positive ints ({exc})")
            return
        self.text.value = html.escape(summary_text(s, self.dtype.value, self.batch.value))


def memory_explorer(**kw) -> MemoryExplorer:
    """The memory explorer, ready to display."""
    return MemoryExplorer(**kw)
