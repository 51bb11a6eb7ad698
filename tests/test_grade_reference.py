"""A learner cannot pass by editing or deleting a check cell: the course's own checks are graded."""

from __future__ import annotations

from pathlib import Path

from amp_edu.course import classgrade, grade, notebook, reference

ROOT = Path(__file__).resolve().parents[1]
EXERCISE = ROOT / "exercises" / "01_number_formats.ipynb"


def tampered():
    """Exercise 01, unsolved, with its first check replaced by a print and its second deleted."""
    nb = notebook.read(EXERCISE)
    (first, name1), (second, name2) = grade.check_cells(nb)
    nb.cells[first].source = f"# CHECK: {name1}\nprint('PASS {name1}')"
    del nb.cells[second]
    return nb, name1, name2


def test_every_solution_check_is_known_once():
    refs = reference.course_checks()
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        names = [n for _, n in grade.check_cells(notebook.read(path))]
        assert names and all(refs[n].lesson == path.name for n in names)


def test_restore_puts_the_course_check_back_and_names_the_missing_one():
    nb, name1, name2 = tampered()
    edited, missing = reference.restore(nb, reference.course_checks())
    assert (edited, missing) == ([name1], [name2])
    ref = notebook.read(EXERCISE)
    assert nb.cells[grade.check_cells(nb)[0][0]].source == ref.cells[grade.check_cells(ref)[0][0]].source
    # a notebook of someone else's exercises is left alone
    assert reference.restore(notebook.read(EXERCISE), {}) == ([], [])


def test_a_tampered_submission_is_graded_with_the_course_checks(tmp_path):
    nb, name1, name2 = tampered()
    path = tmp_path / "sneaky.ipynb"
    notebook.write(nb, path)
    r = classgrade.grade_file(path, smoke=True, timeout=120)
    got = {c.name: c for c in r.checks}
    assert got[name1].status == "fail" and "NotImplementedError" in got[name1].message
    assert classgrade.EDITED_NOTE in got[name1].message
    assert got[name2].status == "error" and got[name2].detail == classgrade.MISSING.format(name=name2)
    [row] = [x for x in classgrade.rows([r], full=True) if x["check"] == name2]
    assert row["cell"] is None
