"""Is A really faster than B? A speed verdict the measurement supports, and a busy-machine caveat.

Two medians always differ. Whether the difference *means* anything depends on how much the
repeats of each scattered: on a shared or throttling machine, two runs of the same code can
differ by 10%. So the course prints "faster" or "slower" only when the difference between the
medians is larger than the measured spread, and "within noise" otherwise::

    >>> from amp_edu.bench.timing import Timing
    >>> a = Timing(1.00e-3, 0.10e-3, [])        # median 1.00 ms, IQR 0.10 ms
    >>> b = Timing(1.04e-3, 0.08e-3, [])
    >>> speed_verdict(b, a).word                # 4% slower, but the boxes overlap
    'within noise'
    >>> speed_verdict(Timing(2.0e-3, 0.1e-3, []), a).word
    'slower'

The rule (:func:`speed_verdict`): with ``d = median(A) - median(B)`` and ``spread = (IQR(A) +
IQR(B)) / 2`` — the half-widths of the two interquartile boxes added, so the verdict is "within
noise" whenever the boxes ``median ± IQR/2`` overlap — a verdict needs ``|d| > spread`` *and*
``|d| > min_rel × median(B)`` (default 2%: below that, timer resolution and clock drift decide).

Load matters as much as spread. A multi-threaded CPU timing taken while other processes hold the
cores is slowed unevenly (the variant that happened to run while a neighbour slept wins), and its
IQR may still look small. :func:`machine_load` reads the 1-minute load average (the number of
runnable threads, averaged) against the cores this process may use, and the threads torch uses;
its :attr:`Load.caveat` is a sentence to print beside every speed verdict when the machine was
busy or torch asks for more threads than there are cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from ..validate import check_int, check_number
from .timing import Timing

__all__ = ["Verdict", "Load", "speed_verdict", "paired_speed_verdict", "machine_load", "as_timing"]

WORDS = ("faster", "slower", "within noise")


def as_timing(t: Any, what: str = "timing") -> Timing:
    """Accept a :class:`~amp_edu.bench.timing.Timing`, anything with ``median_s`` and ``iqr_s``
    attributes, a result row (a dict with those keys), or a list of repeat times in seconds."""
    if isinstance(t, Timing):
        return t
    if isinstance(t, dict) and "median_s" in t and "iqr_s" in t:
        med, iqr = t["median_s"], t["iqr_s"]
    elif hasattr(t, "median_s") and hasattr(t, "iqr_s"):
        med, iqr = t.median_s, t.iqr_s
    elif isinstance(t, (list, tuple)) and t and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      for v in t):
        return Timing.from_times([float(v) for v in t])
    else:
        raise TypeError(f"{what} must be a Timing, an object or dict with median_s and iqr_s, or a "
                        f"non-empty list of repeat times in seconds; got {type(t).__name__}")
    med, iqr = check_number(med, f"{what}.median_s"), check_number(iqr, f"{what}.iqr_s")
    if med <= 0 or iqr < 0:
        raise ValueError(f"{what} needs median_s > 0 and iqr_s >= 0, got median_s={med}, iqr_s={iqr}")
    return Timing(float(med), float(iqr), list(getattr(t, "times_s", []) or []))


@dataclass(frozen=True)
class Load:
    """How busy the machine is: 1-minute load average, usable cores, torch's threads."""

    load_1min: float | None
    cores: int
    threads: int

    @property
    def busy(self) -> bool:
        """More runnable threads than cores, on average over the last minute."""
        return self.load_1min is not None and self.load_1min > self.cores + 0.5

    @property
    def oversubscribed(self) -> bool:
        """torch runs more threads than this process has cores: they time-slice each other."""
        return self.threads > self.cores

    @property
    def caveat(self) -> str | None:
        """A sentence to print beside a speed verdict, or ``None`` on a quiet machine."""
        parts = []
        if self.busy:
            parts.append(f"the machine is busy (load average {self.load_1min:.1f} on {self.cores} "
                         f"core{'s' if self.cores != 1 else ''}: other processes compete for the CPU)")
        if self.oversubscribed:
            parts.append(f"torch uses {self.threads} threads on {self.cores} core"
                         f"{'s' if self.cores != 1 else ''}, so its own threads take turns")
        if not parts:
            return None
        return "caveat: " + " and ".join(parts) + "; speed ratios measured now may not repeat"


def _usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def machine_load(threads: int | None = None) -> Load:
    """Read the load now. ``threads`` defaults to ``torch.get_num_threads()``."""
    if threads is None:
        threads = torch.get_num_threads()
    threads = check_int(threads, "threads", min=1)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on Windows
        load = None
    return Load(load, _usable_cores(), threads)


@dataclass(frozen=True)
class Verdict:
    """What one comparison of two timings supports.

    ``ratio`` is ``median(A) / median(B)`` (below 1: A takes less time); ``rel_diff`` and
    ``rel_spread`` are the difference and the spread as fractions of ``median(B)``.
    """

    word: str
    ratio: float
    rel_diff: float
    rel_spread: float
    caveat: str | None = None
    min_rel: float = 0.02
    paired: str | None = None   # the paired test's text, for a verdict on paired times

    @property
    def significant(self) -> bool:
        return self.word != "within noise"

    def sentence(self, a: str = "A", b: str = "B") -> str:
        """e.g. ``"float16 took 1.02x the time of fp32: within noise (the 2% difference is smaller
        than the 5% spread of the repeats)"``, with the caveat appended when there is one."""
        head = f"{a} took {self.ratio:.2f}x the time of {b}: "
        diff, spread = abs(self.rel_diff), self.rel_spread
        if self.paired is not None:
            body = f"{self.word} ({self.paired})"
        elif self.significant:
            body = (f"{self.word} (the {diff:.0%} difference exceeds the {spread:.0%} spread of the "
                    f"repeats)")
        elif diff <= spread:
            body = (f"within noise (the {diff:.0%} difference is not larger than the {spread:.0%} "
                    f"spread of the repeats)")
        else:
            body = f"within noise (the {diff:.1%} difference is under {self.min_rel:.0%}, too small to call)"
        return head + body + (f"; {self.caveat}" if self.caveat else "")

    def __str__(self) -> str:
        return self.sentence()


def speed_verdict(a: Any, b: Any, *, min_rel: float = 0.02, load: Load | None | bool = True) -> Verdict:
    """Is ``a`` faster or slower than ``b``, beyond the noise both measurements show?

    ``a`` and ``b`` are timings (see :func:`as_timing`). ``load``: ``True`` (default) reads
    :func:`machine_load` now, a :class:`Load` uses that one, ``False``/``None`` adds no caveat.
    """
    ta, tb = as_timing(a, "a"), as_timing(b, "b")
    if not 0 <= check_number(min_rel, "min_rel") < 1:
        raise ValueError(f"min_rel must be a number in [0, 1), got {min_rel!r}")
    if load is True:
        load = machine_load()
    elif load is False:
        load = None
    elif load is not None and not isinstance(load, Load):
        raise TypeError(f"load must be True, False, None or a Load, got {type(load).__name__}")
    d = ta.median_s - tb.median_s
    spread = (ta.iqr_s + tb.iqr_s) / 2
    if abs(d) > spread and abs(d) > min_rel * tb.median_s:
        word = "faster" if d < 0 else "slower"
    else:
        word = "within noise"
    return Verdict(word, ta.median_s / tb.median_s, d / tb.median_s, spread / tb.median_s,
                   load.caveat if load is not None else None, float(min_rel))


def paired_speed_verdict(a_times, b_times, *, min_rel: float = 0.02, p: float = 0.05,
                         load: Load | None | bool = True) -> Verdict:
    """Is A faster or slower than B, from *paired* times: ``a_times[i]`` and ``b_times[i]`` were
    taken side by side (the same round of an interleaved comparison, the same seed of a study).

    Pairing cancels what the two share (a neighbour's load during that round), so the test is on
    the per-pair log ratios (:func:`amp_edu.study.paired_test`, the course's one paired test):
    "faster"/"slower" when the paired t-test's p-value is below ``p`` *and* the median ratio differs
    from 1 by more than ``min_rel``; ``rel_spread`` is the IQR of the per-pair ratios."""
    import math

    from ..study import paired_test

    a = [check_number(v, "a_times[i]") for v in a_times]
    b = [check_number(v, "b_times[i]") for v in b_times]
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"a_times and b_times must pair up, with at least 2 pairs; got {len(a)} and {len(b)}")
    if min(a + b) <= 0:
        raise ValueError("every time must be > 0 seconds")
    if not 0 <= check_number(min_rel, "min_rel") < 1 or not 0 < check_number(p, "p") < 1:
        raise ValueError(f"min_rel must be in [0, 1) and p in (0, 1), got {min_rel!r}, {p!r}")
    if load is True:
        load = machine_load()
    elif load is False:
        load = None
    test = paired_test([math.log(x) for x in a], [math.log(y) for y in b])
    ratios = sorted(x / y for x, y in zip(a, b))
    ratio = Timing.from_times(ratios)
    med = ratio.median_s
    word = ("faster" if med < 1 else "slower") if test.p_t < p and abs(med - 1) > min_rel else "within noise"
    return Verdict(word, med, med - 1, ratio.iqr_s, load.caveat if load is not None else None, float(min_rel),
                   f"median of the per-pair time ratios; log ratios {test.text().replace('seeds', 'pairs')}")
