"""Lessons 02–03's explorer: slide the loss scale S and watch the gradients move on fp16's line.

Multiplying the loss by S = 2^k multiplies every gradient by S, so their log2 histogram slides k
bins to the right: values that were flushed to zero come back, and past a point the largest ones
overflow to inf. :class:`LossScaleExplorer` shows a real model's gradients
(a :class:`amp_edu.gradients.GradientRecord`, or any tensors) with a log2 slider for S, a layer
picker and an activation/weight switch; the histogram and the flush/subnormal/overflow shares
redraw as you move them.

The logic is in :func:`loss_scale_summary` and :func:`loss_scale_figure`; the class only wires
controls to them, so tests set ``explorer.log2_scale.value`` and read ``explorer.text.value``.
"""

from __future__ import annotations

import html

import ipywidgets as W
from matplotlib.figure import Figure

from ..gradients import GradientRecord, flat_values, fp16_fractions, plot_histogram
from ..validate import check_int
from .base import Explorer

__all__ = ["loss_scale_summary", "loss_scale_figure", "LossScaleExplorer", "loss_scale_explorer"]

ALL_LAYERS = "all layers"


def loss_scale_summary(values, log2_scale: int = 0) -> dict:
    """fp16 fates of ``values × 2^log2_scale`` and one sentence about them (key ``text``)."""
    log2_scale = check_int(log2_scale, "log2_scale")
    x = flat_values(values)
    f = fp16_fractions(x, 2.0 ** log2_scale)
    a = x.abs()
    a = a[a.isfinite()]
    top = float(a.max()) * 2.0 ** log2_scale if a.numel() else 0.0
    nonzero = 1.0 - f["zero"] - f["nonfinite"]
    share = (lambda k: f[k] / nonzero) if nonzero > 0 else (lambda k: 0.0)  # noqa: E731
    f["text"] = (f"S = 2^{log2_scale}: of {f['n']:,} gradient values ({f['zero']:.1%} exactly zero), "
                 f"{share('flush'):.1%} of the non-zero ones flush to 0 in fp16, {share('subnormal'):.1%} "
                 f"are subnormal, {share('normal'):.1%} normal and {share('overflow'):.1%} overflow to inf; "
                 f"the largest |g| × S is {top:.3g}")
    return f


def loss_scale_figure(values, log2_scale: int = 0, *, title: str | None = None) -> Figure:
    """The gradients' log2 histogram at S = 2^log2_scale with fp16's ranges shaded."""
    fig = Figure(figsize=(8, 3.4))
    ax = fig.add_subplot()
    plot_histogram(ax, values, 2.0 ** log2_scale, label=f"|g| × 2^{log2_scale}")
    ax.legend(fontsize=7, loc="upper left")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


class LossScaleExplorer(Explorer):
    """A log2 loss-scale slider, a layer picker and an activations/weights switch over gradients.

    ``source`` is a :class:`~amp_edu.gradients.GradientRecord` (layers and both kinds available)
    or a tensor / list of tensors (one set of values; no picker).
    """

    def __init__(self, source, log2_scale: int = 0, *, kind: str = "activations", max_log2: int = 32):
        if isinstance(source, GradientRecord):
            self.record = source
            self.values = None
        else:
            self.record = None
            self.values = flat_values(source)
        if kind not in ("activations", "weights"):
            raise ValueError(f"kind must be 'activations' or 'weights', got {kind!r}")
        max_log2, log2_scale = check_int(max_log2, "max_log2"), check_int(log2_scale, "log2_scale")
        if not 0 <= log2_scale <= max_log2:
            raise ValueError(f"log2_scale must be an int from 0 to max_log2 = {max_log2} (the slider's range), "
                             f"got {log2_scale}")
        self.log2_scale = W.IntSlider(value=log2_scale, min=0, max=max_log2, step=1,
                                      description="log2 S", continuous_update=False,
                                      layout=W.Layout(width="420px"))
        self.kind = W.ToggleButtons(options=["activations", "weights"], value=kind,
                                    description="gradients", disabled=self.record is None)
        self.layer = W.Dropdown(options=self._layers(kind), value=ALL_LAYERS, description="layer",
                                disabled=self.record is None)
        self.text = W.HTML()
        self.plot = W.Output()
        self._busy = False
        self.kind.observe(self._on_kind, names="value")
        for c in (self.log2_scale, self.layer):
            c.observe(self._on_change, names="value")
        self._wire((), self.log2_scale, W.HBox([self.kind, self.layer]), self.text, self.plot)   # own wiring above

    def _layers(self, kind):
        if self.record is None:
            return [ALL_LAYERS]
        return [ALL_LAYERS, *self.record.by_layer(kind).keys()]

    def _on_change(self, _change):
        if not self._busy:
            self.update()

    def _on_kind(self, change):
        self._busy = True                      # one redraw, after the layer list is replaced
        try:
            self.layer.options = self._layers(change["new"])
            self.layer.value = ALL_LAYERS
        finally:
            self._busy = False
        self.update()

    def current_values(self):
        """The gradient values on show (the chosen kind and layer)."""
        if self.record is None:
            return self.values
        if self.layer.value == ALL_LAYERS:
            return self.record.values(self.kind.value)
        return self.record.by_layer(self.kind.value)[self.layer.value]

    def update(self):
        vals, k = self.current_values(), self.log2_scale.value
        s = loss_scale_summary(vals, k)
        self.text.value = html.escape(s["text"])
        what = "data" if self.record is None else f"{self.kind.value} gradients, {self.layer.value}"
        self.show_figure(loss_scale_figure(vals, k, title=what))


def loss_scale_explorer(source, log2_scale: int = 0, **kw) -> LossScaleExplorer:
    """The loss-scale explorer over ``source`` (a GradientRecord or tensors), ready to display."""
    return LossScaleExplorer(source, log2_scale, **kw)
