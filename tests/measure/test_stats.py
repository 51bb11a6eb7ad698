"""amp_edu.measure.stats: the paired t-test and the sign test, against textbook values."""

import doctest
import math

import pytest

from amp_edu.measure import stats
from amp_edu.measure.stats import paired_test, sign_two_sided, t_two_sided


def test_doctests():
    assert doctest.testmod(stats).failed == 0


def test_paired_test_matches_textbook_values():
    """t and sign-test p-values against values from tables (Student's t, binomial)."""
    d = paired_test([2.0, 4.0, 6.0, 5.0, 3.0, 4.0], [1.0, 1.5, 2.0, 4.5, 3.5, 1.0])
    diffs = [1.0, 2.5, 4.0, 0.5, -0.5, 3.0]
    assert d.mean == pytest.approx(sum(diffs) / 6) and (d.above, d.below, d.ties) == (5, 1, 0)
    assert d.p_sign == pytest.approx(14 / 64)                          # 2·(1 + 6)/2^6
    assert t_two_sided(2.0, 5) == pytest.approx(0.10194, abs=1e-5)
    assert t_two_sided(2.776445, 4) == pytest.approx(0.05, abs=1e-5)
    assert t_two_sided(12.706205, 1) == pytest.approx(0.05, abs=1e-5)
    assert t_two_sided(-2.0, 5) == t_two_sided(2.0, 5) and t_two_sided(math.inf, 3) == 0.0
    same = paired_test([1, 2], [1, 2])
    assert (same.p_t, same.ties) == (1.0, 2)
    shift = paired_test([2, 3], [1, 2])
    assert shift.p_t == 0.0 and math.isinf(shift.t)
    nan_pair = paired_test([1.0, math.nan, 3.0], [0.0, 1.0, 2.0])
    assert nan_pair.n == 2                                             # a diverged seed has no pair
    one = paired_test([1.0], [0.0])
    assert one.n == 1 and math.isnan(one.p_t) and math.isnan(one.sd)
    with pytest.raises(ValueError, match="pair up"):
        paired_test([1, 2], [1])
    with pytest.raises(TypeError, match="numbers"):
        paired_test(["a"], [1])


def test_text_names_the_unit_of_a_pair():
    assert paired_test([1.1, 2.1, 3.2], [1.0, 2.0, 3.0]).text().startswith("paired over 3 seeds:")
    assert "over 3 rounds" in paired_test([1.1, 2.1, 3.2], [1.0, 2.0, 3.0], unit="rounds").text()
    with pytest.raises(TypeError, match="unit"):
        paired_test([1.0], [1.0], unit="")


def test_sign_test_exact():
    assert sign_two_sided(3, 0) == 0.25                                # 3 seeds can never reach 0.05
    assert sign_two_sided(0, 0) == 1.0
    assert sign_two_sided(6, 0) == pytest.approx(2 / 64)
    assert sign_two_sided(2, 2) == 1.0
    with pytest.raises(ValueError, match="wins"):
        sign_two_sided(-1, 2)
    with pytest.raises(TypeError, match="losses"):
        sign_two_sided(1, True)
    with pytest.raises(ValueError, match="df"):
        t_two_sided(1.0, 0)
