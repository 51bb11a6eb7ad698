"""Lesson 14's explorer: pick a ``TrainingArguments`` precision flag and a device; see what runs.

For this machine the answer is what the objects said when the lesson asked them
(:func:`amp_edu.hf.inspect_flag` reports, computed once in the lesson and handed in); for a CUDA
GPU, which the lesson may not have, it is accelerate's rule (:func:`amp_edu.hf.plan_for`) with the
source lines that implement it. The logic is :func:`flag_text`.
"""

from __future__ import annotations

import html

import ipywidgets as W

from .. import hf
from .base import Explorer

__all__ = ["WHERE", "flag_text", "FlagExplorer", "flag_explorer"]

WHERE = ("this machine", "a CUDA GPU (from the source)")
_GPU_CITES = {"fp32": (), "fp16": ("fp16_scaler", "grad_scaler_kind", "wrap_forward", "autocast_fp16"),
              "bf16": ("bf16_native", "wrap_forward", "autocast_bf16", "bf16_needs_use_cpu")}


def flag_text(setting: str, where: str, reports: dict) -> str:
    """The explorer's text: what ``setting`` does ``where`` (one of :data:`WHERE`). ``reports`` maps
    each setting to the :class:`amp_edu.hf.FlagReport` measured on this machine."""
    if not isinstance(setting, str) or setting not in hf.SETTINGS:
        raise ValueError(f"setting must be one of {list(hf.SETTINGS)}, got {setting!r}")
    if not isinstance(where, str) or where not in WHERE:
        raise ValueError(f"where must be one of {list(WHERE)}, got {where!r}")
    if not isinstance(reports, dict) or setting not in reports:
        raise TypeError(f"reports must be a dict with a FlagReport for {setting!r} (from amp_edu.hf.inspect_flag)")
    if where == WHERE[0]:
        r = reports[setting]
        lines = [r.summary()]
        warning = hf.precision_warning(r)
        if warning:
            lines += ["", warning]
        return "\n".join(lines)
    plan = hf.plan_for(setting, "cuda")
    lines = [f"{setting} on a CUDA GPU: {plan.describe()} (not run here: accelerate's rule, read from its source)"]
    if setting == "bf16":
        lines.append("on a GPU without native bf16 (before Ampere) TrainingArguments raises ValueError instead")
    lines += [f"  {hf.CITES[k].says}: {hf.where(k)}" for k in _GPU_CITES[setting]]
    return "\n".join(lines)


class FlagExplorer(Explorer):
    """A flag and a place in; what runs out."""

    def __init__(self, reports: dict, setting: str = "fp16", where: str = WHERE[0]):
        self.reports = reports
        self.setting = W.ToggleButtons(options=list(hf.SETTINGS), value=setting, description="flag")
        self.where = W.Dropdown(options=list(WHERE), value=where, description="on")
        self.text = W.HTML()
        self._wire((self.setting, self.where), W.HBox([self.setting, self.where]), self.text)

    def update(self):
        body = html.escape(flag_text(self.setting.value, self.where.value, self.reports))
        self.text.value = f"<pre style='white-space: pre-wrap'>{body}</pre>"


def flag_explorer(reports: dict, **kw) -> FlagExplorer:
    """The flag explorer over ``reports`` (setting -> FlagReport), ready to display."""
    return FlagExplorer(reports, **kw)
