"""What a measurement supports, in words — and when it supports nothing at all.

Two medians always differ. Whether the difference *means* anything depends on how much the
repeats of each scattered. The course's rules, in the order they are applied:

1. **A busy machine gets no verdict.** Two readings of the timing itself say whether other
   processes held the machine while it ran:

   * its repeats spread by some fraction of their median
     (:attr:`~amp_edu.measure.timing.Timing.rel_spread`: the interquartile range over the median).
     On a quiet machine that is a few percent; when another process takes the cores, some repeats
     stall and the spread jumps. More than :data:`BUSY_SPREAD` (25%): busy.
   * on the CPU, the share of the time its threads ran on a core, of the time they were ready
     to run (:attr:`~amp_edu.measure.timing.Timing.cpu_share`,
     :class:`~amp_edu.measure.timing.CpuShare`; a thread the op leaves asleep does not count, so
     an op that uses one of many threads reads close to 1 on a quiet machine). Other processes
     can also slow *every* repeat alike — a two-thread matmul whose second thread waits for a
     core each time runs many times slower than one thread, repeat after repeat — and then the
     spread looks quiet. Less than :data:`MIN_CPU_SHARE` (half the time on a core): busy. (An
     OpenMP thread that spins while its partner waits counts as running, so two threads taking
     turns on one core read about one half, at the limit; the spread rule catches most of those.)

   Then the sentence says so and draws **no** conclusion — no "faster", no "slower", not even
   "within noise", since a spread that wide would make every difference "noise" and that is a
   conclusion too. The word is then :data:`NO_VERDICT`. Both readings saw the machine as it was
   *while the repeats ran*; a load average read before or after (:mod:`amp_edu.measure.load`) did
   not.
2. **Beyond the spread, or "within noise".** With ``d = median(A) - median(B)`` and ``spread =
   (IQR(A) + IQR(B)) / 2`` — the half-widths of the two interquartile boxes added, so the verdict
   is "within noise" whenever the boxes ``median ± IQR/2`` overlap — "faster"/"slower" needs
   ``|d| > spread`` *and* ``|d| > min_rel × median(B)`` (default 2%: below that, timer
   resolution and clock drift decide)::

    >>> from amp_edu.measure.timing import Timing
    >>> a = Timing(1.00e-3, 0.10e-3, [])        # median 1.00 ms, IQR 0.10 ms: repeats spread 10%
    >>> speed_verdict(Timing(1.04e-3, 0.08e-3, []), a).word      # 4% slower, but the boxes overlap
    'within noise'
    >>> speed_verdict(Timing(2.0e-3, 0.1e-3, []), a).word
    'slower'
    >>> speed_verdict(Timing(2.0e-3, 0.9e-3, []), a).word        # its repeats spread 45%: busy
    'no verdict'

3. **Paired samples** (the same round of an interleaved benchmark, the same seed of a study)
   are judged on their pair-for-pair differences (:func:`amp_edu.measure.stats.paired_test`):
   a shared slow-down cancels inside each pair. :func:`paired_speed_verdict` applies rule 1 to
   the per-pair time ratios and calls "faster"/"slower" when the paired t-test's p-value is below
   0.05; :func:`paired_call` grades a paired difference of any quantity ("clear" below
   :data:`P_CLEAR`, "unclear" below :data:`P_HINT`, else "within").

:func:`busy` applies rule 1 to a whole table of timings taken side by side (one stalled row
means the machine was busy for all of them), and :func:`verdict_table` prints such a table with a
verdict per row only when none of them was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..validate import check_number
from .stats import Paired, paired_test
from .timing import Timing

__all__ = ["WORDS", "NO_VERDICT", "BUSY_SPREAD", "MIN_CPU_SHARE", "P_CLEAR", "P_HINT", "as_timing", "Busy", "busy",
           "Verdict", "speed_verdict", "paired_speed_verdict", "paired_call", "verdict_table"]

WORDS = ("faster", "slower", "within noise")    # the conclusions a comparison of timings may draw
NO_VERDICT = "no verdict"                       # ... and the word when it may draw none
BUSY_SPREAD = 0.25      # repeats spread (IQR / median) beyond this: the machine was busy while timing
MIN_CPU_SHARE = 0.5     # CPU threads on a core less than this share of the time: busy as well
P_CLEAR = 0.05          # paired-t p-value below which a paired difference is called clear
P_HINT = 0.2            # ... and below which it is a hint that more pairs would settle


def as_timing(t: Any, what: str = "timing") -> Timing:
    """Accept a :class:`~amp_edu.measure.timing.Timing`, anything with ``median_s`` and ``iqr_s``
    attributes, a result row (a dict with those keys; ``cpu_share`` too, if it has one), or a list
    of repeat times in seconds."""
    if isinstance(t, Timing):
        return t
    if isinstance(t, dict) and "median_s" in t and "iqr_s" in t:
        med, iqr, share = t["median_s"], t["iqr_s"], t.get("cpu_share")
    elif hasattr(t, "median_s") and hasattr(t, "iqr_s"):
        med, iqr, share = t.median_s, t.iqr_s, getattr(t, "cpu_share", None)
    elif isinstance(t, (list, tuple)) and t and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      for v in t):
        return Timing.from_times([float(v) for v in t])
    else:
        raise TypeError(f"{what} must be a Timing, an object or dict with median_s and iqr_s, or a "
                        f"non-empty list of repeat times in seconds; got {type(t).__name__}")
    med, iqr = check_number(med, f"{what}.median_s"), check_number(iqr, f"{what}.iqr_s")
    if med <= 0 or iqr < 0:
        raise ValueError(f"{what} needs median_s > 0 and iqr_s >= 0, got median_s={med}, iqr_s={iqr}")
    if share is not None:
        share = check_number(share, f"{what}.cpu_share", min=0.0, max=1.0)
    return Timing(float(med), float(iqr), list(getattr(t, "times_s", []) or []), cpu_share=share)


@dataclass(frozen=True)
class Busy:
    """Rule 1 fired. ``kind`` says which reading: ``"spread"`` (``what``, e.g. ``"the repeats of
    fp32"``, spread by ``value`` of their median, more than ``limit``) or ``"cpu share"`` (``what``,
    e.g. ``"the threads timing fp32"``, ran on a core ``value`` of the time, less than ``limit``)."""

    what: str
    value: float
    limit: float = BUSY_SPREAD
    kind: str = "spread"

    def reason(self) -> str:
        """e.g. ``"the repeats of fp32 spread by 41% of their median, more than 25%"``."""
        value = f"{self.value:.0%}"
        if value == f"{self.limit:.0%}":        # never "50%, less than 50%": a decimal, rounded away from the limit
            edge = math.floor if self.kind == "cpu share" else math.ceil
            value = f"{edge(self.value * 1000) / 1000:.1%}"
        if self.kind == "cpu share":
            return f"{self.what} ran on a core only {value} of the time, less than {self.limit:.0%}"
        return f"{self.what} spread by {value} of their median, more than {self.limit:.0%}"

    def sentence(self, note: str = "") -> str:
        """The refusal, e.g. ``"no verdict: the repeats of fp32 spread by 41% of their median, more
        than 25%: too unsteady to compare (a busy machine, most often), so these numbers support no
        comparison (rerun on a quiet machine)"``; ``note`` (e.g. ``" (1 CPU thread)"``) follows the
        cause. Unsteady repeats are what a busy machine makes, but not only it (a stored run taken
        with as many threads as cores, a clock that changed): the sentence says so; a share of a
        core under the limit *is* other processes holding the cores: "the machine was busy"."""
        why = ("the machine was busy while timing" if self.kind == "cpu share"
               else "too unsteady to compare (a busy machine, most often)")
        return (f"{NO_VERDICT}: {self.reason()}: {why}{note}, so these numbers "
                f"support no comparison (rerun on a quiet machine)")

    def named(self, **names) -> "Busy":
        """This one with the placeholders of ``what`` (``{a}``, ``{b}``) filled in."""
        return Busy(self.what.format(**names), self.value, self.limit, self.kind)


def busy(timings: Mapping[str, Any], *, max_spread: float = BUSY_SPREAD,
         min_cpu_share: float = MIN_CPU_SHARE) -> Busy | None:
    """Rule 1 over timings taken side by side (``{name: timing}``, see :func:`as_timing`): ``None``
    when the machine was quiet; else the worst reading — the timing whose threads had the smallest
    share of a core, if under ``min_cpu_share``, or the one whose repeats spread most, if more than
    ``max_spread`` of its median.

    >>> busy({"fp32": [1.0, 1.0, 1.1, 1.0], "bf16": [2.0, 2.1, 2.0, 2.0]}) is None
    True
    >>> busy({"fp32": [1.0, 1.0, 1.1, 1.0], "bf16": [2.0, 4.0, 2.0, 6.0]}).reason()
    'the repeats of bf16 spread by 83% of their median, more than 25%'
    >>> busy({"2 threads": Timing(30e-3, 1e-3, [], cpu_share=0.25)}).reason()
    'the threads timing 2 threads ran on a core only 25% of the time, less than 50%'
    """
    if not isinstance(timings, Mapping) or not timings:
        raise TypeError(f"timings must be a non-empty dict of {{name: timing}}, got {type(timings).__name__}")
    max_spread = check_number(max_spread, "max_spread", positive=True)
    min_cpu_share = check_number(min_cpu_share, "min_cpu_share", min=0.0, max=1.0)
    ts = {name: as_timing(t, str(name)) for name, t in timings.items()}
    shares = {name: t.cpu_share for name, t in ts.items() if t.cpu_share is not None}
    if shares and min(shares.values()) < min_cpu_share:
        name = min(shares, key=shares.get)
        return Busy(f"the threads timing {name}", shares[name], min_cpu_share, "cpu share")
    spreads = {name: t.rel_spread for name, t in ts.items()}
    worst = max(spreads, key=spreads.get)
    return Busy(f"the repeats of {worst}", spreads[worst], max_spread) if spreads[worst] > max_spread else None


@dataclass(frozen=True)
class Verdict:
    """What one comparison of two timings supports.

    ``word`` is one of :data:`WORDS`, or :data:`NO_VERDICT` when the machine was busy; then
    ``busy`` holds what fired rule 1, its ``what`` naming the timings ``{a}`` and ``{b}`` until
    :meth:`sentence` names them. ``ratio`` is ``median(A) / median(B)`` (below 1: A takes less
    time); ``rel_diff`` and ``rel_spread`` are the difference and the spread as fractions of
    ``median(B)``.
    """

    word: str
    ratio: float
    rel_diff: float
    rel_spread: float
    min_rel: float = 0.02
    paired: str | None = None   # the paired test's text, for a verdict on paired times
    busy: Busy | None = None

    @property
    def concluded(self) -> bool:
        """Whether the measurement supports any verdict (``False``: the machine was busy)."""
        return self.word != NO_VERDICT

    @property
    def significant(self) -> bool:
        """"faster" or "slower": a difference beyond the noise."""
        return self.word in ("faster", "slower")

    def refusal(self, a: str = "A", b: str = "B") -> Busy | None:
        """What fired rule 1, with the two timings named ``a`` and ``b``; ``None`` when the
        verdict concluded."""
        return None if self.busy is None else self.busy.named(a=a, b=b)

    def sentence(self, a: str = "A", b: str = "B") -> str:
        """e.g. ``"float16 took 1.02x the time of fp32: within noise (the 2% difference is not
        larger than the 5% spread of the repeats)"``, or the refusal ``"float16 against fp32: no
        verdict: the repeats of fp32 spread by ..."`` (without the ratio: it would read as a
        conclusion)."""
        if not self.concluded:
            return f"{a} against {b}: {self.refusal(a, b).sentence()}"
        head = f"{a} took {self.ratio:.2f}x the time of {b}: "
        diff, spread = abs(self.rel_diff), self.rel_spread
        if self.paired is not None:
            return head + f"{self.word} ({self.paired})"
        if self.significant:
            return head + f"{self.word} (the {diff:.0%} difference exceeds the {spread:.0%} spread of the repeats)"
        if diff <= spread:
            return head + (f"within noise (the {diff:.0%} difference is not larger than the {spread:.0%} "
                           f"spread of the repeats)")
        return head + f"within noise (the {diff:.1%} difference is under {self.min_rel:.0%}, too small to call)"

    def __str__(self) -> str:
        return self.sentence()


def _check_min_rel(min_rel) -> float:
    if not 0 <= check_number(min_rel, "min_rel") < 1:
        raise ValueError(f"min_rel must be a number in [0, 1), got {min_rel!r}")
    return float(min_rel)


def speed_verdict(a: Any, b: Any, *, min_rel: float = 0.02, max_spread: float = BUSY_SPREAD,
                  min_cpu_share: float = MIN_CPU_SHARE) -> Verdict:
    """Is ``a`` faster or slower than ``b``, beyond the noise both measurements show — and may the
    measurement say anything at all? (Rules 1 and 2 of the module docstring.)

    ``a`` and ``b`` are timings (see :func:`as_timing`); ``max_spread`` and ``min_cpu_share`` are
    rule 1's limits.
    """
    ta, tb = as_timing(a, "a"), as_timing(b, "b")
    min_rel = _check_min_rel(min_rel)
    d = ta.median_s - tb.median_s
    spread = (ta.iqr_s + tb.iqr_s) / 2
    stalled = busy({"{a}": ta, "{b}": tb}, max_spread=max_spread, min_cpu_share=min_cpu_share)
    if stalled is not None:
        word = NO_VERDICT
    elif abs(d) > spread and abs(d) > min_rel * tb.median_s:
        word = "faster" if d < 0 else "slower"
    else:
        word = "within noise"
    return Verdict(word, ta.median_s / tb.median_s, d / tb.median_s, spread / tb.median_s, min_rel,
                   busy=stalled)


def paired_speed_verdict(a_times, b_times, *, min_rel: float = 0.02, p: float = 0.05,
                         max_spread: float = BUSY_SPREAD) -> Verdict:
    """Is A faster or slower than B, from *paired* times: ``a_times[i]`` and ``b_times[i]`` were
    taken side by side (the same round of an interleaved comparison, the same seed of a study).

    Pairing cancels what the two share (a neighbour's load during that round), so the rules apply
    to the per-pair time ratios: no verdict when they spread by more than ``max_spread`` of their
    median; else "faster"/"slower" when the paired t-test on the log ratios
    (:func:`amp_edu.measure.stats.paired_test`) has a p-value below ``p`` *and* the median ratio
    differs from 1 by more than ``min_rel``; ``rel_spread`` is the IQR of the per-pair ratios."""
    a = [check_number(v, "a_times[i]") for v in a_times]
    b = [check_number(v, "b_times[i]") for v in b_times]
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"a_times and b_times must pair up, with at least 2 pairs; got {len(a)} and {len(b)}")
    if min(a + b) <= 0:
        raise ValueError("every time must be > 0 seconds")
    min_rel = _check_min_rel(min_rel)
    if not 0 < check_number(p, "p") < 1:
        raise ValueError(f"p must be a number in (0, 1), got {p!r}")
    test = paired_test([math.log(x) for x in a], [math.log(y) for y in b], unit="pairs")
    ratio = Timing.from_times([x / y for x, y in zip(a, b)])
    med = ratio.median_s
    stalled = busy({"ratios": ratio}, max_spread=max_spread)
    if stalled is not None:
        stalled = Busy("the per-pair time ratios of {a} to {b}", stalled.value, stalled.limit)
        word = NO_VERDICT
    elif test.p_t < p and abs(med - 1) > min_rel:
        word = "faster" if med < 1 else "slower"
    else:
        word = "within noise"
    return Verdict(word, med, med - 1, ratio.iqr_s, min_rel,
                   f"median of the per-pair time ratios; log ratios {test.text()}", stalled)


def paired_call(p: Paired) -> str:
    """Grade a paired difference (:func:`amp_edu.measure.stats.paired_test`): ``"same"`` when every
    pair is equal; else by the paired t-test's p-value, ``"clear"`` below :data:`P_CLEAR`,
    ``"unclear"`` below :data:`P_HINT` (more pairs would decide), ``"within"`` otherwise (no
    evidence of a difference).

    >>> paired_call(paired_test([1.1, 2.1, 3.1], [1.0, 2.0, 3.0]))
    'clear'
    """
    if not isinstance(p, Paired):
        raise TypeError(f"p must be an amp_edu.measure.stats.Paired (what paired_test returns), got {type(p).__name__}")
    if p.n and p.ties == p.n:
        return "same"
    if not math.isnan(p.p_t) and p.p_t < P_CLEAR:
        return "clear"
    if not math.isnan(p.p_t) and p.p_t < P_HINT:
        return "unclear"
    return "within"


def verdict_table(times: Mapping[str, Any], baseline: str, *, note: str = "", unit: str = "ms",
                  max_spread: float = BUSY_SPREAD, min_cpu_share: float = MIN_CPU_SHARE) -> list[str]:
    """Lines of a table of timings taken side by side (``{name: timing}``): each median with the
    spread of its repeats, and — only when rule 1 finds the machine quiet for every row (see
    :func:`busy`) — its verdict against ``baseline``; the last line says which. ``note`` (e.g. ``" (1 CPU thread)"``)
    describes how they were timed; ``unit`` is ``"ms"`` or ``"µs"``.

    >>> quiet = {"fp32": [1.00e-3, 1.01e-3, 1.02e-3, 1.00e-3], "bf16": [2.0e-3, 2.1e-3, 2.0e-3, 2.0e-3]}
    >>> print("\\n".join(verdict_table(quiet, "fp32")))
      fp32     1.01 ms  (repeats spread  1%)  the baseline
      bf16        2 ms  (repeats spread  1%)  1.99× slower (beyond the repeats' spread, 0.019 ms)
      every row's repeats spread by at most 1% of their median: a row is called faster or slower than fp32 only beyond the spread
    """
    if not isinstance(times, Mapping) or not times:
        raise TypeError(f"times must be a non-empty dict of {{name: timing}}, got {type(times).__name__}")
    if baseline not in times:
        raise ValueError(f"the baseline {baseline!r} was not timed; timed: {', '.join(map(str, times))}")
    scale = {"ms": 1e3, "µs": 1e6}.get(unit)
    if scale is None:
        raise ValueError(f"unit must be 'ms' or 'µs', got {unit!r}")
    ts = {name: as_timing(t, str(name)) for name, t in times.items()}
    stalled = busy(ts, max_spread=max_spread, min_cpu_share=min_cpu_share)
    width = max(len(str(n)) for n in ts)
    lines = []
    for name, t in ts.items():
        how = ""
        if name == baseline:
            how = "the baseline"
        elif stalled is None:
            v = speed_verdict(t, ts[baseline], max_spread=max_spread, min_cpu_share=min_cpu_share)
            spread = f"{v.rel_spread * ts[baseline].median_s * scale:.2g} {unit}"   # in time, not a % of a median
            how = (f"{max(v.ratio, 1 / v.ratio):.2f}× {v.word} (beyond the repeats' spread, {spread})"
                   if v.significant else
                   f"{v.ratio:.2f}× its time: within noise (the repeats' spread, {spread})")
        lines.append(f"  {name:<{width}} {t.median_s * scale:8.3g} {unit}  (repeats spread {t.rel_spread:3.0%})  {how}".rstrip())
    if stalled is not None:
        lines.append("  " + stalled.sentence(note))
    else:
        worst = max(t.rel_spread for t in ts.values())
        lines.append(f"  every row's repeats spread by at most {worst:.0%} of their median: a row is called faster "
                     f"or slower than {baseline} only beyond the spread{note}")
    return lines
