"""Lesson 11's explorer: many ranks, one loss scale each -- agreeing on skips, or not.

:func:`simulate_ranks` is the logic (plain Python, no processes): at every step each rank's shard
overflows with probability ``p_overflow``; with ``agree=True`` the ranks sum their ``found_inf``
(what :class:`amp_edu.distributed.ShardedGradScaler` does) and all skip together, otherwise each
decides from its own shard. Each rank applies the update rule of :mod:`amp_edu.scaler`.
The explorer plots the ranks' scales and says how often they disagreed.
"""

from __future__ import annotations

import html
import math
import random

import ipywidgets as W
from matplotlib.figure import Figure

from ..scaler import update_rule
from ..validate import check_bool, check_int, check_number
from .base import Explorer

__all__ = ["simulate_ranks", "ranks_text", "ranks_figure", "RankScaleExplorer", "rank_scale_explorer"]


def simulate_ranks(world_size: int = 8, steps: int = 2000, p_overflow: float = 0.002, agree: bool = True,
                   growth_interval: int = 100, seed: int = 0) -> dict:
    """Per-rank scale trajectories; ``{"scale": [[S per step] per rank], "stepped": [[bool] per rank],
    "disagree": steps where some ranks stepped and others skipped, "any_overflow": steps where some
    rank overflowed}``."""
    world_size = check_int(world_size, "world_size", min=1, max=1024)
    steps = check_int(steps, "steps", min=1, max=100_000)
    p_overflow = check_number(p_overflow, "p_overflow", min=0, max=1)
    agree = check_bool(agree, "agree")
    growth_interval = check_int(growth_interval, "growth_interval", min=1)
    rng = random.Random(seed)
    scale = [2.0 ** 16] * world_size
    tracker = [0] * world_size
    out = {"scale": [[] for _ in range(world_size)], "stepped": [[] for _ in range(world_size)],
           "disagree": 0, "any_overflow": 0}
    for _ in range(steps):
        local = [rng.random() < p_overflow for _ in range(world_size)]
        found = [any(local)] * world_size if agree else local
        out["any_overflow"] += any(local)
        out["disagree"] += len(set(found)) > 1
        for r in range(world_size):
            out["scale"][r].append(scale[r])
            out["stepped"][r].append(not found[r])
            scale[r], tracker[r] = update_rule(scale[r], tracker[r], float(found[r]), 2.0, 0.5, growth_interval)
    return out


def ranks_text(run: dict, p_overflow: float) -> str:
    """Sentences about a simulated run."""
    n = len(run["scale"])
    steps = len(run["scale"][0])
    taken = [sum(s) for s in run["stepped"]]
    finals = [s[-1] for s in run["scale"]]
    expected = 1 - (1 - p_overflow) ** n
    text = (f"{n} ranks, {steps} steps: some rank overflowed on {run['any_overflow']} steps "
            f"({run['any_overflow'] / steps:.1%}; 1 - (1 - p)^{n} = {expected:.1%} expected). ")
    if run["disagree"]:
        text += (f"The ranks disagreed on {run['disagree']} steps: they took between {min(taken)} and "
                 f"{max(taken)} optimizer steps, and their scales ended between 2^{math.log2(min(finals)):g} and "
                 f"2^{math.log2(max(finals)):g} -- their shards are now updated with different scales and counts.")
    else:
        text += (f"Every rank skipped the same {steps - taken[0]} steps and ended at the same scale "
                 f"2^{math.log2(finals[0]):g}: the agreed skip rate grows with the number of ranks.")
    return text


def ranks_figure(run: dict, max_lines: int = 8) -> Figure:
    fig = Figure(figsize=(7, 3))
    ax = fig.add_subplot()
    for r, s in enumerate(run["scale"][:max_lines]):
        ax.plot([math.log2(v) for v in s], lw=1, label=f"rank {r}")
    ax.set_xlabel("step")
    ax.set_ylabel("log2 of the loss scale")
    ax.set_title("each rank's loss scale" + (f" (first {max_lines} ranks)" if len(run["scale"]) > max_lines else ""))
    ax.legend(fontsize=7, ncol=4, loc="lower left")
    fig.tight_layout()
    return fig


class RankScaleExplorer(Explorer):
    """world size, overflow probability per rank and step, agreement on/off in; scales out."""

    def __init__(self, world_size: int = 8, p_overflow: float = 0.002, agree: bool = False,
                 steps: int = 2000, growth_interval: int = 100, seed: int = 0):
        self.steps, self.growth_interval, self.seed = steps, growth_interval, seed
        style = {"description_width": "initial"}
        self.world_size = W.IntSlider(value=world_size, min=1, max=64, description="ranks", style=style)
        self.p_overflow = W.FloatSlider(value=p_overflow, min=0.0, max=0.02, step=0.0005, readout_format=".4f",
                                        description="overflow probability per rank", style=style)
        self.agree = W.Checkbox(value=agree, description="all-reduce found_inf (agree)")
        self.text = W.HTML()
        self.plot = W.Output()
        self._wire((self.world_size, self.p_overflow, self.agree),
                   W.HBox([self.world_size, self.p_overflow, self.agree]), self.text, self.plot)

    def run(self) -> dict:
        return simulate_ranks(self.world_size.value, self.steps, self.p_overflow.value, self.agree.value,
                              self.growth_interval, self.seed)

    def update(self):
        r = self.run()
        self.text.value = html.escape(ranks_text(r, self.p_overflow.value))
        self.show_figure(ranks_figure(r))


def rank_scale_explorer(**kw) -> RankScaleExplorer:
    """The explorer, ready to display."""
    return RankScaleExplorer(**kw)
