"""Lesson 04's loss-scale explorer: the simulation is the scaler's own rule; the widget reacts."""

import math

import matplotlib
import pytest
import torch

from amp_edu import viz
from amp_edu.widgets.scaler import FP16_MAX, scale_explorer, scale_figure, simulate_scale, summary_text
from widgetcheck import redraws  # noqa: E402

matplotlib.use("Agg")


def test_simulation_is_seeded_and_shaped():
    a = simulate_scale(500, growth_interval=50, seed=3)
    assert a == simulate_scale(500, growth_interval=50, seed=3)
    assert a != simulate_scale(500, growth_interval=50, seed=4)
    assert len(a["scale"]) == len(a["skipped"]) == len(a["bad"]) == 500
    assert all(isinstance(v, float) for v in a["scale"]) and all(isinstance(v, bool) for v in a["skipped"])


def test_first_steps_at_2_16_overflow_then_the_scale_settles():
    r = simulate_scale(2000, growth_interval=100, largest_grad=4.0)
    assert r["skipped"][:2] == [True, True]                       # 2^16 * 4 and 2^15 * 4 > 65504
    assert r["scale"][:3] == [2.0 ** 16, 2.0 ** 15, 2.0 ** 14]
    assert sum(r["skipped"]) < 0.05 * 2000
    assert all(s * 4.0 / 2 <= FP16_MAX for s in r["scale"][100:]), "stays near the largest safe scale"


def test_growth_happens_exactly_every_growth_interval():
    r = simulate_scale(35, growth_interval=10, largest_grad=2.0 ** -20, grad_noise=0.0, init_scale=1.0)
    assert not any(r["skipped"])
    assert r["scale"] == [2.0 ** (i // 10) for i in range(35)]    # grows after steps 10, 20, 30


def test_every_step_bad_backs_off_in_float32_and_scale_never_grows_to_inf():
    r = simulate_scale(8, overflow_rate=1.0, backoff_factor=0.3, init_scale=1.0)
    assert all(r["skipped"])
    expect, s = [], torch.tensor(1.0)
    for _ in range(8):
        expect.append(s.item())
        s = (s.double() * 0.3).float()
    assert r["scale"] == expect
    top = simulate_scale(20, growth_interval=1, largest_grad=2.0 ** -140, grad_noise=0.0, init_scale=2.0 ** 120)
    assert max(top["scale"]) == 2.0 ** 127 and all(math.isfinite(v) for v in top["scale"])


def test_summary_tells_a_collapse_from_a_healthy_run():
    healthy = simulate_scale(3000, growth_interval=200)
    assert not any(healthy["bad"]) and ", 0 because the step made inf/NaN" in summary_text(healthy)
    assert "falling" not in summary_text(healthy) and "hide" not in summary_text(healthy)
    sick = simulate_scale(3000, growth_interval=200, overflow_rate=0.02)
    assert "keeps falling" in summary_text(sick)
    hidden = simulate_scale(3000, growth_interval=10, overflow_rate=0.02)
    assert min(hidden["scale"][1000:]) > 1.0, "a short growth_interval hides the bad steps..."
    assert sum(hidden["skipped"]) >= sum(hidden["bad"]) > 40, "...which are still skipped"
    assert "the settings hide them" in summary_text(hidden)


@pytest.mark.parametrize("kw", [dict(steps=0), dict(growth_interval=0), dict(backoff_factor=1.0),
                                dict(growth_factor=1.0), dict(overflow_rate=1.5), dict(largest_grad=0.0)])
def test_bad_input(kw):
    with pytest.raises(ValueError):
        simulate_scale(**{"steps": 10, **kw})


@pytest.mark.parametrize("kw", [dict(growth_interval=2.5), dict(steps=True), dict(growth_interval=True)])
def test_ints_that_are_not_ints_are_a_type_error(kw):
    with pytest.raises(TypeError, match=f"{next(iter(kw))} must be an int"):
        simulate_scale(**{"steps": 10, **kw})


@pytest.mark.parametrize("kw", [dict(backoff_factor="0.5"), dict(overflow_rate=None), dict(init_scale=True)])
def test_non_numbers_are_a_type_error_naming_the_argument(kw):
    with pytest.raises(TypeError, match=f"{next(iter(kw))} must be a number"):
        simulate_scale(10, **kw)


def test_explorer_reacts_to_its_controls():
    w = scale_explorer(steps=600, growth_interval=50)
    assert ", 0 because the step made inf/NaN" in w.text.value
    redraws(w.plot, lambda: setattr(w.overflow_rate, "value", 0.05))
    assert "keeps falling" in w.text.value
    w.growth_interval.value = 10
    assert w.run() == simulate_scale(600, growth_interval=10, overflow_rate=0.05, largest_grad=4.0)
    before = w.text.value
    w.backoff.value = 0.9
    assert w.text.value != before


def test_scale_trajectory_plot():
    fig = scale_figure({"scale": [4.0, 2.0, 2.0, 4.0], "skipped": [True, False, False, False]}, title="t")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "loss scale S" and ax.get_xlabel() == "optimizer step"
    xs = [line for line in ax.get_lines() if line.get_marker() == "x"][0]
    assert list(xs.get_xdata()) == [0]
    import matplotlib.pyplot as plt
    _, ax2 = plt.subplots()
    with pytest.raises(ValueError):
        viz.scale_trajectory(ax2, [1.0, 2.0], [True])
    plt.close("all")
