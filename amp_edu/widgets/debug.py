"""Lesson 09's explorer: how large each layer's output gets, and which one first turns inf/NaN.

Slide the scale of the input (2^k: data in the wrong units, an exploding residual stream) and pick
the precision the forward runs in; see each module's largest |output| against fp16's 65504 and the
first module whose output is no longer finite. The logic is :func:`explore_layers`; the widget
only wires the controls to it.
"""

from __future__ import annotations

import html

import ipywidgets as W
import torch
from matplotlib.figure import Figure

from ..debug import ModuleCall, plot_module_calls, trace_modules
from .base import Explorer

__all__ = ["PRECISIONS", "explore_layers", "layers_figure", "LayerExplorer", "layer_explorer"]

PRECISIONS = {"fp32": None, "autocast fp16": torch.float16, "autocast bf16": torch.bfloat16}


def explore_layers(model, x: torch.Tensor, log2_scale: float = 0.0, precision: str = "autocast fp16"
                   ) -> tuple[list[ModuleCall], ModuleCall | None]:
    """Run ``model(x * 2**log2_scale)`` in ``precision``; return every module call and the first
    non-finite one (or ``None``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point tensor")
    dtype = PRECISIONS[precision]
    xin = x * 2.0 ** float(log2_scale)
    with torch.no_grad(), torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        _, calls = trace_modules(model, xin)
    return calls, next((c for c in calls if not c.finite), None)


def layers_figure(calls: list[ModuleCall]) -> Figure:
    fig = Figure(figsize=(7, 3.4))
    plot_module_calls(calls, fig.subplots())
    fig.tight_layout()
    return fig


class LayerExplorer(Explorer):
    """A log2 input-scale slider and a precision choice; the per-module magnitudes and the verdict."""

    def __init__(self, model, x: torch.Tensor, log2_scale: int = 0, precision: str = "autocast fp16",
                 max_log2: int = 16):
        self.model, self.x = model, x
        self.scale = W.IntSlider(value=log2_scale, min=0, max=max_log2, description="input × 2^k")
        self.precision = W.Dropdown(options=list(PRECISIONS), value=precision, description="precision")
        self.text = W.HTML()
        self.plot = W.Output()
        self._wire((self.scale, self.precision), W.HBox([self.scale, self.precision]), self.text, self.plot)

    def update(self) -> ModuleCall | None:
        calls, first = explore_layers(self.model, self.x, self.scale.value, self.precision.value)
        what = f"input × 2^{self.scale.value}, {self.precision.value}: "
        self.text.value = html.escape(what + ("every output finite" if first is None else str(first)))
        self.show_figure(layers_figure(calls))
        return first


def layer_explorer(model, x: torch.Tensor, **kw) -> LayerExplorer:
    """The layer explorer for ``model`` on input ``x``, ready to display."""
    return LayerExplorer(model, x, **kw)
