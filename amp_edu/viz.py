"""Plot helpers shared by the lessons: one look for the whole course.

Magnitudes go on log2 axes (the exponent *is* the story in floating point), axes carry units,
and the fp16 landmarks — the subnormal floor 2^-24, the smallest normal 2^-14 and the maximum
65504 — are drawn the same way in every lesson by :func:`fp16_landmarks`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator

__all__ = ["fig_ax", "log2_axis", "fp16_landmarks", "PRECISION_COLORS", "color_for"]

# One colour per precision recipe / dtype, used by every lesson.
PRECISION_COLORS = {
    "fp32": "#1f77b4", "float32": "#1f77b4",
    "tf32": "#17becf",
    "fp16": "#d62728", "float16": "#d62728", "fp16_pure": "#d62728",
    "amp_fp16": "#ff7f0e",
    "bf16": "#2ca02c", "bfloat16": "#2ca02c", "amp_bf16": "#2ca02c",
    "fp8_e4m3": "#9467bd", "float8_e4m3fn": "#9467bd",
    "fp8_e5m2": "#8c564b", "float8_e5m2": "#8c564b",
}


def color_for(name: str) -> str | None:
    """The course colour for a dtype or recipe name (``None`` lets matplotlib choose)."""
    key = str(name).replace("torch.", "")
    if key.startswith("fp16_static"):
        key = "fp16_static"
    return PRECISION_COLORS.get(key)


def fig_ax(width: float = 7.0, height: float = 3.6, **kw):
    """A new figure and axes at the course's default size."""
    return plt.subplots(figsize=(width, height), **kw)


def _pow2_label(v, _pos=None) -> str:
    import math
    if v <= 0:
        return "0"
    e = math.log2(v)
    return f"$2^{{{int(round(e))}}}$" if abs(e - round(e)) < 1e-9 else f"{v:g}"


def log2_axis(ax, axis: str = "x", *, label: str | None = None, step: int | None = None):
    """Make ``axis`` ('x' or 'y') a log2 axis with 2^k tick labels; ``step`` thins the ticks."""
    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', got {axis!r}")
    setter = ax.set_xscale if axis == "x" else ax.set_yscale
    setter("log", base=2)
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_formatter(FuncFormatter(_pow2_label))
    if step:
        a.set_major_locator(LogLocator(base=2 ** step))
    if label:
        (ax.set_xlabel if axis == "x" else ax.set_ylabel)(label)
    return ax


def fp16_landmarks(ax, axis: str = "x", *, which=("floor", "normal", "max"), text: bool = True):
    """Draw fp16's subnormal floor 2^-24, smallest normal 2^-14 and max 65504 as lines on ``ax``."""
    marks = {
        "floor": (2.0 ** -24, "2^-24 (smallest subnormal)", "#d62728", ":"),
        "half_floor": (2.0 ** -25, "2^-25 (rounds to 0 below)", "#d62728", (0, (1, 3))),
        "normal": (2.0 ** -14, "2^-14 (smallest normal)", "#ff7f0e", "--"),
        "max": (65504.0, "65504 (max)", "#7f7f7f", "-."),
    }
    line = ax.axvline if axis == "x" else ax.axhline
    for key in which:
        if key not in marks:
            raise ValueError(f"unknown landmark {key!r}; accepted: {sorted(marks)}")
        v, lab, col, ls = marks[key]
        line(v, color=col, ls=ls, lw=1.2, label=lab if text else None)
    return ax
