"""The course's own check cells: a submission is graded with these, not with what its checks say.

A check cell is just code in the learner's notebook, so a learner can edit it
(``# CHECK: decode`` followed by ``print("PASS")``) or delete it. nbgrader answers this by locking
the cells and restoring them from the instructor's copy before grading; the class grader does the
same with the course's ``solutions/``:

* a check cell whose name is one of the course's checks is graded with the course's source
  (:func:`restore` says which ones had been edited, so the report can say so);
* a check of a lesson the notebook is recognised as (it has at least one of that lesson's checks)
  that is missing from it is reported as an ``error``, not silently skipped.

Check names are unique across the course (``tests/test_grade_reference.py`` checks it), so a
submission is matched whatever its file is called. Notebooks whose checks are not the course's
(an instructor's own exercises) are graded as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import notebook
from .exercises import ROOT


@dataclass(frozen=True)
class ReferenceCheck:
    lesson: str       # the solution's file name, e.g. "01_number_formats.ipynb"
    source: str       # the check cell's source


def _norm(source: str) -> str:
    return "\n".join(ln.rstrip() for ln in source.strip().splitlines())


@lru_cache(maxsize=4)
def course_checks(solutions_dir: str | None = None) -> dict[str, ReferenceCheck]:
    """``{check name: ReferenceCheck}`` for every check cell of every solution notebook."""
    from .grade import check_cells

    found: dict[str, ReferenceCheck] = {}
    for path in sorted(Path(solutions_dir or ROOT / "solutions").glob("*.ipynb")):
        nb = notebook.read(path)
        for i, name in check_cells(nb):
            if name in found:
                raise ValueError(f"check {name!r} is in both {found[name].lesson} and {path.name}; "
                                 "check names must be unique across the course")
            found[name] = ReferenceCheck(path.name, nb.cells[i].source)
    return found


def restore(nb, refs: dict[str, ReferenceCheck]) -> tuple[list[str], list[str]]:
    """Put the course's source into every known check cell of ``nb`` (in place).

    Returns ``(edited, missing)``: the names of check cells that differed from the course's, and
    the names of checks of the recognised lessons that ``nb`` lacks (in the course's order).
    """
    from .grade import check_cells

    edited, present = [], set()
    for i, name in check_cells(nb):
        ref = refs.get(name)
        if ref is None:
            continue
        present.add(name)
        if _norm(nb.cells[i].source) != _norm(ref.source):
            nb.cells[i].source = ref.source
            edited.append(name)
    lessons = {refs[n].lesson for n in present}
    missing = [n for n, r in refs.items() if r.lesson in lessons and n not in present]
    return edited, missing
