"""Plot helpers shared by the lessons: one look for the whole course.

Magnitudes go on log2 axes (the exponent *is* the story in floating point), axes carry units,
and the fp16 landmarks — the subnormal floor 2^-24, the smallest normal 2^-14 and the maximum
65504 — are drawn the same way in every lesson by :func:`fp16_landmarks`.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator

from . import formats

__all__ = ["fig_ax", "log2_axis", "fp16_landmarks", "FAMILY_PALETTES", "FORMAT_COLORS", "recipe_color", "color_for",
           "FIELD_COLORS", "bit_layouts", "number_line", "category_grid", "scale_trajectory"]

# A recipe's colour comes from its family (``amp_edu.recipes.Family``, keyed here by its value):
# the k-th registered member of a family takes the family's k-th colour (cycling), so a recipe
# registered later, in any module, is coloured too. The palettes keep each format's own colour
# where a recipe is "that format" (fp32, pure fp16, AMP bf16). Keyed by value, not by the enum,
# so that importing this module (and colouring a format) does not load the recipe registry, which
# imports fp8, fp4 and the optimizers: only a recipe's colour needs it.
FAMILY_PALETTES = {
    "fp32": (formats.FP32.color,),
    "amp": ("#ff7f0e", formats.BF16.color, "#ffbb78"),              # amp_fp16, amp_bf16, no scaler
    "pure": ("#98df8a", formats.FP16.color),                          # bf16_pure, fp16_pure
    "scaled": ("#ff9896",),
    "master": ("#9467bd", "#c5b0d5"),
    "fp8": ("#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#5254a3", "#9c9ede"),
    "fp4": ("#637939", "#b5cf6b", "#e7ba52", "#ad494a"),             # nvfp4, _sr, _sr_rht, _te
    "optimizer": ("#17becf", "#9edae5", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#393b79"),
}
# Every format's name and string aliases. A format name is coloured as the format without asking
# the registry; the one recipe named like a format, fp32, has that format's colour as its palette.
FORMAT_COLORS = {k: f.color for f in formats.ALL_FORMATS.values() for k in (f.name, *f.aliases)
                 if isinstance(k, str)}


def recipe_color(name: str) -> str | None:
    """The colour of the registered recipe ``name`` (``"fp16_static_scale(1024)"`` is the
    ``fp16_static_scale`` family member), from its family's palette; ``None`` if no such recipe."""
    from . import recipes      # the registry, loaded by the first recipe colour asked for
    name = name.split("(")[0].strip()
    try:
        entry = recipes.entry(name)
    except ValueError:
        return None
    members = recipes.names(family=entry.family)
    palette = FAMILY_PALETTES[entry.family.value]
    return palette[members.index(name) % len(palette)]


def color_for(name) -> str | None:
    """The course colour for a recipe (``"amp_fp16"``, ``"fp16_static_scale(1024)"``, or an
    object with a ``.name``) or a format (name, alias or torch dtype, e.g. ``"fp16"``, ``"half"``,
    ``torch.bfloat16``); ``None`` (matplotlib chooses) for anything else."""
    if isinstance(name, formats.Format):
        return name.color
    if not isinstance(name, str) and hasattr(name, "name") and isinstance(name.name, str):
        name = name.name                                  # a recipe object
    key = str(name).removeprefix("torch.")
    return FORMAT_COLORS.get(key.split("(")[0].strip()) or recipe_color(key)


def fig_ax(width: float = 7.0, height: float = 3.6, **kw):
    """A new figure and axes at the course's default size."""
    return plt.subplots(figsize=(width, height), **kw)


def _pow2_label(v, _pos=None) -> str:
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
    f = formats.FP16
    floor, normal = f.smallest_subnormal, f.smallest_normal
    marks = {
        "floor": (floor, f"2^{math.log2(floor):.0f} (smallest subnormal)", f.color, ":"),
        "half_floor": (floor / 2, f"2^{math.log2(floor / 2):.0f} (rounds to 0 below)", f.color, (0, (1, 3))),
        "normal": (normal, f"2^{math.log2(normal):.0f} (smallest normal)", "#ff7f0e", "--"),
        "max": (f.max, f"{f.max:g} (max)", "#7f7f7f", "-."),
    }
    line = ax.axvline if axis == "x" else ax.axhline
    for key in which:
        if key not in marks:
            raise ValueError(f"unknown landmark {key!r}; accepted: {sorted(marks)}")
        v, lab, col, ls = marks[key]
        line(v, color=col, ls=ls, lw=1.2, label=lab if text else None)
    return ax


# --- bit fields and number lines (lesson 01) --------------------------------------------------
# One colour per bit field, shared by the figures and the widgets' coloured bits.
FIELD_COLORS = {"sign": "#d62728", "exponent": "#1f77b4", "mantissa": "#2ca02c"}


def bit_layouts(ax, formats):
    """Draw each format's bits as a row of boxes coloured by field, most significant bit left.

    ``formats`` are objects with ``name``, ``exponent_bits`` and ``mantissa_bits``
    (e.g. ``amp_edu.formats.FORMATS.values()``).
    """
    from matplotlib.patches import Patch, Rectangle

    formats = list(formats)
    if not formats:
        raise ValueError("formats must name at least one format")
    width = 0
    for row, f in enumerate(formats):
        y = len(formats) - 1 - row
        fields = (("sign", int(getattr(f, "signed", True))), ("exponent", f.exponent_bits),
                  ("mantissa", f.mantissa_bits))
        x = 0
        for field, n in fields:
            if n == 0:                   # e8m0 has no sign and no mantissa bits
                continue
            for _ in range(n):
                ax.add_patch(Rectangle((x, y + 0.1), 1, 0.8, facecolor=FIELD_COLORS[field],
                                       edgecolor="white", lw=0.8))
                x += 1
            ax.text(x - n / 2, y + 0.5, str(n), ha="center", va="center", color="white",
                    fontsize=8, fontweight="bold")
        width = max(width, x)
    ax.set_xlim(0, width)
    ax.set_ylim(0, len(formats))
    ax.set_yticks([len(formats) - 1 - i + 0.5 for i in range(len(formats))])
    ax.set_yticklabels([f.name for f in formats])
    ax.set_xlabel("bit position (most significant first); numbers = field width in bits")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in FIELD_COLORS.items()],
              loc="lower right", fontsize=8, ncol=3)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    return ax


def number_line(ax, values, *, x=None, stored=None, label: str = "representable values"):
    """Representable ``values`` as ticks on a line, the rounding boundaries (midpoints) between
    them as dotted ticks, and optionally the input ``x`` and the value ``stored`` for it."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or v.size == 0:
        raise ValueError("values must be a non-empty 1-D sequence")
    ax.axhline(0, color="#7f7f7f", lw=0.8)
    ax.vlines(v, -0.3, 0.3, color="#1f77b4", lw=1.5, label=label)
    if v.size > 1:
        mids = (v[1:] + v[:-1]) / 2
        ax.vlines(mids, -0.12, 0.12, color="#7f7f7f", lw=0.8, linestyles=":",
                  label="rounding boundaries (ties)")
    if x is not None:
        ax.plot([x], [0.45], marker="v", color="#d62728", ms=9, ls="none", label=f"x = {x:.6g}")
    if stored is not None and np.isfinite(stored):
        ax.plot([stored], [-0.45], marker="^", color="#2ca02c", ms=9, ls="none",
                label=f"stored = {stored:.6g}")
    ax.set_ylim(-1, 1.2)
    ax.set_yticks([])
    ax.set_xlabel("value")
    ax.legend(loc="upper center", ncol=4, fontsize=8, frameon=False)
    return ax


def category_grid(ax, rows, cols, cells, colors: dict, *, title: str | None = None):
    """A table of categories drawn as coloured cells (e.g. each op's autocast category per policy).

    ``rows`` and ``cols`` are labels; ``cells[i][j]`` is a key of ``colors`` (``{category: colour}``)
    or None for a blank cell. The legend lists the categories that occur.
    """
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    if len(cells) != len(rows) or any(len(r) != len(cols) for r in cells):
        raise ValueError(f"cells must be {len(rows)} rows of {len(cols)} categories")
    unknown = {c for r in cells for c in r if c is not None and c not in colors}
    if unknown:
        raise ValueError(f"categories without a colour: {sorted(unknown)}; accepted: {sorted(colors)}")
    img = [[to_rgb(colors[c]) if c is not None else (1.0, 1.0, 1.0) for c in r] for r in cells]
    ax.imshow(img, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.tick_params(length=0)
    ax.set_xticks([x - 0.5 for x in range(1, len(cols))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(rows))], minor=True)
    ax.grid(which="minor", color="white", lw=1.5)
    for side in ax.spines.values():
        side.set_visible(False)
    used = [c for c in colors if any(c in r for r in cells)]
    ax.legend(handles=[Patch(color=colors[c], label=c) for c in used], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return ax


def scale_trajectory(ax, scales, skipped=None, *, label: str | None = "loss scale", color: str | None = None,
                     marker_label: str | None = "skipped step (inf/NaN)"):
    """Plot a loss-scale trajectory: the scale used at each step on a log2 axis, as a step line, and
    each skipped step as a red ``x`` at the scale that overflowed. Returns ``ax``."""
    scales = [float(s) for s in scales]
    if skipped is not None and len(skipped) != len(scales):
        raise ValueError(f"skipped has {len(skipped)} entries for {len(scales)} scales")
    steps = range(len(scales))
    ax.step(steps, scales, where="post", color=color, lw=1.3, label=label)
    if skipped is not None:
        xs = [i for i, s in enumerate(skipped) if s]
        ax.plot(xs, [scales[i] for i in xs], "x", color="#d62728", ms=5, mew=1.2, label=marker_label)
    log2_axis(ax, "y", label="loss scale S")
    ax.set_xlabel("optimizer step")
    return ax
