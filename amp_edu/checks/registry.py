"""Every lesson's check module, imported by name in plain sight: how the grader finds a check.

A graded notebook's check cell names its check as data (``amp_edu.checks.l01`` /
``check_decode``, from :mod:`amp_edu.course.checklist`); the judge and the class grader turn that
into the :class:`~amp_edu.checks.core.Check` here, never with a string import, so a reader (and
``tests/test_layering.py``) sees every module a grade can reach. A new lesson's module is added
to the import line; ``tests/checks/test_all.py`` fails until it is.

The exercises themselves import one lesson's module (``from amp_edu.checks.l01 import
check_decode``), not this one, so a learner's notebook never loads every grader.
"""

from __future__ import annotations

from types import ModuleType

from . import l01, l02, l03, l04, l05, l06, l07, l08, l09, l10, l11, l12, l13, l14
from .core import Check

__all__ = ["MODULES", "check"]

#: ``{"amp_edu.checks.l01": <module>, ...}``, in lesson order.
MODULES: dict[str, ModuleType] = {m.__name__: m for m in (l01, l02, l03, l04, l05, l06, l07, l08, l09, l10, l11, l12, l13, l14)}


def check(module: str, function: str) -> Check:
    """The course check ``module.function`` (e.g. ``"amp_edu.checks.l01"``, ``"check_decode"``);
    ``ValueError`` naming what is accepted for anything else."""
    if module not in MODULES:
        raise ValueError(f"not a course check module: {module!r}; accepted: {', '.join(MODULES)}")
    found = getattr(MODULES[module], function, None)
    if not isinstance(found, Check):
        raise ValueError(f"{module}.{function} is not a course check")
    return found
