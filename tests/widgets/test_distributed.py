"""Lesson 11's explorer, headless: the simulation's logic, the text, and the widget's outputs."""

import pytest

from amp_edu.widgets.distributed import RankScaleExplorer, ranks_text, simulate_ranks


def test_agreeing_ranks_never_disagree_and_share_one_scale():
    run = simulate_ranks(8, 500, 0.01, agree=True, growth_interval=50)
    assert run["disagree"] == 0
    assert all(s == run["scale"][0] for s in run["scale"])
    assert run["any_overflow"] > 0
    assert sum(not x for x in run["stepped"][0]) == run["any_overflow"]


def test_local_only_ranks_drift():
    run = simulate_ranks(8, 500, 0.01, agree=False, growth_interval=50)
    assert run["disagree"] > 0
    assert len({s[-1] for s in run["scale"]}) > 1
    assert "disagreed on" in ranks_text(run, 0.01)


def test_one_rank_cannot_disagree_with_itself():
    assert simulate_ranks(1, 200, 0.05, agree=False)["disagree"] == 0


@pytest.mark.parametrize("kw", [dict(world_size=0), dict(world_size=1025), dict(steps=0), dict(p_overflow=1.5),
                                dict(growth_interval=0)])
def test_bad_input(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        simulate_ranks(**kw)
    with pytest.raises(TypeError):
        simulate_ranks(agree="yes")


@pytest.mark.parametrize("kw", [dict(world_size=2.0), dict(world_size=True), dict(steps="100"),
                                dict(p_overflow=True), dict(p_overflow="0.1"), dict(agree=1),
                                dict(growth_interval=1.5)])
def test_wrong_type_is_a_type_error_naming_the_argument(kw):
    with pytest.raises(TypeError, match=next(iter(kw))):
        simulate_ranks(**kw)


def test_widget_updates_headless():
    w = RankScaleExplorer(world_size=4, steps=300, p_overflow=0.01, agree=False)
    assert "disagreed" in w.text.value and w.plot.outputs[0]["data"]["image/png"]
    w.agree.value = True
    assert "Every rank skipped the same" in w.text.value
