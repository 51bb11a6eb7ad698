"""Lesson 00's explorer, driven headless: the race measures both dtypes, and a control change re-measures."""

import pytest

from amp_edu.measure.verdict import NO_VERDICT, WORDS
from amp_edu.widgets.setup import RACE_DTYPES, MatmulRaceExplorer, race
from widgetcheck import redraws  # noqa: E402


def test_race_times_both_dtypes_side_by_side():
    r = race(5, "float16", "cpu", rounds=1, repeats=2, min_time_s=0.001)
    assert r["n"] == 32 and r["dtype"] == "float16" and r["device"] == "cpu"
    assert r["fp32"].median_s > 0 and r["float16"].median_s > 0
    assert r["verdict"].word in (*WORDS, NO_VERDICT)     # a busy machine (the test's neighbours) gets none


@pytest.mark.parametrize("bad, exc", [(dict(log2_n=0), ValueError), (dict(log2_n=2.5), TypeError),
                                      (dict(dtype="float8"), ValueError), (dict(dtype=None), TypeError)])
def test_race_rejects_bad_input(bad, exc):
    args = {"log2_n": 5, "dtype": "bfloat16", **bad}
    with pytest.raises(exc):
        race(args["log2_n"], args["dtype"])


def test_explorer_measures_again_when_a_control_moves():
    w = MatmulRaceExplorer(device="cpu", log2_n=5, max_log2_n=6)
    assert w.dtype.options == RACE_DTYPES
    assert w.text.value.startswith("32×32 on cpu: fp32 ")
    redraws(w.plot, lambda: setattr(w.log2_n, "value", 6))
    assert w.text.value.startswith("64×64 on cpu") and "bfloat16" in w.text.value
    redraws(w.plot, lambda: setattr(w.dtype, "value", "float16"))
    assert "float16" in w.text.value
    assert "image/png" in w._repr_mimebundle_()          # the stored page shows a picture of it
