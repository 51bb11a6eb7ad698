"""A bar per module call: its largest finite |output| on a log2 axis, non-finite calls in red."""

from __future__ import annotations

from .. import formats
from ..viz import log2_axis
from .modules import ModuleCall

__all__ = ["plot_module_calls"]


def plot_module_calls(calls: list[ModuleCall], ax, *, leaves_only: bool = True,
                      limit: float | None = formats.FP16.max, limit_label: str = f"fp16 max {formats.FP16.max:g}"):
    """Bar chart of each module call's largest finite |output| (log2 axis), in call order.

    Calls whose output holds inf/NaN get a red bar reaching the top and an "inf"/"nan" label; the
    first of them is named in the title. ``limit`` draws a horizontal line (fp16's max by default).
    """
    shown = [c for c in calls if c.leaf or not leaves_only or not c.finite]
    if not shown:
        raise ValueError("no module calls to plot")
    finite_vals = [c.absmax for c in shown if c.absmax > 0]
    top = max(finite_vals + ([limit] if limit else [])) * 4 if finite_vals or limit else 1.0
    bottom = min(finite_vals) / 4 if finite_vals else 1.0
    heights = [top if not c.finite else max(c.absmax, bottom) for c in shown]
    colors = ["#d62728" if not c.finite else "#1f77b4" for c in shown]
    xs = range(len(shown))
    ax.bar(xs, heights, color=colors, bottom=bottom / 2)
    for i, c in enumerate(shown):
        if not c.finite:
            ax.text(i, top, c.kind, ha="center", va="bottom", fontsize=8, color="#d62728")
    if limit:
        ax.axhline(limit, color="#7f7f7f", ls="-.", lw=1.2, label=limit_label)
        ax.legend(fontsize=8, loc="upper left")
    log2_axis(ax, "y", label="largest finite |output| (log2 scale)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([c.name or "(model)" for c in shown], rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("module, in the order its call finished")
    first = next((c for c in calls if not c.finite), None)
    ax.set_title("all outputs finite" if first is None else
                 f"first non-finite output: {first.name or '(model)'} ({first.module}, {first.kind})")
    return ax
