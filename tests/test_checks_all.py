"""One test over every exercise check of the course (each ``check_*`` in ``amp_edu.checks.lNN`` of
every lesson with an exercise, read from the lesson list):

* an unfinished answer (``raise NotImplementedError()``, what ``make exercises`` leaves) fails
  with the course's "not done yet" hint, never a traceback or a pass;
* something that is not a function (a learner who assigned a value) fails saying a function is wanted;
* every check is called by a check cell of its lesson's solution (so nbval, which runs the
  solutions in the course tier, proves the reference answer passes each one).

What each grader does with *wrong* answers is tested lesson by lesson (``test_checks_lNN.py``).
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from amp_edu.checks.core import NOT_DONE_HINT, CheckFailed
from amp_edu.course import grade, notebook
from amp_edu.course.exercises import ROOT
from amp_edu.course.lessons import LESSONS


def _checks():
    for lesson in LESSONS:
        if lesson.exercise:
            module = importlib.import_module(lesson.checks_module)
            for name, fn in inspect.getmembers(module, inspect.isfunction):
                if name.startswith("check_") and fn.__module__ == module.__name__:
                    # lesson 13's graders compile models with Inductor: seconds each, so course tier
                    marks = [pytest.mark.slow] if lesson.slug == "compile_and_mixed_precision" else []
                    yield pytest.param(lesson, fn, id=f"{lesson.number:02d}-{name}", marks=marks)


def _learner_args(check) -> list:
    """The check's parameters without defaults: the learner's functions it grades."""
    return [p for p in inspect.signature(check).parameters.values()
            if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _unfinished(*args, **kwargs):
    raise NotImplementedError()


@pytest.mark.parametrize("lesson, check", list(_checks()))
def test_an_unfinished_answer_fails_with_the_not_done_hint(lesson, check):
    with pytest.raises(CheckFailed) as e:
        check(*[_unfinished] * len(_learner_args(check)))
    assert NOT_DONE_HINT in str(e.value), str(e.value)


@pytest.mark.parametrize("lesson, check", list(_checks()))
def test_a_value_instead_of_a_function_fails_saying_so(lesson, check):
    with pytest.raises(CheckFailed, match="function"):
        check(*[None] * len(_learner_args(check)))


@pytest.mark.parametrize("lesson, check", list(_checks()))
def test_every_check_is_called_by_its_solution(lesson, check):
    nb = notebook.read(ROOT / lesson.solution)
    calls = "\n".join(nb.cells[i].source for i, _ in grade.check_cells(nb))
    assert f"{check.__name__}(" in calls, f"{lesson.solution} has no check cell calling {check.__name__}"
