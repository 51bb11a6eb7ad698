"""Grading primitives shared by every lesson's checks.

A check is a function ``check_<name>(learner_fn_or_value)`` in ``amp_edu.checks.lNN``. It builds
its cases, compares against a reference, and either prints ``PASS <name>: ...`` or raises
:class:`CheckFailed` (an ``AssertionError``) whose message reads::

    FAIL decode_fp16
      input:    '0 00000 0000000001'
      expected: 5.960464477539063e-08
      got:      0.0
      hint:     subnormals have no implicit leading 1 ...

Use :func:`check_cases` for the common "call the learner's function on each case" shape, and
:func:`fail` / :func:`passed` to write anything else. Every grader calls the learner's code through
:func:`call_learner`, so an unfinished exercise (the ``raise NotImplementedError()`` that
``make exercises`` leaves under ``# YOUR CODE HERE``) always reads "not done yet", and a crash
always names the exception, the input and what was expected.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import torch

__all__ = ["CheckFailed", "fail", "passed", "same", "bits", "same_bits", "check_cases", "require_callable",
           "call_learner", "NOT_DONE_HINT"]

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


def passed(name: str, detail: str = "") -> str:
    """Print and return the one pass line."""
    line = f"PASS {name}" + (f": {detail}" if detail else "")
    print(line)
    return line


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


def require_callable(name: str, fn: Any) -> None:
    if not callable(fn):
        raise fail(name, expected="a function", got=type(fn).__name__,
                   hint="pass the function itself, e.g. check(my_fn), not my_fn(...)")


def call_learner(
    name: str,
    fn: Callable,
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    input: Any = None,
    expected: Any = "an answer",
    hint: str | Callable[[BaseException], str] = "your function raised on this input",
    returns: tuple[type[BaseException], ...] = (),
) -> Any:
    """Call the learner's ``fn(*args, **kwargs)`` and return its result; turn a crash into a failure.

    * ``NotImplementedError`` (the unfinished exercise) fails with :data:`NOT_DONE_HINT`;
    * an exception type listed in ``returns`` is *returned*, not raised — for exercises whose right
      answer on some input is an error (``NotImplementedError`` is never returned, even though it
      is a ``RuntimeError``);
    * any other exception fails naming it, with ``hint`` (a string, or ``hint(exc) -> str``).

    ``input`` and ``expected`` are what the failure message shows.

    >>> call_learner("double", lambda x: 2 * x, (21,))
    42
    """
    try:
        return fn(*args, **(kwargs or {}))
    except NotImplementedError:
        raise fail(name, input=input, expected=expected, got="NotImplementedError",
                   hint=NOT_DONE_HINT) from None
    except returns as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - any crash is a wrong answer, reported in full
        h = hint(exc) if callable(hint) else hint
        raise fail(name, input=input, expected=expected, got=f"{type(exc).__name__}: {exc}",
                   hint=h) from exc


def check_cases(
    name: str,
    fn: Callable,
    cases: Iterable[tuple],
    reference: Callable,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    hint: str | Callable[[tuple, Any, Any], str] = "",
    compare: Callable[[Any, Any], bool] | None = None,
) -> str:
    """Call ``fn(*case)`` and ``reference(*case)`` for each case; fail on the first mismatch.

    ``hint`` is a string or ``hint(case, expected, got) -> str`` that explains the likely mistake.
    A learner's ``NotImplementedError`` becomes a failure that says the exercise is not done yet.
    """
    require_callable(name, fn)
    n = 0
    for case in cases:
        case = case if isinstance(case, tuple) else (case,)
        shown = case[0] if len(case) == 1 else case
        expected = reference(*case)
        got = call_learner(name, fn, case, input=shown, expected=expected)
        ok = compare(got, expected) if compare else same(got, expected, rtol=rtol, atol=atol)
        if not ok:
            h = hint(case, expected, got) if callable(hint) else hint
            raise fail(name, input=shown, expected=expected, got=got, hint=h)
        n += 1
    return passed(name, f"{n} cases")
