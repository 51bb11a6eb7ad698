"""The course's own check cells, and which exercise a submission is.

A check cell is just code in the learner's notebook, so a learner can edit it
(``# CHECK: decode`` followed by ``print("PASS")``), delete it, or write one of their own. nbgrader
answers this by locking the cells and restoring them from the instructor's copy before grading;
the class grader goes one step further, with the course's ``solutions/`` as the instructor's copy:

* :func:`recognise` says which course exercise a submission is — from its metadata (``make
  exercises`` writes ``{"amp_edu": {"exercise": "01_number_formats"}}``), its file name
  (``01_number_formats*.ipynb``), nbgrader's cell ids, or, last, the course check names it holds;
* every check of that exercise is run as the course wrote it (:attr:`ReferenceCheck.call`: the
  check function of the lesson's module, called on the learner's answer), whatever the cell now
  says; an edited cell is reported as such, a missing one is an ``error``, and a ``# CHECK:`` line
  of the learner's own is ordinary code, not a check.

Check names are unique across the course (``tests/test_grade_reference.py`` checks it).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import notebook

METADATA_KEY = "amp_edu"                  # nb.metadata["amp_edu"]["exercise"] = "01_number_formats"


@dataclass(frozen=True)
class ReferenceCheck:
    """One check cell of the course: ``module.function(*args)`` as its solution calls it."""

    lesson: str       # the solution's file name, e.g. "01_number_formats.ipynb"
    source: str       # the check cell's source
    module: str       # e.g. "amp_edu.checks.l01"
    function: str     # e.g. "check_decode"
    args: str         # the call's argument list as written, e.g. "decode" (the learner's answer)


def parse_call(source: str, lesson: str) -> tuple[str, str, str]:
    """``(module, function, args)`` of a course check cell ``check_x(answer)`` or
    ``lNN.check_x(answer)``; ``ValueError`` for any other shape (the grader must know what it runs)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"{lesson}: a check cell does not parse: {exc}") from None
    if not (len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr)
            and isinstance(tree.body[0].value, ast.Call)):
        raise ValueError(f"{lesson}: a check cell must be one call `check_<name>(answer)`, got {source!r}")
    call = tree.body[0].value
    own = f"amp_edu.checks.l{lesson[:2]}"
    if isinstance(call.func, ast.Name):
        module, function = own, call.func.id
    elif (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
          and re.fullmatch(r"l\d\d", call.func.value.id)):
        module, function = f"amp_edu.checks.{call.func.value.id}", call.func.attr
    else:
        raise ValueError(f"{lesson}: a check cell must call check_<name> or lNN.check_<name>, got {source!r}")
    if not function.startswith("check_"):
        raise ValueError(f"{lesson}: a check cell must call a check_<name> function, got {source!r}")
    args = ", ".join([ast.unparse(a) for a in call.args]
                     + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords])
    return module, function, args


def _norm(source: str) -> str:
    return "\n".join(ln.rstrip() for ln in source.strip().splitlines())


def is_edited(source: str, ref: ReferenceCheck) -> bool:
    """Does a submitted check cell differ from the course's (trailing whitespace aside)?"""
    return _norm(source) != _norm(ref.source)


def from_solutions(solutions_dir) -> dict[str, ReferenceCheck]:
    """``{check name: ReferenceCheck}`` for every check cell of every solution notebook."""
    from .grade import check_cells

    found: dict[str, ReferenceCheck] = {}
    for path in sorted(Path(solutions_dir).glob("*.ipynb")):
        nb = notebook.read(path)
        for i, name in check_cells(nb):
            if name in found:
                raise ValueError(f"check {name!r} is in both {found[name].lesson} and {path.name}; "
                                 "check names must be unique across the course")
            found[name] = ReferenceCheck(path.name, nb.cells[i].source,
                                         *parse_call(nb.cells[i].source, path.name))
    return found


CHECKLIST_HEADER = (
    '"""The course\'s check cells, as the grader runs them: written by `make exercises` from\n'
    'solutions/ (amp_edu.course.reference.from_solutions), so a grader installed without a checkout\n'
    'knows them too. Do not edit: tests/test_course.py fails when it differs from solutions/."""\n\n')


def checklist_text(refs: dict[str, ReferenceCheck]) -> str:
    """The source of :mod:`amp_edu.course.checklist` for ``refs``."""
    rows = "".join(f"    {name!r}: {dict(vars(r))!r},\n" for name, r in refs.items())
    return CHECKLIST_HEADER + "CHECKS = {\n" + rows + "}\n"


@lru_cache(maxsize=4)
def course_checks(solutions_dir: str | None = None) -> dict[str, ReferenceCheck]:
    """``{check name: ReferenceCheck}``: from :mod:`amp_edu.course.checklist` (the one the grader
    uses, shipped with the package), or parsed from ``solutions_dir`` when given."""
    if solutions_dir is not None:
        return from_solutions(solutions_dir)
    from .checklist import CHECKS

    return {name: ReferenceCheck(**fields) for name, fields in CHECKS.items()}


def lesson_checks(refs: dict[str, ReferenceCheck], lesson: str) -> dict[str, ReferenceCheck]:
    """The checks of one exercise (``"01_number_formats.ipynb"``), in the course's order."""
    return {n: r for n, r in refs.items() if r.lesson == lesson}


def recognise(nb, filename: str, refs: dict[str, ReferenceCheck]) -> tuple[str | None, str]:
    """``(lesson file, how it was recognised)``, or ``(None, why not)``.

    Tried in order: the notebook's ``amp_edu`` metadata, its file name, nbgrader's ``check_<name>``
    cell ids, the course check names among its ``# CHECK:`` lines (the lesson most of them belong to).
    """
    from .grade import check_cells

    lessons = sorted({r.lesson for r in refs.values()})
    meta = nb.get("metadata", {}).get(METADATA_KEY, {})
    stem = meta.get("exercise") if isinstance(meta, dict) else None
    if isinstance(stem, str) and f"{stem}.ipynb" in lessons:
        return f"{stem}.ipynb", f"its metadata says {stem}"
    for lesson in lessons:
        if Path(filename).name.startswith(lesson[:-len(".ipynb")]):
            return lesson, "by its file name"
    ids = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "") for c in nb.cells]
    by_id = [refs[i[len("check_"):]].lesson for i in ids
             if isinstance(i, str) and i.startswith("check_") and i[len("check_"):] in refs]
    named = [refs[n].lesson for _, n in check_cells(nb) if n in refs]
    for votes, how in ((by_id, "by its nbgrader cell ids"), (named, "by the course checks it holds")):
        if votes:
            best = max(sorted(set(votes)), key=votes.count)
            return best, how
    return None, ("not recognised as a course exercise: no amp_edu metadata, its file name does not "
                  "start with a lesson's (e.g. 01_number_formats), and it holds none of the course's checks")
