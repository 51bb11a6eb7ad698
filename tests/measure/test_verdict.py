"""The speed verdict: 'faster'/'slower' only beyond the measured spread, and no verdict at all when
the repeats spread so much that the machine was busy (issue #31)."""

import doctest
import random

import pytest

from amp_edu.measure import verdict
from amp_edu.measure.stats import paired_test
from amp_edu.measure.timing import Timing
from amp_edu.measure.verdict import (BUSY_SPREAD, MIN_CPU_SHARE, NO_VERDICT, WORDS, busy, paired_call,
                                     paired_speed_verdict, speed_verdict, verdict_table)


def t(med, iqr):
    return Timing(med, iqr, [])


def repeats(median, rel_jitter, n=20, seed=0):
    """``n`` synthetic repeat times around ``median``: each off by up to ``rel_jitter`` of it, and
    on a busy machine (large jitter) only ever slower, as a stalled repeat is."""
    rng = random.Random(seed)
    return [median * (1 + rel_jitter * rng.random()) for _ in range(n)]


def test_doctests():
    assert doctest.testmod(verdict).failed == 0


@pytest.mark.parametrize("a, b, word", [
    (t(0.5, 0.01), t(1.0, 0.01), "faster"),
    (t(2.0, 0.01), t(1.0, 0.01), "slower"),
    (t(1.04, 0.08), t(1.0, 0.10), "within noise"),     # boxes overlap
    (t(1.10, 0.08), t(1.0, 0.10), "slower"),           # 10% > 9% spread
    (t(1.01, 0.0), t(1.0, 0.0), "within noise"),       # no spread, but under min_rel
    (t(1.0, 0.0), t(1.0, 0.0), "within noise"),
    (t(1.0, 0.25), t(1.0, 0.0), "within noise"),       # 25% of the median: still a quiet machine
])
def test_word(a, b, word):
    v = speed_verdict(a, b)
    assert v.word == word and v.concluded and v.busy is None
    assert v.significant == (word != "within noise")
    assert v.ratio == pytest.approx(a.median_s / b.median_s)


def test_sentence_names_both_and_the_spread():
    s = speed_verdict(t(1.04, 0.08), t(1.0, 0.10)).sentence("float16", "fp32")
    assert s.startswith("float16 took 1.04x the time of fp32: within noise")
    assert "9% spread" in s
    s = speed_verdict(t(0.5, 0.0), t(1.0, 0.0)).sentence("bf16", "fp32")
    assert "bf16 took 0.50x the time of fp32: faster" in s


def test_busy_repeats_get_no_verdict_and_tight_ones_do():
    """The refusal both ways, from synthetic repeats: a 10× gap measured on a busy machine draws
    no conclusion; the same gap with tight repeats is 'slower'."""
    fast = repeats(1e-3, 0.05, seed=1)                      # a quiet machine: 5% jitter
    tight_slow = repeats(10e-3, 0.05, seed=2)
    stalled_slow = repeats(10e-3, 3.0, seed=3)              # some repeats stall for up to 3x
    assert Timing.from_times(stalled_slow).rel_spread > BUSY_SPREAD
    assert Timing.from_times(tight_slow).rel_spread < BUSY_SPREAD
    v = speed_verdict(tight_slow, fast)
    assert v.word == "slower" and v.concluded
    refused = speed_verdict(stalled_slow, fast)
    assert refused.word == NO_VERDICT and not refused.concluded and not refused.significant
    s = refused.sentence("two threads", "one thread")
    assert s.startswith("two threads against one thread: no verdict: the repeats of two threads spread by")
    assert "busy" in s and "x the time" not in s                  # no ratio printed
    assert not any(w in s for w in WORDS)                         # not faster, not slower, not "within noise"
    # whichever side stalled is named; a baseline that stalled refuses as well
    assert "the repeats of one thread" in speed_verdict(fast, stalled_slow).sentence("two threads", "one thread")


def test_busy_rule_limit_is_a_parameter():
    a, b = t(2.0, 0.6), t(1.0, 0.0)                         # a's repeats spread 30%
    assert speed_verdict(a, b).word == NO_VERDICT
    assert speed_verdict(a, b, max_spread=0.5).word == "slower"
    with pytest.raises(ValueError, match="max_spread"):
        speed_verdict(a, b, max_spread=0)
    with pytest.raises(TypeError, match="max_spread"):
        speed_verdict(a, b, max_spread="0.3")


def test_busy_over_a_table_names_the_worst_row():
    quiet = {"fp32": repeats(1e-3, 0.05), "bf16": repeats(2e-3, 0.05, seed=4)}
    assert busy(quiet) is None
    b = busy({**quiet, "fp16": repeats(3e-3, 3.0, seed=5)})
    assert b.what == "the repeats of fp16" and b.value > BUSY_SPREAD and b.limit == BUSY_SPREAD and b.kind == "spread"
    assert b.sentence(" (1 thread)").startswith(f"{NO_VERDICT}: the repeats of fp16 spread by")
    assert "too unsteady to compare (a busy machine, most often) (1 thread)" in b.sentence(" (1 thread)")
    with pytest.raises(TypeError, match="timings"):
        busy([1.0, 2.0])
    with pytest.raises(TypeError, match="timings"):
        busy({})


def test_verdict_table_both_ways():
    quiet = {"fp32": repeats(1e-3, 0.05), "amp_bf16": repeats(2e-3, 0.05, seed=4),
             "amp_fp16": repeats(1.01e-3, 0.05, seed=6)}
    lines = verdict_table(quiet, "fp32", note=" on this CPU")
    assert len(lines) == 4 and "the baseline" in lines[0]
    assert "slower" in lines[1] and "within noise" in lines[2]
    assert lines[-1].startswith("  every row's repeats spread by at most") and lines[-1].endswith("on this CPU")
    noisy = {**quiet, "fp16_pure": repeats(4e-3, 3.0, seed=7)}
    lines = verdict_table(noisy, "fp32", note=" on this CPU")
    assert len(lines) == 5 and "(a busy machine, most often) on this CPU" in lines[-1]
    assert not any(w in line for line in lines for w in WORDS)      # the medians, and no verdict
    assert "µs" in verdict_table(quiet, "fp32", unit="µs")[0]
    with pytest.raises(ValueError, match="baseline"):
        verdict_table(quiet, "fp8")
    with pytest.raises(ValueError, match="unit"):
        verdict_table(quiet, "fp32", unit="s")
    with pytest.raises(TypeError, match="times"):
        verdict_table([], "fp32")


def test_inputs_accepted():
    rows = {"median_s": 1.0, "iqr_s": 0.1}
    assert speed_verdict(rows, [1.0, 1.0, 1.0, 1.0]).word == "within noise"


@pytest.mark.parametrize("bad, exc", [
    ("fast", TypeError), ({"median_s": 1.0}, TypeError), ([], TypeError), ([True], TypeError),
    ({"median_s": 0.0, "iqr_s": 0.0}, ValueError), ({"median_s": 1.0, "iqr_s": -1.0}, ValueError),
    ({"median_s": float("nan"), "iqr_s": 0.0}, ValueError), ({"median_s": "1", "iqr_s": 0.0}, TypeError),
    ({"median_s": 1.0, "iqr_s": True}, TypeError), ({"median_s": 1.0, "iqr_s": float("inf")}, ValueError),
])
def test_bad_timing(bad, exc):
    with pytest.raises(exc):
        speed_verdict(bad, t(1, 0))


def test_bad_options():
    with pytest.raises(ValueError):
        speed_verdict(t(1, 0), t(1, 0), min_rel=1.5)
    for bad in (True, "0.1", None):
        with pytest.raises(TypeError, match="min_rel"):
            speed_verdict(t(1, 0), t(1, 0), min_rel=bad)
    with pytest.raises(ValueError, match=r"min_rel must be a number in \[0, 1\)"):
        speed_verdict(t(1, 0), t(1, 0), min_rel=1)
    with pytest.raises(ValueError, match="min_rel"):
        speed_verdict(t(1, 0), t(1, 0), min_rel=-0.1)
    with pytest.raises(TypeError):
        speed_verdict(t(1, 0), t(1, 0), load=False)          # the load average decides nothing now


def test_paired_speed_verdict_uses_the_pairs():
    """A shared drift (each round slower than the last) cancels in the pairs: the pooled repeats
    spread so much that the unpaired verdict refuses, while the per-pair ratios are steady and the
    paired test finds the 5% gain; pairs that disagree stay 'within noise'."""
    drift = [1.0, 1.3, 1.6, 1.9, 2.2, 2.5]
    a = [0.95 * d for d in drift]
    assert speed_verdict(a, drift).word == NO_VERDICT
    v = paired_speed_verdict(a, drift)
    assert v.word == "faster" and v.ratio == pytest.approx(0.95) and "6 pairs" in v.sentence()
    mixed = [d * f for d, f in zip(drift, (0.9, 1.1, 0.95, 1.05, 1.0, 1.02))]
    assert paired_speed_verdict(mixed, drift).word == "within noise"
    stalled = [d * f for d, f in zip(drift, (0.9, 3.0, 0.95, 2.5, 1.0, 1.8))]    # ratios spread > 25%
    refused = paired_speed_verdict(stalled, drift)
    assert refused.word == NO_VERDICT
    assert "the per-pair time ratios of x to y spread by" in refused.sentence("x", "y")
    with pytest.raises(ValueError, match="pair up"):
        paired_speed_verdict([1.0], [1.0])
    with pytest.raises(TypeError):
        paired_speed_verdict(["1"], ["2"])
    with pytest.raises(ValueError, match="p must"):
        paired_speed_verdict(a, drift, p=1.0)


def test_paired_call_grades_by_p_value():
    assert paired_call(paired_test([1, 2, 3], [1, 2, 3])) == "same"
    assert paired_call(paired_test([1.1, 2.1, 3.1], [1.0, 2.0, 3.0])) == "clear"
    assert paired_call(paired_test([1.0, 2.0, 3.0], [1.01, 1.975, 2.995])) == "within"
    assert paired_call(paired_test([1.01, 1.025, 1.005], [1.0, 1.0, 1.0])) == "unclear"
    assert paired_call(paired_test([1.0], [1.0])) == "same"
    assert paired_call(paired_test([1.1], [1.0])) == "within"       # one pair: no test, no evidence
    with pytest.raises(TypeError, match="Paired"):
        paired_call(0.01)


def test_refusal_names_the_timings():
    v = speed_verdict(t(2.0, 0.9), t(1.0, 0.0))
    assert v.refusal("127³", "128³").reason() == "the repeats of 127³ spread by 45% of their median, more than 25%"
    assert speed_verdict(t(2.0, 0.1), t(1.0, 0.0)).refusal() is None


def test_threads_kept_off_their_cores_get_no_verdict_even_with_tight_repeats():
    """Issue #31's case: two threads that wait for a core on every call are many times slower than
    one thread, repeat after repeat, so their spread looks quiet; their CPU share does not."""
    one = Timing.from_times(repeats(0.8e-3, 0.05, seed=8), cpu_share=0.97)
    two = Timing.from_times(repeats(32e-3, 0.05, seed=9), cpu_share=0.25)
    assert two.rel_spread < BUSY_SPREAD and two.cpu_share < MIN_CPU_SHARE
    v = speed_verdict(one, two)
    assert v.word == NO_VERDICT
    s = v.sentence("1 thread", "2 threads")
    assert "the threads timing 2 threads ran on a core only 25% of the time, less than 50%" in s
    assert not any(w in s for w in WORDS)
    # the same repeats with the threads on their cores: a verdict
    quiet_two = Timing.from_times(two.times_s, cpu_share=0.95)
    assert speed_verdict(one, quiet_two).word == "faster"
    assert speed_verdict(one, two, min_cpu_share=0.2).word == "faster"
    # a result row may carry the share; it is checked like the rest
    assert busy({"row": {"median_s": 1.0, "iqr_s": 0.0, "cpu_share": 0.1}}).kind == "cpu share"
    with pytest.raises(ValueError, match="cpu_share"):
        busy({"row": {"median_s": 1.0, "iqr_s": 0.0, "cpu_share": 1.5}})
    with pytest.raises(ValueError, match="min_cpu_share"):
        speed_verdict(one, two, min_cpu_share=2)


def test_a_reading_at_the_limit_is_printed_with_a_decimal():
    assert "only 49.9% of the time, less than 50%" in busy({"x": Timing(1.0, 0.0, [], cpu_share=0.4996)}).reason()
    assert "by 25.1% of their median, more than 25%" in busy({"x": Timing(1.0, 0.251, [])}).reason()
