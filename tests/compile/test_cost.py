"""amp_edu.compile.cost: when a compile pays for itself, decided by the measurement layer's rule."""

import pytest

from amp_edu.compile.cost import break_even
from amp_edu.measure.timing import Timing


def _t(median, iqr, cpu_share=None):
    return Timing(median, iqr, [median], cpu_share=cpu_share)


def test_break_even_is_noise_aware():
    be = break_even(10.0, _t(2e-3, 1e-4), _t(1e-3, 1e-4))
    assert be.steps == pytest.approx(10_000) and "10,000 steps" in be.sentence()
    assert be.verdict.word == "faster" and "2 ms" in be.sentence() and "faster" in be.sentence()
    within = break_even(10.0, _t(1.05e-3, 1e-4), _t(1e-3, 1e-4))
    assert within.steps is None and "within noise" in within.sentence() and "no break-even" in within.sentence()
    slower = break_even(10.0, _t(1e-3, 1e-5), _t(2e-3, 1e-5))
    assert slower.steps is None and "never pays" in slower.sentence()
    with pytest.raises(ValueError):
        break_even(-1.0, _t(1, 0), _t(1, 0))
    with pytest.raises(TypeError, match="Timing"):
        break_even(1.0, 0.5, _t(1, 0))


def test_break_even_takes_its_noise_rule_from_measure_verdict():
    """One rule decides whether a saving is real: measure.verdict's. The same medians (compiled
    twice as fast) give a step count only when the verdict concludes."""
    from amp_edu.measure.verdict import NO_VERDICT, WORDS, speed_verdict

    tight = break_even(10.0, _t(2e-3, 0.1e-3, cpu_share=0.98), _t(1e-3, 0.05e-3, cpu_share=0.97))
    assert tight.verdict.concluded and tight.steps == pytest.approx(10_000)
    noisy = break_even(10.0, _t(2e-3, 0.8e-3), _t(1e-3, 0.05e-3))   # eager's repeats spread 40%: busy
    starved = break_even(10.0, _t(2e-3, 0.1e-3, cpu_share=0.98), _t(1e-3, 0.05e-3, cpu_share=0.3))
    for be in (noisy, starved):
        assert be.steps is None and be.verdict.word == NO_VERDICT
        s = be.sentence()
        assert s.startswith("compile 10.0 s; a compiled step against an eager step: no verdict: ")
        assert "busy" in s and "steps" not in s and not any(w in s for w in WORDS)
        assert "ms" not in s                                  # no per-step times: they would read as a comparison
    assert starved.verdict.refusal().kind == "cpu share"
    # the verdict is speed_verdict's, compiled against eager, to the word
    for eager, compiled in ((_t(2e-3, 1e-4), _t(1e-3, 1e-4)), (_t(1.05e-3, 1e-4), _t(1e-3, 1e-4)),
                            (_t(2e-3, 0.8e-3), _t(1e-3, 0.05e-3))):
        assert break_even(1.0, eager, compiled).verdict == speed_verdict(compiled, eager)
    # a saving inside the spread of the repeats is within noise
    assert break_even(10.0, _t(1.05e-3, 0.2e-3), _t(1.0e-3, 0.1e-3)).steps is None
    # ... and one under 2% of the eager step is too small to call, however tight the repeats
    assert break_even(10.0, _t(1.01e-3, 0.0), _t(1.0e-3, 0.0)).steps is None
