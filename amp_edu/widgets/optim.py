"""Lesson 12's explorer: one bf16 weight, the same small update applied again and again.

Pick the update's size relative to the weight (a power of two) and the number of steps; the plot
shows where the weight goes when each step is stored by rounding to nearest, stochastically, or
with Kahan compensation, next to the exact sum. Below half an ulp (``formats.lost_update_band("bf16")``: 2^-9 to 2^-8 of the weight)
round-to-nearest never moves; the other two follow the exact line (Kahan down to about 2^-17 of
the weight, where its bf16 buffer starts to lose updates too). The logic is
:func:`rounding_walk`.
"""

from __future__ import annotations

import html
import math

import ipywidgets as W
import torch
from matplotlib.figure import Figure

from ..formats import lost_update_band
from ..optim.kahan import compensation_like, kahan_add_
from ..optim.stochastic import stochastic_round
from ..validate import check_int, check_number
from .base import Explorer, show_figure

__all__ = ["rounding_walk", "walk_text", "walk_figure", "RoundingExplorer", "rounding_explorer"]

MODES = ("nearest", "stochastic", "kahan")


def rounding_walk(log2_ratio: float = -11.0, steps: int = 500, *, weight: float = 1.0, copies: int = 64,
                  seed: int = 0) -> dict:
    """``copies`` bf16 copies of ``weight``, each given ``steps`` updates of ``weight * 2**log2_ratio``.

    Returns ``{"start": weight, "exact": [...], "nearest": [...], "stochastic": [...], "kahan": [...],
    "stochastic_band": (lo, hi)}``: the mean over copies after each step (stochastic rounding's
    copies differ; its band is their min and max)."""
    log2_ratio = check_number(log2_ratio, "log2_ratio", min=-24.0, max=0.0)
    steps = check_int(steps, "steps", min=1, max=100_000)
    weight = check_number(weight, "weight", positive=True)
    copies = check_int(copies, "copies", min=1)
    u = torch.full((copies,), weight * 2.0 ** log2_ratio)
    w = {m: torch.full((copies,), weight).bfloat16() for m in MODES}
    comp = compensation_like(w["kahan"])
    gen = torch.Generator().manual_seed(seed)
    out = {m: [] for m in MODES}
    out["exact"], lo, hi = [], [], []
    for k in range(1, steps + 1):
        w["nearest"] = (w["nearest"].float() + u).bfloat16()
        w["stochastic"] = stochastic_round(w["stochastic"].float() + u, generator=gen)
        kahan_add_(w["kahan"], comp, u)
        out["exact"].append(weight + k * float(u[0]))
        for m in MODES:
            out[m].append(float(w[m].float().mean()))
        lo.append(float(w["stochastic"].float().min()))
        hi.append(float(w["stochastic"].float().max()))
    out["stochastic_band"], out["start"] = (lo, hi), weight
    return out


def walk_text(walk: dict, log2_ratio: float) -> str:
    """A sentence per mode: how much of the exact change arrived."""
    change = walk["exact"][-1] - walk["start"]
    lo, hi = (math.log2(r) for r in lost_update_band("bf16"))
    lines = [f"update = weight × 2^{log2_ratio:g}; half an ulp of bf16 at the weight is 2^{lo:g} to 2^{hi:g} of it."]
    for m in MODES:
        lines.append(f"{m}: {100 * (walk[m][-1] - walk['start']) / change:.1f}% of the exact change arrived")
    return "<br>".join(html.escape(s) for s in lines)


def walk_figure(walk: dict, title: str = "") -> Figure:
    fig = Figure(figsize=(7, 3.4))
    ax = fig.subplots()
    x = range(1, len(walk["exact"]) + 1)
    ax.plot(x, walk["exact"], color="k", lw=1, ls="--", label="exact sum (fp64)")
    lo, hi = walk["stochastic_band"]
    ax.fill_between(x, lo, hi, color="C1", alpha=0.2, lw=0, label="stochastic: min–max over copies")
    for i, m in enumerate(MODES):
        ax.plot(x, walk[m], color=f"C{i}", lw=1.5, label=f"{m} (mean over copies)")
    ax.set_xlabel("step")
    ax.set_ylabel("weight value")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


class RoundingExplorer(Explorer):
    """Update size (log2 of update/weight) and steps in; the weight's path per rounding out."""

    def __init__(self, log2_ratio: float = -11.0, steps: int = 500):
        self.ratio = W.FloatSlider(value=log2_ratio, min=-16, max=-4, step=0.5, description="log2(u/w)")
        self.steps = W.IntSlider(value=steps, min=50, max=2000, step=50, description="steps")
        self.text = W.HTML()
        self.plot = W.Output()
        self._wire((self.ratio, self.steps), W.HBox([self.ratio, self.steps]), self.text, self.plot)

    def update(self) -> dict:
        walk = rounding_walk(self.ratio.value, self.steps.value)
        self.text.value = walk_text(walk, self.ratio.value)
        show_figure(self.plot, walk_figure(walk, f"a bf16 weight of 1.0, update 2^{self.ratio.value:g} per step"))
        return walk


def rounding_explorer(**kw) -> RoundingExplorer:
    """The rounding explorer, ready to display."""
    return RoundingExplorer(**kw)
