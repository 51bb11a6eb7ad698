"""What the course hands out and grades by: its check cells as the solutions call them, the code
cells an exercise gives verbatim, and which exercise a submission is.

A check cell is just code in the learner's notebook, so a learner can edit it
(``# CHECK: decode`` followed by ``print("PASS")``), delete it, or write one of their own. nbgrader
answers this by locking the cells and restoring them from the instructor's copy before grading;
the class grader goes one step further, with the course's ``solutions/`` as the instructor's copy:

* :func:`recognise` says which course exercise a submission is — from its metadata (``make
  exercises`` writes ``{"amp_edu": {"exercise": "01_number_formats"}}``), its file name
  (``01_number_formats*.ipynb``), nbgrader's cell ids, or, last, the course check names it holds;
* every check of that exercise is run as the course wrote it (a :class:`CourseCheck`: the
  check function of the lesson's module, called on the learner's answer), whatever the cell now
  says; an edited cell is reported as such, a missing one is an ``error``, and a ``# CHECK:`` line
  of the learner's own is ordinary code, not a check.

Check names are unique across the course (``tests/course/test_grade_handout.py`` checks it).
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import notebook
from .cells import check_cells

METADATA_KEY = "amp_edu"                  # nb.metadata["amp_edu"]["exercise"] = "01_number_formats"


@dataclass(frozen=True)
class CourseCheck:
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


def is_edited(source: str, ref: CourseCheck) -> bool:
    """Does a submitted check cell differ from the course's (trailing whitespace aside)?"""
    return _norm(source) != _norm(ref.source)


def from_solutions(solutions_dir) -> dict[str, CourseCheck]:
    """``{check name: CourseCheck}`` for every check cell of every solution notebook."""
    found: dict[str, CourseCheck] = {}
    for path in sorted(Path(solutions_dir).glob("*.ipynb")):
        nb = notebook.read(path)
        for i, name in check_cells(nb):
            if name in found:
                raise ValueError(f"check {name!r} is in both {found[name].lesson} and {path.name}; "
                                 "check names must be unique across the course")
            found[name] = CourseCheck(path.name, nb.cells[i].source,
                                         *parse_call(nb.cells[i].source, path.name))
    return found


CHECKLIST_HEADER = (
    '"""The course\'s check cells, as the grader runs them: written by `make exercises` from\n'
    'solutions/ (amp_edu.course.handout.from_solutions), so a grader installed without a checkout\n'
    'knows them too. Do not edit: tests/course/test_exercises.py fails when it differs from solutions/."""\n\n')


def cell_digest(source: str) -> str:
    """A short digest of a code cell's source (trailing whitespace aside): how the grader tells the
    cells an exercise gives from the cells a learner wrote."""
    return hashlib.sha256(_norm(source).encode()).hexdigest()[:16]


def checklist_text(refs: dict[str, CourseCheck], given: dict[str, list[str]]) -> str:
    """The source of :mod:`amp_edu.course.checklist` for ``refs`` and the exercises' ``given`` cells
    (``{lesson: [cell_digest, ...]}``: every code cell an exercise hands the learner, checks aside)."""
    rows = "".join(f"    {name!r}: {dict(vars(r))!r},\n" for name, r in refs.items())
    given_rows = "".join(f"    {lesson!r}: {digests!r},\n" for lesson, digests in sorted(given.items()))
    return (CHECKLIST_HEADER + "CHECKS = {\n" + rows + "}\n\n"
            "# the code cells each exercise hands out (handout.cell_digest), checks aside\n"
            "GIVEN = {\n" + given_rows + "}\n")


def given_cells() -> frozenset[str]:
    """The digests of the code cells the exercises hand out (from the checklist): a learner may
    hand one exercise in as another, and its cells are still the course's, not the learner's."""
    from .checklist import GIVEN

    return frozenset(d for digests in GIVEN.values() for d in digests)


@lru_cache(maxsize=4)
def course_checks(solutions_dir: str | None = None) -> dict[str, CourseCheck]:
    """``{check name: CourseCheck}``: from :mod:`amp_edu.course.checklist` (the one the grader
    uses, shipped with the package), or parsed from ``solutions_dir`` when given."""
    if solutions_dir is not None:
        return from_solutions(solutions_dir)
    from .checklist import CHECKS

    return {name: CourseCheck(**fields) for name, fields in CHECKS.items()}


def lesson_checks(refs: dict[str, CourseCheck], lesson: str) -> dict[str, CourseCheck]:
    """The checks of one exercise (``"01_number_formats.ipynb"``), in the course's order."""
    return {n: r for n, r in refs.items() if r.lesson == lesson}


def _lesson_of_name(name: str, lessons: list[str]) -> str | None:
    return next((lesson for lesson in lessons if name.startswith(lesson[:-len(".ipynb")])), None)


def recognise(nb, path, refs: dict[str, CourseCheck]) -> tuple[str | None, str]:
    """``(lesson file, how it was recognised)``, or ``(None, why not)``.

    The hand-in decides first: the file's name (``01_number_formats*.ipynb``), then the folder it
    was collected in (nbgrader's ``submitted/<student>/01_number_formats/``). Only a file named
    for no exercise is recognised by what it holds: its ``amp_edu`` metadata, nbgrader's
    ``check_<name>`` cell ids, the course check names among its ``# CHECK:`` lines (the lesson most
    of them belong to). What the notebook says against its name is :func:`other_exercises`.
    """
    path = Path(path)
    lessons = sorted({r.lesson for r in refs.values()})
    by_name = _lesson_of_name(path.name, lessons)
    if by_name:
        return by_name, "by its file name"
    by_folder = _lesson_of_name(path.parent.name, lessons) if path.parent.name else None
    if by_folder:
        return by_folder, "by the folder it was handed in under"
    meta = _metadata_lesson(nb, lessons)
    if meta:
        return meta, f"its metadata says {meta[:-len('.ipynb')]}"
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


def _metadata_lesson(nb, lessons: list[str]) -> str | None:
    meta = nb.get("metadata", {}).get(METADATA_KEY, {})
    stem = meta.get("exercise") if isinstance(meta, dict) else None
    return f"{stem}.ipynb" if isinstance(stem, str) and f"{stem}.ipynb" in lessons else None


def other_exercises(nb, lesson: str, refs: dict[str, CourseCheck]) -> list[str]:
    """What in ``nb`` names an exercise other than ``lesson`` (the one its hand-in says): its
    metadata, or its ``# CHECK:`` cells — a solved notebook of one exercise handed in as another."""
    out = []
    lessons = sorted({r.lesson for r in refs.values()})
    meta = _metadata_lesson(nb, lessons)
    if meta and meta != lesson:
        out.append(f"its metadata says {meta[:-len('.ipynb')]}, but it was handed in as {lesson[:-len('.ipynb')]}")
    others = sorted({refs[n].lesson for _, n in check_cells(nb) if n in refs and refs[n].lesson != lesson})
    if others:
        out.append(f"it holds checks of {', '.join(o[:-len('.ipynb')] for o in others)}, but it was handed in "
                   f"as {lesson[:-len('.ipynb')]}")
    return out
