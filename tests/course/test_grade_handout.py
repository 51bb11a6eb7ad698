"""The course's own checks: known once, parsed into the call the grader runs, and a submission
recognised as its exercise by metadata, file name, nbgrader ids or check names."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from amp_edu.course import cells, classgrade, grade, handout, notebook

ROOT = Path(__file__).resolve().parents[2]
EXERCISE = ROOT / "exercises" / "01_number_formats.ipynb"


def tampered():
    """Exercise 01, unsolved, with its first check replaced by a print and its second deleted."""
    nb = notebook.read(EXERCISE)
    (first, name1), (second, name2) = cells.check_cells(nb)
    nb.cells[first].source = f"# CHECK: {name1}\nprint('PASS {name1}')"
    del nb.cells[second]
    return nb, name1, name2


def test_every_solution_check_is_known_once_and_parsed_into_its_call():
    refs = handout.course_checks()
    assert refs == handout.from_solutions(ROOT / "solutions"), "amp_edu/course/checklist.py is stale: make exercises"
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        names = [n for _, n in cells.check_cells(notebook.read(path))]
        assert names and all(refs[n].lesson == path.name for n in names)
        assert list(handout.lesson_checks(refs, path.name)) == names
    assert (refs["decode"].module, refs["decode"].function, refs["decode"].args) == \
        ("amp_edu.checks.l01", "check_decode", "decode")
    assert refs["arithmetic_intensity"].module == "amp_edu.checks.l06"        # the `l06.check_x(...)` form


def test_the_shipped_checklist_names_real_graders_and_every_exercises_given_cells():
    """amp_edu.course.checklist is what a grader installed without a checkout knows: each entry
    names a grader that exists, and GIVEN covers exactly the exercises, every one handing out cells."""
    import importlib

    from amp_edu.checks.core import Check
    from amp_edu.course.checklist import CHECKS, GIVEN

    for name, entry in CHECKS.items():
        grader = getattr(importlib.import_module(entry["module"]), entry["function"])
        assert isinstance(grader, Check), name
        assert entry["source"].startswith(f"# CHECK: {name}\n")
        assert f"{entry['function']}({entry['args']})" in entry["source"]
        assert (ROOT / "solutions" / entry["lesson"]).is_file()
    assert set(GIVEN) == {p.name for p in (ROOT / "exercises").glob("*.ipynb")} == {e["lesson"] for e in CHECKS.values()}
    assert all(GIVEN.values())
    assert handout.given_cells() == {d for digests in GIVEN.values() for d in digests}
    assert handout.course_checks() == {n: handout.CourseCheck(**e) for n, e in CHECKS.items()}


@pytest.mark.parametrize("source", ["print('PASS')", "x = check_decode(decode)", "import os",
                                    "check_decode(decode); print(1)", "os.system('x')(1)"])
def test_a_check_cell_of_another_shape_is_refused(source):
    with pytest.raises(ValueError, match="check cell"):
        handout.parse_call(source, "01_x.ipynb")


def test_recognise_by_metadata_name_nbgrader_ids_and_check_names():
    refs = handout.course_checks()
    nb = notebook.read(EXERCISE)
    assert handout.recognise(nb, "anything.ipynb", refs) == ("01_number_formats.ipynb",
                                                               "its metadata says 01_number_formats")
    nb.metadata.pop("amp_edu")
    assert handout.recognise(nb, "01_number_formats (1).ipynb", refs)[1] == "by its file name"
    assert handout.recognise(nb, "ex.ipynb", refs) == ("01_number_formats.ipynb", "by its nbgrader cell ids")
    for c in nb.cells:
        c.metadata.pop("nbgrader", None)
    assert handout.recognise(nb, "ex.ipynb", refs) == ("01_number_formats.ipynb", "by the course checks it holds")
    plain = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    plain.cells[0].metadata["nbgrader"] = {"grade_id": "check_unscale"}
    assert handout.recognise(plain, "ex.ipynb", refs) == ("04_gradscaler_from_scratch.ipynb",
                                                            "by its nbgrader cell ids")
    plain.cells[0].metadata.pop("nbgrader")
    lesson, why = handout.recognise(plain, "ex.ipynb", refs)
    assert lesson is None and why.startswith("not recognised as a course exercise")


def test_the_hand_in_decides_and_what_the_notebook_says_against_it_is_flagged():
    refs = handout.course_checks()
    nb = notebook.read(EXERCISE)                                   # metadata and checks of 01
    assert handout.recognise(nb, "04_gradscaler_from_scratch.ipynb", refs) == (
        "04_gradscaler_from_scratch.ipynb", "by its file name")
    assert handout.recognise(nb, "submitted/ann/04_gradscaler_from_scratch/mine.ipynb", refs) == (
        "04_gradscaler_from_scratch.ipynb", "by the folder it was handed in under")
    flags = handout.other_exercises(nb, "04_gradscaler_from_scratch.ipynb", refs)
    assert flags == ["its metadata says 01_number_formats, but it was handed in as 04_gradscaler_from_scratch",
                     "it holds checks of 01_number_formats, but it was handed in as 04_gradscaler_from_scratch"]
    assert handout.other_exercises(nb, "01_number_formats.ipynb", refs) == []


def test_edited_means_more_than_whitespace():
    ref = handout.course_checks()["decode"]
    assert not handout.is_edited(ref.source + "\n\n   ", ref)
    assert handout.is_edited(ref.source + "\nprint('PASS')", ref)


def test_a_tampered_submission_is_graded_with_the_course_checks(tmp_path):
    nb, name1, name2 = tampered()
    path = tmp_path / "sneaky.ipynb"
    notebook.write(nb, path)
    r = classgrade.grade_file(path, smoke=True)
    got = {c.name: c for c in r.checks}
    assert got[name1].status == "fail" and "NotImplementedError" in got[name1].message
    assert got[name1].edited and grade.EDITED_NOTE in got[name1].message
    assert got[name1].detail.startswith("edited check restored: hint:")
    assert got[name2].status == "error" and got[name2].detail == grade.MISSING.format(name=name2)
    [row] = [x for x in classgrade.rows([r], full=True) if x["check"] == name2]
    assert row["cell"] is None
    [row] = [x for x in classgrade.rows([r]) if x["check"] == name1]
    assert row["detail"].startswith("edited check restored:")            # in the CSV too
    assert "FAIL*" in classgrade.summary_table([r])
