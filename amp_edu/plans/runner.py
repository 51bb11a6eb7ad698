"""Run a plan on the learner's functions and hand back what they did, by value.

:func:`call` is how a plan calls learner code: it returns an *outcome*, a small dict that records
either the value returned or the exception raised (its type's name, the names of its built-in
bases, its message), so that "the function raised ``NotImplementedError``" and "it raised
``RuntimeError('...')``" travel as data like any answer. The judge turns outcomes back into
answers or failures (:func:`amp_edu.checks.core.returned`).

:func:`run` is what the class grader evaluates in the kernel for a check cell: read the inputs the
judge wrote, run the plan, write the result. Its return value is ignored; only the file counts.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable

from . import byvalue

__all__ = ["call", "run", "learner_info", "each"]


def _builtin_bases(exc: BaseException) -> list[str]:
    """The built-in exception classes ``exc`` is an instance of (``RuntimeError``, ``Exception``...)."""
    return [c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c]


def call(fn: Callable, *args, **kwargs) -> dict:
    """``{"ok": value}`` or ``{"raised": {"type", "bases", "message"}}`` for ``fn(*args, **kwargs)``."""
    try:
        return {"ok": fn(*args, **kwargs)}
    except Exception as exc:  # noqa: BLE001 - any exception is an answer, recorded by value
        try:
            message = str(exc)
        except Exception:  # noqa: BLE001 - an exception whose __str__ raises
            message = "(its message could not be read)"
        return {"raised": {"type": type(exc).__name__, "bases": _builtin_bases(exc), "message": message[:2000]}}


def learner_info(objs) -> list[dict]:
    """What each object handed to a check is: callable or not, and its type's name."""
    return [{"callable": callable(o), "type": type(o).__name__} for o in objs]


def run(plan: Callable[..., Any], inputs: str, outputs: str, *learner) -> None:
    """``plan(cases, *learner)`` on the cases in file ``inputs``; its result goes to file ``outputs``.

    A plan is not started when an object handed to it cannot be called (the judge says so).
    """
    cases = byvalue.load(inputs)
    info = learner_info(learner)
    result = plan(cases, *learner) if all(i["callable"] for i in info) else None
    byvalue.save({"learner": info, "result": result}, outputs)


def each(cases, fn: Callable) -> dict:
    """The plan of most checks: ``fn(*case)`` for every case, in order, until one raises.

    Returns ``{"values": [...], "raised": error or None}``: the returned values (a compact form of
    one :func:`call` outcome per case, for checks with many thousand cases) and, when a call
    raised, its error — the last call made. For checks where raising is never a right answer:
    their judge fails at that case, so the later ones need not run (an unfinished exercise raises
    ``NotImplementedError`` at once, and is told so at once)."""
    values = []
    for case in cases:
        outcome = call(fn, *case)
        if "raised" in outcome:
            return {"values": values, "raised": outcome["raised"]}
        values.append(outcome["ok"])
    return {"values": values, "raised": None}
