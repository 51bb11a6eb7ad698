"""Exercise 02's plan: call the learner's function on each case and report what it returned and
what its arguments hold afterwards.

Both answers of exercise 02 (``underflow_fraction`` and ``lost_updates``) only *read* their
tensors — gradients, weights, updates — so the judge also checks that they were left as they were;
the plan hands them back after the call. Exercise 03's ``choose_scale`` uses the same plan.
"""

from __future__ import annotations

from typing import Callable

from .runner import call

__all__ = ["each_reading"]


def each_reading(cases, fn: Callable) -> dict:
    """``fn(*case)`` for every case, in order: ``{"outcomes": [outcome, ...], "after": [args, ...]}``,
    one :func:`~amp_edu.plans.runner.call` outcome per case and the case's arguments as they are
    after the call (a list per case)."""
    outcomes, after = [], []
    for case in cases:
        outcomes.append(call(fn, *case))
        after.append(list(case))
    return {"outcomes": outcomes, "after": after}
