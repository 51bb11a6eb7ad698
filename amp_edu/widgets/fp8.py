"""Lesson 10's explorer: how much of a tensor survives fp8 as one outlier grows, per granularity?

:class:`Fp8ScalingExplorer` — slide the outlier's size (a power of ten), the block size, pick the
fp8 format: see the round-trip error of the *other* values and the fraction of them flushed to
zero, under one scale per tensor, per row, per 1×k tile, per k×k block, and MX (k elements per
e8m0 power-of-two scale). The tensor is a seeded Gaussian with one outlier at a fixed place; the
logic is :func:`scaling_errors` (numbers) and :func:`errors_figure` (the bar chart).
"""

from __future__ import annotations

import html

import ipywidgets as W
import torch
from matplotlib.figure import Figure

from ..fp8.blocks import block_roundtrip, relative_error
from ..fp8.mx import mx_roundtrip
from ..validate import check_number
from .base import Explorer, show_figure

__all__ = ["SCALE_GRANULARITIES", "BLOCK_SIZES", "FP8_FORMATS", "test_tensor", "scaling_errors", "summary_text",
           "errors_figure", "Fp8ScalingExplorer", "fp8_scaling_explorer"]

BLOCK_SIZES = (16, 32, 64, 128)
FP8_FORMATS = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
#: How many elements share one scale, as the chart labels them (K: the block size chosen).
SCALE_GRANULARITIES = ("per-tensor", "row-wise", "1xK tile", "KxK block", "MX-K (e8m0)")


def _label(kind: str, k: int) -> str:
    return kind.replace("K", str(k))


def test_tensor(outlier: float, rows: int = 128, cols: int = 256, seed: int = 0):
    """``(x, mask)``: a seeded N(0, 1) matrix with ``x[5, 7] = outlier``; ``mask`` marks the outlier."""
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros_like(x, dtype=torch.bool)
    x[5, 7], mask[5, 7] = outlier, True
    return x, mask


test_tensor.__test__ = False   # a tensor maker, not a pytest test


def scaling_errors(outlier_log10: float, block: int = 32, fmt: str = "fp8_e4m3", *, rows: int = 128,
                   cols: int = 256, seed: int = 0) -> dict:
    """``{label: {"error": relative error of the other values, "zeros": fraction flushed to 0}}``.

    ``outlier_log10``: the outlier is ``10**outlier_log10`` among N(0, 1) values. ``block`` (one of
    :data:`BLOCK_SIZES`) sets k for the 1×k, k×k and MX-k schemes. MX elements use ``fmt`` too.
    """
    outlier_log10 = check_number(outlier_log10, "outlier_log10", min=0, max=12)
    if block not in BLOCK_SIZES:
        raise ValueError(f"block must be one of {BLOCK_SIZES}, got {block!r}")
    if fmt not in FP8_FORMATS:
        raise ValueError(f"fmt must be one of {tuple(FP8_FORMATS)}, got {fmt!r}")
    dt = FP8_FORMATS[fmt]
    x, mask = test_tensor(10.0 ** outlier_log10, rows, cols, seed)
    tensor, row, tile, square, mx = SCALE_GRANULARITIES
    qs = {
        tensor: block_roundtrip(x, (rows, cols), dt),
        row: block_roundtrip(x, (1, cols), dt),
        _label(tile, block): block_roundtrip(x, (1, block), dt),
        _label(square, block): block_roundtrip(x, (block, block), dt),
        _label(mx, block): mx_roundtrip(x, fmt, block),
    }
    keep = ~mask
    return {k: {"error": relative_error(x, q, exclude=mask),
                "zeros": float(((q == 0) & (x != 0) & keep).sum() / keep.sum())} for k, q in qs.items()}


def summary_text(errors: dict, outlier_log10: float, fmt: str) -> str:
    """One sentence per scheme for :func:`scaling_errors`' result."""
    lines = [f"Outlier 1e{outlier_log10:g} among N(0, 1) values, {fmt}:"]
    for k, v in errors.items():
        lines.append(f"{k}: error of the other values {v['error']:.2%}, {v['zeros']:.1%} of them flushed to 0")
    return "<br>".join(html.escape(s) for s in lines)


def errors_figure(errors: dict, title: str = "") -> Figure:
    """Bar chart of the relative error per scheme (log scale)."""
    if not isinstance(errors, dict) or not errors:
        raise TypeError("errors must be the dict scaling_errors returns")
    fig = Figure(figsize=(7, 3))
    ax = fig.subplots()
    names = list(errors)
    vals = [max(errors[n]["error"], 1e-6) for n in names]
    ax.bar(range(len(names)), vals, color=[f"C{i}" for i in range(len(names))])
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("relative error of the\nother values (log)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


class Fp8ScalingExplorer(Explorer):
    """Outlier size, block size and fp8 format in; errors per scaling granularity out."""

    def __init__(self, outlier_log10: float = 4.0, block: int = 32, fmt: str = "fp8_e4m3"):
        self.outlier = W.FloatSlider(value=outlier_log10, min=0, max=8, step=0.5, description="outlier 10^")
        self.block = W.SelectionSlider(options=list(BLOCK_SIZES), value=block, description="block k")
        self.fmt = W.Dropdown(options=list(FP8_FORMATS), value=fmt, description="format")
        self.text = W.HTML()
        self.plot = W.Output()
        self._wire((self.outlier, self.block, self.fmt), W.HBox([self.outlier, self.block, self.fmt]),
                   self.text, self.plot)

    def update(self):
        errs = scaling_errors(self.outlier.value, self.block.value, self.fmt.value)
        self.text.value = summary_text(errs, self.outlier.value, self.fmt.value)
        show_figure(self.plot, errors_figure(errs, f"outlier 1e{self.outlier.value:g}, {self.fmt.value}"))


def fp8_scaling_explorer(**kw) -> Fp8ScalingExplorer:
    """The fp8 scaling explorer, ready to display."""
    return Fp8ScalingExplorer(**kw)
