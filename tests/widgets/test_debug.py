"""Lesson 09's layer explorer, driven headless."""

import pytest
import torch
from torch import nn

from amp_edu.widgets.debug import LayerExplorer, explore_layers
from widgetcheck import png, redraws  # noqa: E402


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))


def test_explore_layers_finds_the_first_overflow_in_fp16_only():
    net, x = _net(), torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    calls, first = explore_layers(net, x, 0, "autocast fp16")
    assert first is None and calls[0].dtype == "float16"
    calls, first = explore_layers(net, x, 18, "autocast fp16")
    assert first is not None and first.name == "0" and first.kind in ("inf", "inf and nan")
    _, first32 = explore_layers(net, x, 18, "fp32")
    _, first_bf = explore_layers(net, x, 18, "autocast bf16")
    assert first32 is None and first_bf is None          # fp32's and bf16's range hold 2^18 easily
    with pytest.raises(ValueError):
        explore_layers(net, x, 0, "fp8")
    with pytest.raises(TypeError):
        explore_layers(net, torch.ones(2, 4, dtype=torch.long))


def test_widget_updates_when_controls_change():
    w = LayerExplorer(_net(), torch.randn(8, 4, generator=torch.Generator().manual_seed(1)), max_log2=20)
    assert "every output finite" in w.text.value and png(w.plot)
    redraws(w.plot, lambda: setattr(w.scale, "value", 18))
    assert "0 (Linear)" in w.text.value and "inf" in w.text.value
    redraws(w.plot, lambda: setattr(w.precision, "value", "fp32"))
    assert "every output finite" in w.text.value and "fp32" in w.text.value
