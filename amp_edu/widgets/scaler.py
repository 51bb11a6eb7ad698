"""Lesson 04's explorer: what do growth_interval, backoff_factor and a rate of bad steps do to the
loss scale over a run?

:func:`simulate_scale` plays a run without a model: at each step the largest gradient magnitude
wanders a little around ``largest_grad`` (log-normal noise), and the step overflows when
``scale * largest |grad|`` passes fp16's 65504, or -- independently, with probability
``overflow_rate`` -- because something makes inf/NaN (a bad batch, a loss that blows up). The scale
then follows :func:`amp_edu.scaler.update_rule`, the very rule the scaler uses. :class:`ScaleExplorer`
wires sliders to it and draws the trajectory.
"""

from __future__ import annotations

import html
import math

import ipywidgets as W
import torch
from matplotlib.figure import Figure

from .. import formats, viz
from ..debug.scale import diagnose_scales
from ..scaler import update_rule
from ..validate import check_int, check_number
from .base import Explorer

__all__ = ["FP16_MAX", "simulate_scale", "summary_text", "scale_figure", "ScaleExplorer", "scale_explorer"]

FP16_MAX = formats.FP16.max      # 65504: a step overflows when scale × its largest gradient passes it


def simulate_scale(steps: int = 3000, *, growth_interval: int = 2000, backoff_factor: float = 0.5,
                   growth_factor: float = 2.0, init_scale: float = 2.0 ** 16, overflow_rate: float = 0.0,
                   largest_grad: float = 4.0, grad_noise: float = 0.3, seed: int = 0) -> dict:
    """Simulate ``steps`` scaler iterations; returns ``{"scale": [...], "skipped": [...], "bad": [...]}``:
    the scale used at each step, whether that step was skipped, and whether it was a bad step
    (inf/NaN at any scale).

    A step overflows when ``scale * g > 65504`` with ``g = largest_grad * exp(grad_noise * N(0,1))``,
    or with probability ``overflow_rate`` regardless of the scale (the model makes inf/NaN).
    """
    steps, growth_interval = check_int(steps, "steps", min=1), check_int(growth_interval, "growth_interval", min=1)
    for name, value in (("backoff_factor", backoff_factor), ("growth_factor", growth_factor),
                        ("init_scale", init_scale), ("overflow_rate", overflow_rate),
                        ("largest_grad", largest_grad), ("grad_noise", grad_noise)):
        check_number(value, name)
    if not 0.0 < backoff_factor < 1.0:
        raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor!r}")
    if not growth_factor > 1.0:
        raise ValueError(f"growth_factor must be > 1, got {growth_factor!r}")
    if not 0.0 <= overflow_rate <= 1.0:
        raise ValueError(f"overflow_rate must be in [0, 1], got {overflow_rate!r}")
    if not (init_scale > 0 and largest_grad > 0 and grad_noise >= 0):
        raise ValueError("init_scale and largest_grad must be > 0 and grad_noise >= 0")
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(steps, generator=gen, dtype=torch.float64).mul_(grad_noise).exp_().mul_(largest_grad)
    bad = torch.rand(steps, generator=gen, dtype=torch.float64) < overflow_rate
    scale = torch.tensor(init_scale, dtype=torch.float32).item()   # the scaler keeps a float32
    tracker = 0
    scales, skipped = [], []
    for g, b in zip(noise.tolist(), bad.tolist()):
        overflow = b or scale * g > FP16_MAX
        scales.append(scale)
        skipped.append(overflow)
        scale, tracker = update_rule(scale, tracker, 1.0 if overflow else 0.0, growth_factor, backoff_factor,
                                     growth_interval)
    return {"scale": scales, "skipped": skipped, "bad": bad.tolist()}


def summary_text(run: dict) -> str:
    """Sentences about a simulated run: how many steps were skipped and why, where the scale went."""
    s, k, bad = run["scale"], run["skipped"], run["bad"]
    n, n_bad = sum(k), sum(bad)
    text = (f"{n} of {len(k)} steps skipped ({n / len(k):.1%}): {n - n_bad} because S times that step's "
            f"largest gradient passed {FP16_MAX:g}, {n_bad} because the step made inf/NaN by itself (skipped at "
            f"any S). S went from 2^{math.log2(s[0]):g} to 2^{math.log2(s[-1]):.3g} "
            f"(lowest 2^{math.log2(min(s)):.3g}).")
    d = diagnose_scales(s)                   # the rule debug.scale_verdict uses on a real run
    if d.sick and d.falling:
        text += " The scale keeps falling: the bad steps, not the scale, are the problem."
    elif d.sick:
        text += " The scale holds up, but the bad steps are still skipped: the settings hide them."
    return text


def scale_figure(run: dict, *, title: str | None = None) -> Figure:
    """The trajectory of a simulated (or real) run: log2 scale per step, skipped steps marked."""
    fig = Figure(figsize=(7, 3))
    ax = fig.add_subplot()
    viz.scale_trajectory(ax, run["scale"], run["skipped"])
    ax.axhline(FP16_MAX, color="#7f7f7f", ls=":", lw=1, label=f"{FP16_MAX:g} (fp16 max)")
    if title:
        ax.set_title(title)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return fig


class ScaleExplorer(Explorer):
    """growth_interval, backoff_factor and overflow_rate in; the simulated scale trajectory out."""

    def __init__(self, steps: int = 3000, growth_interval: int = 200, backoff_factor: float = 0.5,
                 overflow_rate: float = 0.0, largest_grad: float = 4.0, seed: int = 0):
        self.steps = steps
        self.seed = seed
        self.growth_interval = W.IntSlider(value=growth_interval, min=10, max=3000, step=10,
                                           description="growth_interval", style={"description_width": "initial"})
        self.backoff = W.FloatSlider(value=backoff_factor, min=0.05, max=0.95, step=0.05,
                                     description="backoff_factor", style={"description_width": "initial"})
        self.overflow_rate = W.FloatSlider(value=overflow_rate, min=0.0, max=0.2, step=0.001, readout_format=".3f",
                                           description="overflow rate", style={"description_width": "initial"})
        self.largest_grad = W.FloatLogSlider(value=largest_grad, base=2, min=-12, max=4, step=1,
                                             description="largest |grad|", style={"description_width": "initial"})
        self.text = W.HTML()
        self.plot = W.Output()
        self._wire((self.growth_interval, self.backoff, self.overflow_rate, self.largest_grad),
                   W.HBox([self.growth_interval, self.backoff]),
                   W.HBox([self.overflow_rate, self.largest_grad]), self.text, self.plot)

    def run(self) -> dict:
        return simulate_scale(self.steps, growth_interval=self.growth_interval.value, backoff_factor=self.backoff.value,
                              overflow_rate=self.overflow_rate.value, largest_grad=self.largest_grad.value,
                              seed=self.seed)

    def update(self):
        r = self.run()
        self.text.value = html.escape(summary_text(r))
        self.show_figure(scale_figure(r))


def scale_explorer(**kw) -> ScaleExplorer:
    """The loss-scale explorer, ready to display."""
    return ScaleExplorer(**kw)
