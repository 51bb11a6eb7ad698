"""The noise-aware speed verdict: 'faster'/'slower' only beyond the measured spread."""

import doctest

import pytest

from amp_edu.bench import verdict
from amp_edu.bench.timing import Timing
from amp_edu.bench.verdict import Load, machine_load, speed_verdict

QUIET = Load(0.5, 4, 4)


def t(med, iqr):
    return Timing(med, iqr, [])


def test_doctests():
    assert doctest.testmod(verdict).failed == 0


@pytest.mark.parametrize("a, b, word", [
    (t(0.5, 0.01), t(1.0, 0.01), "faster"),
    (t(2.0, 0.01), t(1.0, 0.01), "slower"),
    (t(1.04, 0.08), t(1.0, 0.10), "within noise"),     # boxes overlap
    (t(1.10, 0.08), t(1.0, 0.10), "slower"),           # 10% > 9% spread
    (t(1.01, 0.0), t(1.0, 0.0), "within noise"),       # no spread, but under min_rel
    (t(1.0, 0.0), t(1.0, 0.0), "within noise"),
])
def test_word(a, b, word):
    v = speed_verdict(a, b, load=QUIET)
    assert v.word == word
    assert v.significant == (word != "within noise")
    assert v.ratio == pytest.approx(a.median_s / b.median_s)


def test_sentence_names_both_and_the_spread():
    s = speed_verdict(t(1.04, 0.08), t(1.0, 0.10), load=QUIET).sentence("float16", "fp32")
    assert s.startswith("float16 took 1.04x the time of fp32: within noise")
    assert "9% spread" in s and "caveat" not in s
    s = speed_verdict(t(0.5, 0.0), t(1.0, 0.0), load=QUIET).sentence("bf16", "fp32")
    assert "bf16 took 0.50x the time of fp32: faster" in s


def test_busy_and_oversubscribed_caveats():
    busy = Load(7.9, 2, 2)
    assert busy.busy and not busy.oversubscribed
    assert "load average 7.9 on 2 cores" in busy.caveat
    over = Load(0.1, 2, 8)
    assert over.oversubscribed and "8 threads on 2 cores" in over.caveat
    assert QUIET.caveat is None
    assert Load(None, 2, 2).caveat is None          # no load average (Windows): no claim
    assert "caveat" in speed_verdict(t(1, 0), t(1, 0), load=busy).sentence()
    assert speed_verdict(t(1, 0), t(1, 0), load=False).caveat is None


def test_inputs_accepted():
    rows = {"median_s": 1.0, "iqr_s": 0.1}
    assert speed_verdict(rows, [1.0, 1.0, 1.0, 1.0], load=False).word == "within noise"
    assert isinstance(machine_load(), Load)
    assert machine_load(threads=3).threads == 3


@pytest.mark.parametrize("bad, exc", [
    ("fast", TypeError), ({"median_s": 1.0}, TypeError), ([], TypeError), ([True], TypeError),
    ({"median_s": 0.0, "iqr_s": 0.0}, ValueError), ({"median_s": 1.0, "iqr_s": -1.0}, ValueError),
    ({"median_s": float("nan"), "iqr_s": 0.0}, ValueError), ({"median_s": "1", "iqr_s": 0.0}, TypeError),
    ({"median_s": 1.0, "iqr_s": True}, TypeError), ({"median_s": 1.0, "iqr_s": float("inf")}, ValueError),
])
def test_bad_timing(bad, exc):
    with pytest.raises(exc):
        speed_verdict(bad, t(1, 0), load=False)


def test_bad_options():
    with pytest.raises(ValueError):
        speed_verdict(t(1, 0), t(1, 0), min_rel=1.5)
    with pytest.raises(TypeError):
        speed_verdict(t(1, 0), t(1, 0), load="busy")
    with pytest.raises(ValueError):
        machine_load(threads=0)
    for bad in (True, 2.0):
        with pytest.raises(TypeError, match="threads"):
            machine_load(threads=bad)
    for bad in (True, "0.1", None):
        with pytest.raises(TypeError, match="min_rel"):
            speed_verdict(t(1, 0), t(1, 0), min_rel=bad, load=False)
    with pytest.raises(ValueError, match=r"min_rel must be a number in \[0, 1\)"):
        speed_verdict(t(1, 0), t(1, 0), min_rel=1, load=False)
    with pytest.raises(ValueError, match="min_rel"):
        speed_verdict(t(1, 0), t(1, 0), min_rel=-0.1, load=False)


def test_paired_speed_verdict_uses_the_pairs():
    """A shared drift (each round slower than the last) cancels in the pairs: a 5% gain that the
    pooled IQRs call noise is found by the paired test; pairs that disagree stay 'within noise'."""
    from amp_edu.bench.verdict import paired_speed_verdict, speed_verdict
    drift = [1.0, 1.3, 1.6, 1.9, 2.2, 2.5]
    a = [0.95 * d for d in drift]
    assert speed_verdict(a, drift, load=False).word == "within noise"
    v = paired_speed_verdict(a, drift, load=False)
    assert v.word == "faster" and v.ratio == pytest.approx(0.95) and "pairs" in v.sentence()
    mixed = [d * f for d, f in zip(drift, (0.9, 1.1, 0.95, 1.05, 1.0, 1.02))]
    assert paired_speed_verdict(mixed, drift, load=False).word == "within noise"
    with pytest.raises(ValueError, match="pair up"):
        paired_speed_verdict([1.0], [1.0], load=False)
    with pytest.raises(TypeError):
        paired_speed_verdict(["1"], ["2"], load=False)
