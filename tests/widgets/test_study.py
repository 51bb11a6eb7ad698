"""Lesson 08's study explorer, driven headless on a study built from known numbers."""

import math

import pytest

from amp_edu.widgets.study import StudyExplorer, study_view
from studyfake import fake
from widgetcheck import redraws  # noqa: E402


def _study():
    base = [(1.00, 0.70), (1.02, 0.72), (0.98, 0.68)]
    return fake({"fp32": base, "amp_fp16": [(l + 0.001, a) for l, a in base],
                 "fp16_pure": [(math.nan, 0.125)] * 3})


def test_study_view_keeps_fp32_and_derives_the_verdict():
    fig, sentences = study_view(_study(), "eval_loss", ["fp16_pure"])
    assert len(fig.axes[0].lines) == 2                      # fp32 is kept as the baseline
    assert len(sentences) == 1 and sentences[0].startswith("fp16_pure: diverged")
    with pytest.raises(ValueError):
        study_view(_study(), "eval_loss", ["fp8"])
    with pytest.raises(TypeError):
        study_view({"fp32": []})


def test_explorer_updates_on_controls():
    w = StudyExplorer(_study())
    assert "amp_fp16: final held-out loss" in w.text.value
    redraws(w.plot, lambda: setattr(w.metric, "value", "eval_accuracy"))
    assert "held-out accuracy" in w.text.value
    redraws(w.plot, lambda: setattr(w.band, "value", "std"))
    redraws(w.plot, lambda: setattr(w.recipes, "value", ("fp32",)))
    assert "choose a recipe" in w.text.value
