"""The copy of the course package a graded kernel imports: the lesson library, none of the judge.

A learner's kernel needs the lesson library (``amp_edu.formats``, ``amp_edu.scaler``, ...) and the
check plans (:mod:`amp_edu.plans`), and nothing that knows an expected value. :func:`build` copies
the package without ``amp_edu/checks`` and without the judge (:mod:`amp_edu.course.judge`), and
writes stand-ins for ``amp_edu.checks.lNN`` so the exercises' setup cells (``from
amp_edu.checks.l01 import check_decode``) still import: each check becomes a function that prints
that the class grader runs it outside the kernel, and the kernel-side helpers an exercise uses
(``run_ranks``, ``exercise_graph``) are imported from where they live, in the plans or the library.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["build", "stub_source", "LEFT_OUT"]

LEFT_OUT = ("amp_edu/checks", "amp_edu/course/judge.py")     # relative to the package root
STUB_MESSAGE = "graded by the course's judge, outside this kernel"


def stub_source(module: str) -> str:
    """The stand-in's source for check module ``module`` (e.g. ``"amp_edu.checks.l01"``)."""
    from ..checks.core import Check
    from ..checks.registry import MODULES

    mod = MODULES[module]
    lines = [f'"""Stand-in for {module} in a graded kernel: its checks are {STUB_MESSAGE}."""', ""]
    checks = []
    for name in getattr(mod, "__all__", ()):
        obj = getattr(mod, name)
        if isinstance(obj, Check):
            checks.append(name)
            continue
        home = getattr(obj, "__module__", "") or ""
        if not home.startswith("amp_edu.") or home.startswith("amp_edu.checks"):
            raise ValueError(f"{module}.{name} is neither a Check nor defined outside amp_edu.checks "
                             f"(it comes from {home!r}): a graded kernel could not import it")
        lines.append(f"from {home} import {obj.__name__} as {name}  # noqa: F401")
    lines += ["", "", "def _graded_outside(*learner):",
              f'    print("(this check is {STUB_MESSAGE})")', ""]
    lines += [f"{name} = _graded_outside" for name in checks]
    return "\n".join(lines) + "\n"


def exercise_names() -> tuple[str, ...]:
    """What the exercises may import from ``amp_edu.checks``: the lesson modules and every name in
    their ``__all__`` (checks and the kernel-side helpers the stand-ins re-export)."""
    from ..checks.registry import MODULES

    names = set()
    for module, mod in MODULES.items():
        names.add(module.rsplit(".", 1)[1])
        names.update(getattr(mod, "__all__", ()))
    return tuple(sorted(names))


def build(dest, source) -> Path:
    """Copy the package under ``source`` (the folder holding ``amp_edu``) to ``dest``, leaving out
    :data:`LEFT_OUT` and writing the check stand-ins; returns ``dest``."""
    dest, source = Path(dest), Path(source)
    left_out = {str((source / p).resolve()) for p in LEFT_OUT}

    def ignore(folder, names):
        return [n for n in names if n == "__pycache__" or str((Path(folder) / n).resolve()) in left_out]

    shutil.copytree(source / "amp_edu", dest / "amp_edu", ignore=ignore)
    stubs = dest / "amp_edu" / "checks"
    stubs.mkdir()
    (stubs / "__init__.py").write_text(f'"""Stand-ins: the course\'s checks are {STUB_MESSAGE}."""\n')
    from ..checks.registry import MODULES

    for module in MODULES:
        (stubs / f"{module.rsplit('.', 1)[1]}.py").write_text(stub_source(module))
    return dest
