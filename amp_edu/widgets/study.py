"""Lesson 08's explorer: look at a convergence study from every side.

Pick the metric, the recipes to show and the band (min–max or ±1 sd over seeds); the curves and the
verdict for that metric update. Nothing is retrained: the widget only re-reads an
:class:`amp_edu.study.Study`. The logic is :func:`study_view`.
"""

from __future__ import annotations

import html

import ipywidgets as W
from matplotlib.figure import Figure

from ..study import METRICS, Study, plot_curves, verdict
from .base import Explorer

__all__ = ["study_view", "StudyExplorer", "study_explorer"]


def study_view(study: Study, metric: str = "eval_loss", recipes=None, band: str = "range"):
    """``(figure, sentences)`` for ``study`` restricted to ``recipes`` (fp32 is always kept as the baseline)."""
    if not isinstance(study, Study):
        raise TypeError(f"study must be an amp_edu.study.Study, got {type(study).__name__}")
    chosen = tuple(r for r in study.recipes if recipes is None or r in recipes or r == "fp32")
    unknown = set(recipes or ()) - set(study.recipes)
    if unknown:
        raise ValueError(f"recipes {sorted(unknown)} are not in this study; it has {', '.join(study.recipes)}")
    sub = Study(study.task, study.model, study.steps, study.seeds, chosen,
                {r: study.runs[r] for r in chosen}, dict(study.train_kwargs))
    fig = Figure(figsize=(7, 3.6))
    plot_curves(sub, fig.subplots(), metric, band=band)
    fig.tight_layout()
    sentences = verdict(sub, (metric,)) if "fp32" in chosen and len(chosen) > 1 else []
    return fig, sentences


class StudyExplorer(Explorer):
    """Metric, recipes and band controls over a finished study."""

    def __init__(self, study: Study, metric: str = "eval_loss", band: str = "range"):
        self.study = study
        self.metric = W.Dropdown(options=list(METRICS), value=metric, description="metric")
        self.band = W.ToggleButtons(options=[("min–max", "range"), ("±1 sd", "std")], value=band,
                                    description="band")
        self.recipes = W.SelectMultiple(options=list(study.recipes), value=list(study.recipes),
                                        description="recipes", rows=len(study.recipes))
        self.text = W.HTML()
        self.plot = W.Output()
        self._wire((self.metric, self.band, self.recipes),
                   W.HBox([self.metric, self.band]), self.recipes, self.text, self.plot)

    def update(self) -> list[str]:
        fig, sentences = study_view(self.study, self.metric.value, self.recipes.value, self.band.value)
        self.text.value = "<br>".join(html.escape(s) for s in sentences) or "(choose a recipe besides fp32)"
        self.show_figure(fig)
        return sentences


def study_explorer(study: Study, **kw) -> StudyExplorer:
    """The study explorer, ready to display."""
    return StudyExplorer(study, **kw)
