"""Reading a loss-scale trajectory: calibration, probing, or inf/NaN that the scale does not explain.

A dynamic scaler lowers the scale only when a step's gradients hold inf/NaN, and raises it after
``growth_interval`` clean steps. So the trajectory alone (the scale used at each step) says which
steps were skipped — exactly those followed by a lower scale — and, by comparing each skip with
the scales that had already worked, *why*. Underflow never lowers the scale; only non-finite
gradients do. Tuning ``growth_interval`` / ``backoff_factor`` hides a model that makes inf/NaN,
it does not fix it. :func:`diagnose_scales` counts; :func:`scale_verdict` says it in a sentence;
the lesson 04 explorer (:mod:`amp_edu.widgets.scaler`) uses the same rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

__all__ = ["ScaleDiagnosis", "diagnose_scales", "scale_verdict"]


@dataclass(frozen=True)
class ScaleDiagnosis:
    """What a scale trajectory says (see :func:`diagnose_scales`)."""

    scales: tuple[float, ...]
    warm: int            # calibration back-offs at the start (from the initial 2^16, on purpose)
    steps: int           # steps after calibration
    probes: int          # skips at a scale above every scale that had worked: healthy probing
    unexplained: int     # skips at a scale that had already worked: the model/loss/data made inf/NaN

    @property
    def sick(self) -> bool:
        """Three or more unexplained skips, and at least 1% of the steps."""
        return self.unexplained >= 3 and self.unexplained >= 0.01 * max(self.steps, 1)

    @property
    def falling(self) -> bool:
        """The scale ends more than 4× below where calibration left it."""
        return self.scales[-1] < self.scales[self.warm] / 4


def diagnose_scales(scales: Iterable[float]) -> ScaleDiagnosis:
    """Count calibration back-offs, probing skips and unexplained skips in a scale trajectory.

    A step was skipped exactly when the next step's scale is lower (the scaler backed off). The
    first steps of a run back off from the initial 2^16 on purpose: that is calibration, set
    aside. After it, a skip at a scale *above* every scale that has worked so far is the scaler
    probing too high — healthy, whatever ``growth_interval`` is. A skip at a scale that had
    already worked is not explained by the scale at all: the model, loss or data made inf/NaN.
    """
    try:
        s = tuple(float(v) for v in scales)
    except (TypeError, ValueError):
        raise TypeError("scales must be an iterable of numbers (the scale used at each step, "
                        f"e.g. scaler.get_scale() per step), got {scales!r:.80}") from None
    if len(s) < 2:
        raise ValueError("need the scale of at least 2 steps")
    if any(not math.isfinite(v) or v <= 0 for v in s):
        raise ValueError("scales must be positive finite numbers")
    warm = 0
    while warm + 1 < len(s) and s[warm + 1] < s[warm]:
        warm += 1
    best_ok = 0.0
    probes = unexplained = 0
    for a, b in zip(s[warm:], s[warm + 1:]):
        if b < a:
            if a <= best_ok:
                unexplained += 1
            else:
                probes += 1
        else:
            best_ok = max(best_ok, a)
    return ScaleDiagnosis(s, warm, len(s) - 1 - warm, probes, unexplained)


def scale_verdict(scales: Iterable[float]) -> str:
    """Read a loss-scale trajectory (the scale used at each step) and say what it means, in one
    sentence: the counts of :func:`diagnose_scales`, then "healthy" or where to look."""
    d = diagnose_scales(scales)
    s, warm = d.scales, d.warm
    head = (f"{warm} calibration back-off(s) from 2^{math.log2(s[0]):g}; then {d.steps} steps, "
            f"scale 2^{math.log2(s[warm]):.3g} → 2^{math.log2(s[-1]):.3g}, {d.probes} skip(s) while probing "
            f"a higher scale, {d.unexplained} at a scale that had already worked")
    if d.sick:
        trend = ("; the scale keeps falling" if d.falling else
                 "; the scale holds up only because the scaler re-grows it")
        return (head + f" — {d.unexplained / max(d.steps, 1):.0%} of the steps had inf/NaN gradients "
                "that the scale does not explain" + trend + ". Look for what makes inf/NaN (data, "
                "loss, an op) instead of tuning growth_interval or backoff_factor.")
    return head + " — healthy."
