"""What the checks' tests share: the class grader's path in one process, and values that lie.

:func:`verdict` does what the class grader does with one seed — the plan on by-value cases, the
verdict on the by-value result — without a kernel; :func:`assert_drawn_and_passing` is the test
every check gets (two seeds draw different cases, one seed always the same, the reference passes
for several). :class:`AlwaysEqual` and :class:`LyingTensor` are the answers a learner could make
that claim to equal anything.
"""

from __future__ import annotations

import torch

from amp_edu.plans import byvalue

SEEDS = (0, 1, 2, 12345)


def verdict(check, seed: int, *fns) -> str:
    """The pass line (or :class:`~amp_edu.checks.core.CheckFailed`) for the learner's ``fns`` under
    ``seed``: the plan on a by-value copy of the cases, the judge on another copy and the by-value
    result, as the class grader reaches it."""
    cases = check.cases(seed)
    sent = {"learner": [{"callable": True, "type": "function"} for _ in fns],
            "result": check.plan(byvalue.roundtrip(cases), *fns)}
    return check.verdict(byvalue.roundtrip(cases), byvalue.roundtrip(sent))


def assert_drawn_and_passing(check, fn) -> None:
    assert byvalue.dumps(check.cases(1)) != byvalue.dumps(check.cases(2))
    assert byvalue.dumps(check.cases(5)) == byvalue.dumps(check.cases(5))
    for seed in SEEDS:
        assert verdict(check, seed, fn).startswith(f"PASS {check.name}: ")


class AlwaysEqual(float):
    """A float that says it equals anything."""

    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class LyingTensor(torch.Tensor):
    """A tensor subclass that says it equals anything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.allclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
