"""One test over every exercise check of the course (each ``check_*`` in ``amp_edu.checks.lNN`` of
every lesson with an exercise, read from the lesson list):

* each is a :class:`~amp_edu.checks.core.Check` whose plan lives in ``amp_edu.plans`` (the kernel's
  side: it imports nothing of ``amp_edu.checks`` or ``amp_edu.course``);
* an unfinished answer (``raise NotImplementedError()``, what ``make exercises`` leaves) fails
  with the course's "not done yet" hint, never a traceback or a pass;
* something that is not a function (a learner who assigned a value) fails saying a function is wanted;
* every check is called by a check cell of its lesson's solution (so nbval, which runs the
  solutions in the course tier, proves the reference answer passes each one).

What each grader does with *wrong* answers is tested lesson by lesson (``test_checks_lNN.py``).
"""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from amp_edu.checks.core import NOT_DONE_HINT, Check, CheckFailed
from amp_edu.course import ROOT, cells, notebook
from amp_edu.course.lessons import LESSONS


def _checks():
    for lesson in LESSONS:
        if lesson.exercise:
            module = importlib.import_module(lesson.checks_module)
            for name in module.__all__:
                if isinstance(getattr(module, name), Check):
                    # lesson 13's graders compile models with Inductor: the course tier (tests/conftest.py)
                    yield pytest.param(lesson, (name, getattr(module, name)), id=f"{lesson.number:02d}-{name}")


def _learner_args(check: Check) -> list:
    """The plan's parameters after the cases: the learner's functions the check grades."""
    return list(inspect.signature(check.plan).parameters.values())[1:]


@pytest.mark.parametrize("lesson, named", list(_checks()))
def test_plans_live_on_the_kernels_side(lesson, named):
    _, check = named
    assert check.plan.__module__.startswith("amp_edu.plans."), check.plan.__module__
    tree = ast.parse(inspect.getsource(importlib.import_module(check.plan.__module__)))
    imported = [("." * n.level + (n.module or "")) if isinstance(n, ast.ImportFrom) else a.name
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names]
    assert not [m for m in imported if "checks" in m or "course" in m], imported


def _unfinished(*args, **kwargs):
    raise NotImplementedError()


@pytest.mark.parametrize("lesson, named", list(_checks()))
def test_an_unfinished_answer_fails_with_the_not_done_hint(lesson, named):
    _, check = named
    with pytest.raises(CheckFailed) as e:
        check(*[_unfinished] * len(_learner_args(check)))
    assert NOT_DONE_HINT in str(e.value), str(e.value)


@pytest.mark.parametrize("lesson, named", list(_checks()))
def test_a_value_instead_of_a_function_fails_saying_so(lesson, named):
    _, check = named
    with pytest.raises(CheckFailed, match="function"):
        check(*[None] * len(_learner_args(check)))


@pytest.mark.parametrize("lesson, named", list(_checks()))
def test_every_check_is_called_by_its_solution(lesson, named):
    name, _ = named
    nb = notebook.read(ROOT / lesson.solution)
    calls = "\n".join(nb.cells[i].source for i, _ in cells.check_cells(nb))
    assert f"{name}(" in calls, f"{lesson.solution} has no check cell calling {name}"


@pytest.mark.parametrize("package", ["checks", "plans"])
def test_the_registry_imports_every_lesson_module(package):
    """The grader finds a check (the kernel a plan) only through its registry's plain imports."""
    registry = importlib.import_module(f"amp_edu.{package}.registry")
    folder = ROOT / "amp_edu" / package                  # a lesson's module, or its package (checks/l05/)
    on_disk = sorted(f"amp_edu.{package}.{p.stem if p.suffix else p.name}"
                     for p in [*folder.glob("l[0-9][0-9].py"), *folder.glob("l[0-9][0-9]/")])
    generic = ["amp_edu.plans.runner"] if package == "plans" else []
    assert list(registry.MODULES) == generic + on_disk


def test_the_registries_refuse_what_is_not_a_check_or_plan():
    from amp_edu.checks import registry as checks
    from amp_edu.plans import registry as plans

    assert isinstance(checks.check("amp_edu.checks.l01", "check_decode"), Check)
    for bad in (("amp_edu.checks.core", "Check"), ("amp_edu.checks.l01", "nothing"), ("os", "system")):
        with pytest.raises(ValueError, match="course check"):
            checks.check(*bad)
    assert callable(plans.plan("amp_edu.plans.l05", "is_eligible"))
    for bad in (("amp_edu.plans.byvalue", "dumps"), ("amp_edu.plans.l05", "nothing")):
        with pytest.raises(ValueError, match="plan"):
            plans.plan(*bad)
