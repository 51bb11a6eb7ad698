"""Lesson 12's explorer, headless: the walk's logic, the text and the figure it shows."""

import pytest

from amp_edu.widgets.optim import rounding_explorer, rounding_walk, walk_text
from widgetcheck import redraws


def test_walk_below_half_an_ulp():
    w = rounding_walk(-11, 400)
    assert w["nearest"][-1] == 1.0                      # never moves
    change = w["exact"][-1] - 1.0
    assert abs((w["kahan"][-1] - 1.0) / change - 1) < 0.02
    assert abs((w["stochastic"][-1] - 1.0) / change - 1) < 0.1
    assert "0.0% of the exact change" in walk_text(w, -11)


def test_explorer_updates_headless():
    e = rounding_explorer(steps=100)
    redraws(e.plot, lambda: setattr(e.ratio, "value", -6.0))
    assert "2^-6" in e.text.value
    redraws(e.plot, lambda: setattr(e.steps, "value", 300))


def test_bad_arguments():
    with pytest.raises(TypeError):
        rounding_walk("-11")
    with pytest.raises(ValueError):
        rounding_walk(3.0)
