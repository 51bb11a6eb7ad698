"""Every lesson's plan module, imported by name in plain sight: how a graded kernel finds a plan.

The judge names the plan a check uses as data (``amp_edu.plans.l05`` / ``is_eligible``); the
guard in the learner's kernel (:class:`amp_edu.course.integrity.Guard`) imports this module before
any learner code runs and looks the plan up here, never with a string import. A new lesson's plan
module is added to the import line; ``tests/checks/test_all.py`` fails until it is.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable

from . import runner, l02, l03, l04, l05, l08, l09, l10, l11, l12, l13, l14

__all__ = ["MODULES", "plan"]

#: ``{"amp_edu.plans.runner": <module>, "amp_edu.plans.l02": <module>, ...}``: the generic plans
#: (:func:`~amp_edu.plans.runner.each`, used by checks with no plan of their own), then each lesson's.
MODULES: dict[str, ModuleType] = {m.__name__: m for m in (runner, l02, l03, l04, l05, l08, l09, l10, l11, l12, l13, l14)}


def plan(module: str, name: str) -> Callable:
    """The plan ``module.name`` (e.g. ``"amp_edu.plans.l05"``, ``"is_eligible"``); ``ValueError``
    naming what is accepted for anything else."""
    if module not in MODULES:
        raise ValueError(f"not a course plan module: {module!r}; accepted: {', '.join(MODULES)}")
    found = getattr(MODULES[module], name, None)
    if not callable(found):
        raise ValueError(f"{module}.{name} is not a plan")
    return found
