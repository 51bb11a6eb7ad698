"""Lessons 02-03's loss-scale explorer: logic tested directly, widget driven headless."""

import re

import pytest
import torch

from amp_edu import data, models
from amp_edu import gradients as G
from amp_edu.widgets import LossScaleExplorer, loss_scale_explorer, loss_scale_summary
from amp_edu.widgets import loss_scale as wl
from widgetcheck import redraws  # noqa: E402


def pct(text, what):
    return float(re.search(r"([\d.]+)% " + what, text).group(1))


def test_summary_moves_values_out_of_the_flush_zone_and_into_overflow():
    x = torch.tensor([0.0, 2.0 ** -30, 2.0 ** -20, 1.0, 2.0 ** 10])
    s0 = loss_scale_summary(x, 0)
    assert "S = 2^0" in s0["text"] and "20.0% exactly zero" in s0["text"]
    assert pct(s0["text"], "of the non-zero ones flush") == 25.0
    s10 = loss_scale_summary(x, 10)
    assert pct(s10["text"], "of the non-zero ones flush") == 0.0
    assert pct(s10["text"], "overflow") == 25.0
    assert s10["overflow"] == G.fp16_fractions(x, 2.0 ** 10)["overflow"]
    assert "largest |g| × S is 1.05e+06" in s10["text"]
    with pytest.raises(TypeError, match="log2_scale"):
        loss_scale_summary(x, 2.5)
    for bad in (True, "3"):
        with pytest.raises(TypeError, match="log2_scale must be an int"):
            loss_scale_summary(x, bad)


def test_figure_has_labelled_axes():
    fig = wl.loss_scale_figure(torch.exp2(-torch.arange(30.0)), 4, title="t")
    ax = fig.axes[0]
    assert "log2" in ax.get_xlabel() and "%" in ax.get_ylabel() and ax.get_title() == "t"


def test_explorer_over_tensors_redraws_when_the_slider_moves():
    e = loss_scale_explorer(torch.tensor([2.0 ** -28, 2.0 ** -27, 1.0, 2.0]))
    assert isinstance(e, LossScaleExplorer) and e.layer.disabled
    assert pct(e.text.value, "of the non-zero ones flush") == 50.0
    redraws(e.plot, lambda: setattr(e.log2_scale, "value", 4))
    assert pct(e.text.value, "of the non-zero ones flush") == 0.0 and "S = 2^4" in e.text.value
    redraws(e.plot, lambda: setattr(e.log2_scale, "value", 15))
    assert pct(e.text.value, "overflow") == 25.0


def test_explorer_over_a_gradient_record_picks_layers_and_kinds():
    task = data.get_task("blobs", device="cpu", n=64)
    m = models.build("mlp", task, width=16, depth=2)
    rec = G.capture(m, *task.batch(8, torch.Generator().manual_seed(0)), task.loss)
    e = LossScaleExplorer(rec, 3)
    assert e.layer.options[0] == "all layers" and "head" in e.layer.options
    e.layer.value = "head"
    want = loss_scale_summary(rec.activations["head"], 3)["text"]
    assert e.text.value == want.replace("&", "&amp;")
    e.kind.value = "weights"
    assert e.layer.value == "all layers" and "head.weight" in e.layer.options
    assert e.text.value == loss_scale_summary(rec.values("weights"), 3)["text"]
    e.layer.value = "head.bias"
    assert e.current_values().numel() == task.n_classes
    with pytest.raises(ValueError, match="kind"):
        LossScaleExplorer(rec, kind="both")
