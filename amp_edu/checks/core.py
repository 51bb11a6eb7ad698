"""Grading primitives shared by every lesson's checks.

A check is a :class:`Check` named ``check_<name>`` in ``amp_edu.checks.lNN``, written in three
parts (:mod:`amp_edu.plans` explains why):

* ``cases(seed)``: the inputs, plain values and tensors, drawn from ``seed`` where a drawn input
  helps (the class grader draws a fresh seed every run; a learner's notebook uses
  :data:`SELF_CHECK_SEED`);
* ``plan``: a function of ``amp_edu.plans.lNN`` that calls the learner's functions on the cases and
  returns what they did (outcomes of :func:`amp_edu.plans.runner.call`), by value;
* ``judge(cases, result)``: the reference and the comparison. It returns the detail of the pass
  line, or raises :class:`CheckFailed` (an ``AssertionError``) whose message reads::

    FAIL decode_fp16
      input:    '0 00000 0000000001'
      expected: 5.960464477539063e-08
      got:      0.0
      hint:     subnormals have no implicit leading 1 ...

Calling the check, ``check_decode(decode)`` in a notebook, runs all three here, passing the plan's
inputs and result through :func:`amp_edu.plans.byvalue.roundtrip`, and prints ``PASS decode: ...``;
the class grader runs the plan in the learner's kernel and the rest in its judge
(:mod:`amp_edu.course.judge`), with the same text. The judge reads the learner's answers with
:func:`returned`, so an unfinished exercise (the ``raise NotImplementedError()`` that ``make
exercises`` leaves under ``# YOUR CODE HERE``) always reads "not done yet", and a crash always names
the exception, the input and what was expected.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..plans import byvalue, runner
from .rules import Rule, violations

__all__ = ["Check", "CheckFailed", "fail", "same", "bits", "same_bits", "returned", "learner_result", "judge_each",
           "NOT_DONE_HINT", "SELF_CHECK_SEED"]

SELF_CHECK_SEED = 0      # the seed of a check run in a learner's notebook (the grader draws its own)

NOT_DONE_HINT = ("this exercise is not done yet: replace `raise NotImplementedError()` under "
                 "`# YOUR CODE HERE` with your code")


class CheckFailed(AssertionError):
    """A wrong answer. The message names the input, expected and actual value, and a hint."""


def _fmt(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        if v.numel() <= 8:
            return f"tensor({v.tolist()}, dtype={v.dtype})"
        return f"tensor of shape {tuple(v.shape)}, dtype={v.dtype}"
    if isinstance(v, float):
        return repr(v)
    s = repr(v)
    return s if len(s) <= 300 else s[:297] + "..."


def fail(name: str, *, input: Any = None, expected: Any = None, got: Any = None, hint: str = "") -> CheckFailed:
    """Build the failure for check ``name``; ``raise fail(...)``."""
    lines = [f"FAIL {name}"]
    if input is not None:
        lines.append(f"  input:    {_fmt(input)}")
    lines.append(f"  expected: {_fmt(expected)}")
    lines.append(f"  got:      {_fmt(got)}")
    if hint:
        lines.append(f"  hint:     {hint}")
    return CheckFailed("\n".join(lines))


def same(a: Any, b: Any, *, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Equality that treats NaN == NaN (and -0.0 == 0.0: :func:`same_bits` tells them apart), and
    compares tensors (dtype and shape too), floats, and nested lists/tuples/dicts."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if rtol == 0 and atol == 0:
            return bool(torch.equal(a, b) or (torch.isnan(a) & torch.isnan(b) | (a == b)).all()) \
                if a.is_floating_point() else bool(torch.equal(a, b))
        return bool(torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol, equal_nan=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        if rtol == 0 and atol == 0:
            return fa == fb
        return math.isclose(fa, fb, rel_tol=rtol, abs_tol=atol)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y, rtol=rtol, atol=atol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rtol=rtol, atol=atol) for k in a)
    return a == b


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a 16/32/64-bit float tensor, as integers of the same width, with every
    NaN made the same NaN: equal bits mean equal to the last bit, and -0.0 is not 0.0."""
    t = torch.where(t.isnan(), torch.full_like(t, math.nan), t)
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same_bits(a: Any, b: torch.Tensor) -> bool:
    """``a`` is a tensor of ``b``'s dtype and shape with the same :func:`bits` (what torch's own
    kernels produce, bit for bit: a result that differs only in the last bit or the sign of a zero
    fails)."""
    return (isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(bits(a), bits(b)))


def _raised_text(err: dict) -> str:
    return f"{err['type']}: {err['message']}" if err["message"] else err["type"]


def returned(
    name: str,
    outcome: Any,
    *,
    input: Any = None,
    expected: Any = "an answer",
    hint: str | Callable[[dict], str] = "your function raised on this input",
    returns: tuple[str, ...] = (),
) -> Any:
    """The learner's answer in ``outcome`` (from :func:`amp_edu.plans.runner.call`); a crash is a failure.

    * ``NotImplementedError`` (the unfinished exercise) fails with :data:`NOT_DONE_HINT`;
    * an exception whose type or built-in base is named in ``returns`` is *returned*, as the dict
      ``{"type", "bases", "message"}`` — for exercises whose right answer on some input is an error
      (``NotImplementedError`` is never returned, even though it is a ``RuntimeError``);
    * any other exception fails naming it, with ``hint`` (a string, or ``hint(error) -> str``).

    ``input`` and ``expected`` are what the failure message shows.

    >>> returned("double", {"ok": 42})
    42
    """
    if type(outcome) is not dict or len(outcome) != 1 or not ({"ok", "raised"} & outcome.keys()):
        raise fail(name, input=input, expected=expected, got=outcome,
                   hint="the grader could not read what your function did (was the check cell changed?)")
    if "ok" in outcome:
        return outcome["ok"]
    err = outcome["raised"]
    if type(err) is not dict or not all(type(err.get(k)) is t for k, t in
                                        (("type", str), ("bases", list), ("message", str))):
        raise fail(name, input=input, expected=expected, got=err, hint="an unreadable error")
    if err["type"] == "NotImplementedError":
        raise fail(name, input=input, expected=expected, got="NotImplementedError", hint=NOT_DONE_HINT)
    if err["type"] in returns or any(b in returns for b in err["bases"]):
        return err
    h = hint(err) if callable(hint) else hint
    raise fail(name, input=input, expected=expected, got=_raised_text(err), hint=h)


def learner_result(name: str, sent: Any) -> Any:
    """The plan's result from what :func:`amp_edu.plans.runner.run` sent; fails when an object
    handed to the check was not a function."""
    if type(sent) is not dict or type(sent.get("learner")) is not list:
        raise fail(name, expected="what the check's plan returns", got=sent,
                   hint="the grader could not read the answer (was the check cell changed?)")
    for info in sent["learner"]:
        if type(info) is not dict or info.get("callable") is not True:
            got = info.get("type") if type(info) is dict else info
            raise fail(name, expected="a function", got=got,
                       hint="pass the function itself, e.g. check(my_fn), not my_fn(...)")
    return sent.get("result")


def _sources(learner) -> list[tuple[str, str]]:
    """``(name, source)`` of the learner's functions, where Python can find their source."""
    import inspect
    import textwrap

    out = []
    for fn in learner:
        try:
            out.append((getattr(fn, "__name__", "your function"), textwrap.dedent(inspect.getsource(fn))))
        except (OSError, TypeError):
            pass
    return out


@functools.lru_cache(maxsize=8)
def _self_check_cases(check: "Check") -> bytes:
    """A check's cases for :data:`SELF_CHECK_SEED` as by-value bytes, made once per process: the plan
    and the judge each get a fresh copy every time, so nothing either changes is kept."""
    return byvalue.dumps(check.cases(SELF_CHECK_SEED))


@dataclass(frozen=True)
class Check:
    """One check: its ``name`` (the pass line's), ``cases(seed)``, the kernel's ``plan(cases,
    *learner)`` and the judge's ``judge(cases, result) -> detail``. ``echo``: calling the check
    returns the pass line (as some lessons' cells show it) instead of ``None``. ``rules``: what the
    exercise forbids (:class:`~amp_edu.checks.rules.Rule`); the class grader scans every code cell
    for them, a notebook's own check the source of the functions it is given."""

    name: str
    cases: Callable[[int], Any]
    plan: Callable[..., Any]
    judge: Callable[[Any, Any], str]
    echo: bool = False
    rules: tuple[Rule, ...] = ()

    def __post_init__(self):
        for part in ("cases", "plan", "judge"):
            if not callable(getattr(self, part)):
                raise TypeError(f"Check {self.name!r}: {part} must be callable")

    def obey_rules(self, sources: list[tuple[str, str]]) -> None:
        """Fail naming the first use of something :attr:`rules` forbid in ``sources``."""
        found = violations(sources, self.rules)
        if found:
            raise fail(self.name, expected="an answer that follows the exercise's rules",
                       got=found[0], hint="write it yourself: the check compares with that function")

    def verdict(self, cases: Any, sent: Any) -> str:
        """The pass line for what the plan sent (by value); :class:`CheckFailed` otherwise."""
        detail = self.judge(cases, learner_result(self.name, sent))
        return f"PASS {self.name}" + (f": {detail}" if detail else "")

    def __call__(self, *learner) -> str | None:
        """Run the whole check here, on the learner's functions (a ``# CHECK:`` cell)."""
        self.obey_rules(_sources(learner))
        sent = _self_check_cases(self)
        info = runner.learner_info(learner)
        result = self.plan(byvalue.loads(sent), *learner) if all(i["callable"] for i in info) else None
        line = self.verdict(byvalue.loads(sent), byvalue.roundtrip({"learner": info, "result": result}))
        print(line)
        return line if self.echo else None


def judge_each(
    name: str,
    cases: list[tuple],
    outcomes: Any,
    reference: Callable,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    hint: str | Callable[[tuple, Any, Any], str] = "",
    compare: Callable[[Any, Any], bool] | None = None,
) -> str:
    """Judge the plan :func:`amp_edu.plans.runner.each`: ``reference(*case)`` against the learner's
    answer for each case, failing on the first mismatch; returns the pass line's detail.

    ``hint`` is a string or ``hint(case, expected, got) -> str`` that explains the likely mistake.
    """
    values, raised = (outcomes.get("values"), outcomes.get("raised")) if type(outcomes) is dict else (None, None)
    if type(values) is not list or len(values) > len(cases) or (raised is None) != (len(values) == len(cases)):
        raise fail(name, expected=f"{len(cases)} answers", got=outcomes,
                   hint="the grader could not read your function's answers")
    for i, case in enumerate(cases):
        shown = case[0] if len(case) == 1 else case
        expected = reference(*case)
        got = returned(name, {"ok": values[i]} if i < len(values) else {"raised": raised},
                       input=shown, expected=expected)
        ok = compare(got, expected) if compare else same(got, expected, rtol=rtol, atol=atol)
        if not ok:
            h = hint(case, expected, got) if callable(hint) else hint
            raise fail(name, input=shown, expected=expected, got=got, hint=h)
    return f"{len(cases)} cases"
