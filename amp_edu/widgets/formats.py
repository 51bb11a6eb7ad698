"""Lesson 01's explorers: what each format stores for a number, and the grid around it.

* :class:`FormatExplorer` — type a value or slide its magnitude (a log2 slider): for every format
  see the bits coloured by field, the stored value, the absolute and relative error, and its fate
  (overflow, subnormal, rounded to 0).
* :class:`NumberLine` — the representable fp16/bf16/fp8 values around a point, the rounding
  boundaries between them, and where the value lands.

The logic is in plain functions (:func:`fate`, :func:`bits_html`, :func:`explorer_html`,
:func:`number_line_caption`, :func:`number_line_figure`); the classes only wire controls to them.
"""

from __future__ import annotations

import html
import math

import ipywidgets as W
from matplotlib.figure import Figure

from ..formats import FORMATS, Decomposed, decompose, get, neighbours, ulp
from ..viz import FIELD_COLORS, number_line
from ..validate import check_int
from .base import Explorer

__all__ = ["fate", "bits_html", "explorer_html", "number_line_caption", "number_line_figure",
           "FormatExplorer", "NumberLine", "format_explorer", "number_line_view"]

LINE_FORMATS = [k for k, f in FORMATS.items() if f.bits <= 16]
_SLIDER_MIN, _SLIDER_MAX = -30, 18  # log2 range of the magnitude slider: fp16's floor to past its max


def fate(d: Decomposed) -> str:
    """One phrase for what happened to the number (:func:`amp_edu.formats.fate` decides which)."""
    which = d.fate
    if which == "nonfinite":
        if math.isnan(d.x):
            return "NaN in, NaN out"
        return "inf in: " + ("inf" if d.kind == "inf" else f"{d.kind} (no inf in {d.format.name})")
    if which == "overflow":
        return {"inf": "overflow → inf", "nan": "overflow → NaN",
                "saturate": f"overflow → saturated to ±{d.format.max:g}"}[d.format.overflow]
    if which == "normal":
        return "normal, exact" if d.abs_error == 0 else "normal, rounded"
    return {"flush": "underflow → rounded to 0", "subnormal": "subnormal (fewer significant bits)",
            "zero": "zero"}[which]


def bits_html(d: Decomposed) -> str:
    """The bits as HTML, each field in its colour (sign, exponent, mantissa)."""
    spans = [f'<span style="color:{FIELD_COLORS[name]};font-weight:bold" title="{name}">{bits}</span>'
             for name, bits in zip(("sign", "exponent", "mantissa"), d.fields)]
    return '<span style="font-family:monospace">' + " ".join(spans) + "</span>"


def _num(v: float) -> str:
    return f"{v:.7g}" if math.isfinite(v) or math.isnan(v) else str(v)


_PAD = 'style="padding:2px 10px;text-align:left"'


def explorer_html(x, names=None) -> str:
    """An HTML table: one row per format with bits, stored value, errors and fate for ``x``."""
    names = list(FORMATS) if names is None else list(names)
    rows = []
    for name in names:
        d = decompose(x, name)
        rel = "" if math.isnan(d.rel_error) else f"{d.rel_error:.2e}"
        cells = [f"<b>{html.escape(name)}</b>", bits_html(d), _num(d.value), _num(d.abs_error), rel,
                 html.escape(fate(d))]
        rows.append("<tr>" + "".join(f"<td {_PAD}>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th {_PAD}>{h}</th>" for h in
                   ("format", "bits (sign exponent mantissa)", "stored", "abs error", "rel error", "fate"))
    return f'<table style="border-collapse:collapse"><tr>{head}</tr>{"".join(rows)}</table>'


def _x32_note(x: float) -> str:
    x32 = decompose(x, "fp32").value
    if x32 == x or math.isnan(x):
        return f"x = {x!r}"
    return f"x = {x!r} (stored first as float32: {x32!r}; the casts start from that)"


def number_line_caption(x, fmt, count: int = 8) -> str:
    """A sentence on where ``x`` lands in ``fmt``'s grid: the stored value, the spacing, the fate."""
    f = get(fmt)
    d = decompose(x, f)
    below, above = neighbours(x, f, count)
    text = f"{f.name}: x = {d.x:.7g} is stored as {_num(d.value)} ({fate(d)})."
    if abs(d.x) <= f.max:
        text += f" Spacing of the grid here: {ulp(d.x, f):.3g}."
    return text + f" Shown: {len(below)} values at or below x, {len(above)} above."


def number_line_figure(x, fmt, count: int = 8) -> Figure:
    """The ``count`` representable values of ``fmt`` on each side of ``x``, as a figure."""
    f = get(fmt)
    below, above = neighbours(x, f, count)
    vals = [*below.tolist(), *above.tolist()]
    fig = Figure(figsize=(8, 1.9))
    ax = fig.add_subplot()
    number_line(ax, vals, x=float(x), stored=decompose(x, f).value,
                label=f"{f.name} values")
    ax.set_xlabel(f"value (the {len(vals)} {f.name} values nearest x)")
    fig.tight_layout()
    return fig


class _ValueControls:
    """A text box for x and a log2 slider for |x|, kept in step (the slider keeps x's sign)."""

    def __init__(self, x: float):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"x must be a real number (a Python float or int), got {type(x).__name__}")
        x = float(x)
        self.text = W.FloatText(value=x, description="x")
        mag = min(max(abs(x) if x else 1.0, 2.0 ** _SLIDER_MIN), 2.0 ** _SLIDER_MAX)
        self.slider = W.FloatLogSlider(value=mag, base=2, min=_SLIDER_MIN, max=_SLIDER_MAX, step=0.125,
                                       description="|x|", readout_format=".3g",
                                       layout=W.Layout(width="420px"))
        self._busy = False
        self.slider.observe(self._from_slider, names="value")
        self.text.observe(self._from_text, names="value")

    def _from_slider(self, change):
        if not self._busy:
            self._busy = True
            self.text.value = math.copysign(change["new"], self.text.value)
            self._busy = False

    def _from_text(self, change):
        v = change["new"]
        if not self._busy and v and math.isfinite(v):
            self._busy = True
            self.slider.value = min(max(abs(v), 2.0 ** _SLIDER_MIN), 2.0 ** _SLIDER_MAX)
            self._busy = False

    @property
    def box(self):
        return W.HBox([self.text, self.slider])


class FormatExplorer(Explorer):
    """Enter or slide a value; every format's bits, stored value, errors and fate update."""

    def __init__(self, x: float = 0.1, names=None):
        self.names = list(FORMATS) if names is None else [get(n).name for n in names]
        self.controls = _ValueControls(x)
        self.text, self.slider = self.controls.text, self.controls.slider
        self.note = W.HTML()
        self.table = W.HTML()
        self._wire((self.text,), self.controls.box, self.note, self.table)

    def update(self):
        x = self.text.value
        self.note.value = html.escape(_x32_note(x))
        self.table.value = explorer_html(x, self.names)


class NumberLine(Explorer):
    """The grid of a ≤16-bit format around a value: pick the format, type or slide the value."""

    def __init__(self, x: float = 1.0, fmt: str = "fp16", count: int = 8):
        self.controls = _ValueControls(x)
        self.text, self.slider = self.controls.text, self.controls.slider
        count = check_int(count, "count (values on each side)", min=1, max=32)
        name = get(fmt).name
        if name not in LINE_FORMATS:
            raise ValueError(f"the number line shows formats of at most 16 bits: one of {', '.join(LINE_FORMATS)}, "
                             f"got {name!r}")
        self.format = W.Dropdown(options=LINE_FORMATS, value=name, description="format")
        self.count = W.IntSlider(value=count, min=1, max=32, description="values/side")
        self.caption = W.HTML()
        self.plot = W.Output()
        self._wire((self.text, self.format, self.count),
                   self.controls.box, W.HBox([self.format, self.count]), self.caption, self.plot)

    def update(self):
        x, fmt, count = self.text.value, self.format.value, self.count.value
        if not math.isfinite(x):
            self.caption.value = f"x = {x}: not a finite number, nothing to place on the line"
            self.show_figure(None)
            return
        self.caption.value = html.escape(number_line_caption(x, fmt, count))
        self.show_figure(number_line_figure(x, fmt, count))


def format_explorer(x: float = 0.1, names=None) -> FormatExplorer:
    """The format explorer, ready to display (the last expression of a cell)."""
    return FormatExplorer(x, names)


def number_line_view(x: float = 1.0, fmt: str = "fp16", count: int = 8) -> NumberLine:
    """The number-line view, ready to display."""
    return NumberLine(x, fmt, count)
