"""Write an nbgrader course folder from ``solutions/``: ``python -m amp_edu nbgrader DIR``.

Many instructors already run `nbgrader <https://nbgrader.readthedocs.io>`_ (release, collect,
autograde, a gradebook). The course's solution notebooks already speak its language: nbgrader
strips the same ``### BEGIN SOLUTION`` / ``### END SOLUTION`` blocks and puts the same
``# YOUR CODE HERE`` / ``raise NotImplementedError()`` stub in their place. What nbgrader needs
in addition is a role for every cell, in ``cell.metadata["nbgrader"]`` (schema version 3):

==========================  =========================================================  ==========
course cell                 nbgrader cell                                              metadata
==========================  =========================================================  ==========
code with a solution block  "Autograded answer": the learner edits it                  solution
``# CHECK: <name>`` cell    "Autograder tests": locked, ``points`` (1 by default)      grade, locked
markdown with a solution    "Manually graded answer" (an instructor reads it)          solution, grade
anything else               "Read-only": restored from the source when grading         locked
==========================  =========================================================  ==========

Every such cell gets a ``grade_id`` unique in its notebook (``check_<name>``,
``answer_<function>``, ``cell_<cell id>``). :func:`write_course` writes
``DIR/source/<NN_name>/<NN_name>.ipynb`` for every solution and ``DIR/nbgrader_config.py``; then,
in ``DIR``::

    nbgrader generate_assignment 01_number_formats   # release/...: the same code cells as exercises/
    # learners hand in: submitted/<student>/01_number_formats/01_number_formats.ipynb
    nbgrader autograde 01_number_formats              # runs every notebook, fills gradebook.db

Because the check cells are locked, nbgrader restores them from the source before grading: a
learner cannot pass by editing a check. ``tests/course/test_nbgrader.py`` runs this whole route.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

from . import notebook
from . import ROOT
from .cells import BEGIN, CHECK_RE, END
from .limits import DEFAULT, GradeLimits

SCHEMA_VERSION = 3
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"     # exercises.strip writes the same
TEXT_STUB = "YOUR ANSWER HERE"

CONFIG = '''\
"""nbgrader configuration for the amp_edu exercises (written by `python -m amp_edu nbgrader`).

Run nbgrader from the course's environment (e.g. `.venv/bin/nbgrader`), so that its kernels
import the same torch and amp_edu as the graders were written for.
"""
c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.course_id = "amp_edu"
# The solution markers and stubs of amp_edu.course.exercises (nbgrader's default markers are the
# substrings "BEGIN SOLUTION" / "END SOLUTION"; the full lines are stricter).
c.ClearSolutions.begin_solution_delimeter = {begin!r}
c.ClearSolutions.end_solution_delimeter = {end!r}
c.ClearSolutions.code_stub = {{"python": {code_stub!r}}}
c.ClearSolutions.text_stub = {text_stub!r}
# Seconds per cell when autograding (nbgrader's default is 30): amp_edu.course.limits' cell_s,
# the limit `python -m amp_edu grade` uses. Kernel start-up: its start_s.
c.Execute.timeout = {timeout}
c.Execute.startup_timeout = {start}
'''


def config_text(limits: GradeLimits = DEFAULT) -> str:
    """The ``nbgrader_config.py`` :func:`write_course` writes (nbgrader wants whole seconds)."""
    if not isinstance(limits, GradeLimits):
        raise TypeError(f"limits must be a GradeLimits, got {type(limits).__name__}")
    return CONFIG.format(begin=BEGIN, end=END, code_stub=CODE_STUB, text_stub=TEXT_STUB,
                         timeout=math.ceil(limits.cell_s), start=math.ceil(limits.start_s))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_") or "x"


def _unique(name: str, used: set[str]) -> str:
    out, k = name, 2
    while out in used:
        out, k = f"{name}_{k}", k + 1
    used.add(out)
    return out


def _markers(source: str) -> int:
    """How many solution blocks ``source`` has; refuses lines nbgrader would misread."""
    n = 0
    for line in source.splitlines():
        s = line.strip()
        if s == BEGIN:
            n += 1
        elif ("BEGIN SOLUTION" in s or "END SOLUTION" in s) and s != END:
            raise ValueError(f"a line mentions a solution marker without being one: {line!r} "
                             f"(write exactly {BEGIN!r} / {END!r} on a line of their own)")
    return n


def to_nbgrader(nb, *, points: float = 1.0):
    """A copy of solution notebook ``nb`` with nbgrader metadata on every cell (outputs kept:
    nbgrader clears them when it generates the learner version)."""
    if not points > 0:
        raise ValueError(f"points must be positive, got {points!r}")
    nb = copy.deepcopy(nb)
    used: set[str] = set()
    n_checks = n_answers = 0
    for cell in nb.cells:
        first = cell.source.splitlines()[0] if cell.source else ""
        check = CHECK_RE.match(first) if cell.cell_type == "code" else None
        blocks = _markers(cell.source) if cell.cell_type in ("code", "markdown") else 0
        meta = {"grade": False, "solution": False, "locked": False, "schema_version": SCHEMA_VERSION}
        if check:
            if blocks:
                raise ValueError(f"check cell {check.group('name')!r} must not contain a solution block")
            meta.update(grade=True, locked=True, points=points,
                        grade_id=_unique("check_" + _slug(check.group("name")), used))
            n_checks += 1
        elif blocks and cell.cell_type == "code":
            fn = re.search(r"^\s*(?:def|class)\s+(\w+)", cell.source, re.M)
            meta.update(solution=True, grade_id=_unique("answer_" + (fn.group(1) if fn else "code"), used))
            n_answers += 1
        elif blocks:                                           # a written answer
            meta.update(solution=True, grade=True, points=points,
                        grade_id=_unique("answer_text", used))
            n_answers += 1
        else:
            meta.update(locked=True, grade_id=_unique("cell_" + _slug(str(cell.get("id") or "")), used))
        cell.metadata["nbgrader"] = meta
    if not n_checks or not n_answers:
        raise ValueError("a solution notebook needs at least one solution block and one "
                         "'# CHECK: <name>' cell")
    return nb


def write_course(course_dir, solutions_dir=None, *, force: bool = False, points: float = 1.0,
                 limits: GradeLimits = DEFAULT) -> list[Path]:
    """Write ``course_dir/source/<NN_name>/<NN_name>.ipynb`` for each solution, and
    ``course_dir/nbgrader_config.py`` (its time limits from ``limits``); returns the paths written.

    Refuses (``FileExistsError``) to write over an existing ``source/`` unless ``force``.
    """
    course_dir = Path(course_dir)
    solutions_dir = Path(solutions_dir or ROOT / "solutions")
    sols = sorted(solutions_dir.glob("*.ipynb"))
    if not sols:
        raise ValueError(f"no solution notebooks (*.ipynb) in {str(solutions_dir)!r}")
    source = course_dir / "source"
    if source.exists() and any(source.iterdir()) and not force:
        raise FileExistsError(f"{str(source)!r} already exists (use --force to overwrite)")
    written = []
    for sol in sols:
        try:
            nb = to_nbgrader(notebook.read(sol), points=points)
        except ValueError as exc:
            raise ValueError(f"{sol.name}: {exc}") from None
        path = source / sol.stem / sol.name
        notebook.write(nb, path)
        written.append(path)
    config = course_dir / "nbgrader_config.py"
    config.write_text(config_text(limits))
    written.append(config)
    return written
