"""Paired statistics: is the difference between two paired samples more than chance?

Two samples are *paired* when ``a[i]`` and ``b[i]`` share everything but the thing compared: the
same seed of a convergence study (the same initial weights, the same batches), the same round of
an interleaved benchmark (the same neighbour's load). Whatever the pair shares cancels in the
difference ``a[i] − b[i]``, so the test is on the differences (:func:`paired_test`):

* the **paired t-test**: is the mean difference zero? ``t = mean / (sd / √n)`` with ``n − 1``
  degrees of freedom, and its two-sided p-value from Student's t distribution;
* the **sign test**: do the differences lean one way more often than a fair coin would? Exact,
  two-sided, ties left out. It assumes nothing about the size of the differences, and with few
  pairs it cannot say much: with 3 pairs its p-value is never below 0.25.

Student's t distribution needs the regularised incomplete beta function, computed here with the
continued fraction of *Numerical Recipes* (Lentz's method), so the course needs no SciPy::

    >>> p = paired_test([2.0, 4.0, 6.0, 5.0, 3.0, 4.0], [1.0, 1.5, 2.0, 4.5, 3.5, 1.0])
    >>> p.n, p.above, p.below
    (6, 5, 1)
    >>> round(p.p_t, 3), round(p.p_sign, 3)      # t-test: almost 5%; sign test: 5 of 6 is common
    (0.053, 0.219)

Which p-value counts as evidence is a verdict's business (:mod:`amp_edu.measure.verdict`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..validate import check_int

__all__ = ["Paired", "paired_test", "t_two_sided", "sign_two_sided"]


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom (``df`` >= 1).

    >>> round(t_two_sided(12.706205, 1), 4)      # the textbook 5% point of t with 1 df
    0.05
    """
    df = check_int(df, "df", min=1)
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def sign_two_sided(wins: int, losses: int) -> float:
    """Exact two-sided sign test: P(a split at least this uneven) for a fair coin, ties left out.

    >>> sign_two_sided(3, 0)                    # 3 of 3 one way: the smallest p 3 pairs can give
    0.25
    """
    wins, losses = check_int(wins, "wins", min=0), check_int(losses, "losses", min=0)
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    return min(1.0, 2.0 * sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n)


@dataclass(frozen=True)
class Paired:
    """Pair-for-pair differences ``a_i − b_i`` (only pairs where both are finite).

    ``mean``/``sd``: of the differences; ``t``, ``p_t``: the paired t statistic and its two-sided
    p-value (``n − 1`` degrees of freedom; nan below 2 pairs); ``above``/``below``/``ties``: how
    many differences are positive, negative, zero; ``p_sign``: the exact two-sided sign test;
    ``unit``: what one pair is, for :meth:`text` ("seeds", "rounds", "pairs")."""

    n: int
    mean: float
    sd: float
    t: float
    p_t: float
    above: int
    below: int
    ties: int
    p_sign: float
    unit: str = "seeds"

    def text(self) -> str:
        """e.g. ``"paired over 3 seeds: mean difference +0.012 (sd 0.003), t = 6.9, p = 0.02;
        3 above, 0 below (sign test p = 0.25)"``."""
        return (f"paired over {self.n} {self.unit}: mean difference {self.mean:+.3g} (sd {self.sd:.2g}), "
                f"t = {self.t:.2g}, p = {self.p_t:.2g}; {self.above} above, {self.below} below"
                f"{f', {self.ties} tied' if self.ties else ''} (sign test p = {self.p_sign:.2g})")


def paired_test(a, b, *, unit: str = "seeds") -> Paired:
    """Compare two paired samples: ``a[i]`` and ``b[i]`` share seed ``i`` (or round ``i``).

    Pairs where either value is not finite (a diverged run) are left out. ``unit`` names what a
    pair is in :meth:`Paired.text`.

    >>> paired_test([1.1, 2.1, 3.2], [1.0, 2.0, 3.0]).above
    3
    """
    try:
        a, b = [float(v) for v in a], [float(v) for v in b]
    except (TypeError, ValueError):
        raise TypeError("a and b must be sequences of numbers (one per seed, in the same order)") from None
    if len(a) != len(b):
        raise ValueError(f"a and b must pair up one to one, got {len(a)} and {len(b)} values")
    if not isinstance(unit, str) or not unit:
        raise TypeError(f"unit must be a non-empty str (e.g. 'seeds', 'rounds'), got {unit!r}")
    diffs = [x - y for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
    n = len(diffs)
    above, below = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    mean = statistics.fmean(diffs) if diffs else math.nan
    sd = statistics.stdev(diffs) if n > 1 else math.nan
    if n < 2:
        t = p = math.nan
    elif sd == 0:
        t, p = (0.0, 1.0) if mean == 0 else (math.copysign(math.inf, mean), 0.0)
    else:
        t = mean / (sd / math.sqrt(n))
        p = t_two_sided(t, n - 1)
    return Paired(n, mean, sd, t, p, above, below, n - above - below, sign_two_sided(above, below), unit)
