"""The course's own conventions: packaging, exercises generated from solutions, graders wired up."""

import json
import re
import tomllib
from pathlib import Path

import nbformat
import pytest

from amp_edu.course import cells, exercises, grade, handout, notebook
from amp_edu.course import lessons as course_lessons

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = [ROOT / lesson.solution for lesson in course_lessons.LESSONS if lesson.exercise]
EXERCISES = [ROOT / "exercises" / path.name for path in SOLUTIONS]
LESSONS = [ROOT / lesson.notebook for lesson in course_lessons.LESSONS]


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = sorted(py["dependencies"] + py["optional-dependencies"]["test"])
    text = (ROOT / "environment.yml").read_text()
    pip_section = text.split("- pip:", 1)[1]
    got = sorted(ln.strip()[2:].strip() for ln in pip_section.splitlines()
                 if ln.strip().startswith("- ") and not ln.strip().startswith("- -e"))
    assert got == want, f"environment.yml pip deps {got} != pyproject deps {want}"
    assert "python=3.11" in text


def test_constraints_pin_every_dependency():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {_name(ln): ln for ln in (ROOT / "constraints.txt").read_text().splitlines()
            if ln and not ln.startswith("#")}
    for spec in py["dependencies"] + py["optional-dependencies"]["test"]:
        assert _name(spec) in pins, f"{spec} is not pinned in constraints.txt"
        assert "==" in pins[_name(spec)]
    assert pins["torch"].strip() == "torch==2.13.0"


def test_strip_replaces_solution_blocks_and_clears_outputs():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def f(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n"),
        nbformat.v4.new_markdown_cell("Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"),
    ])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="hi")]
    nb.cells[0].execution_count = 3
    out = exercises.strip(nb)
    assert out.cells[0].source == "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert out.cells[0].outputs == [] and out.cells[0].execution_count is None
    assert out.cells[1].source == "Why?\nYOUR ANSWER HERE"
    assert nb.cells[0].execution_count == 3, "strip must not modify its input"


@pytest.mark.parametrize("src", [
    "### BEGIN SOLUTION\nx = 1\n",                    # unterminated
    "x = 1\n### END SOLUTION\n",                      # end without begin
    "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n",
])
def test_strip_rejects_malformed_markers(src):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src)])
    with pytest.raises(ValueError):
        exercises.strip(nb)


def test_strip_rejects_notebook_without_solution():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(ValueError, match="BEGIN SOLUTION"):
        exercises.strip(nb)


def test_exercises_are_not_stale():
    assert SOLUTIONS, "no solution notebooks"
    bad = exercises.stale()
    assert not bad, f"exercises/ is stale for {bad}: run `make exercises`"


def test_stale_detects_a_hand_edit(tmp_path):
    sol = tmp_path / "sol"
    ex = tmp_path / "ex"
    sol.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("### BEGIN SOLUTION\nx=1\n### END SOLUTION")])
    notebook.write(nb, sol / "01_x.ipynb")
    exercises.generate(sol, ex)
    assert exercises.stale(sol, ex) == []
    (ex / "01_x.ipynb").write_text((ex / "01_x.ipynb").read_text().replace("YOUR CODE HERE", "edited"))
    assert exercises.stale(sol, ex) == ["01_x.ipynb"]
    (ex / "01_x.ipynb").unlink()
    assert exercises.stale(sol, ex) == ["01_x.ipynb"]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_has_check_cells_calling_graders(path):
    nb = notebook.read(path)
    checks = cells.check_cells(nb)
    assert checks, f"{path.name} has no '# CHECK: <name>' cells"
    lesson = path.name[:2]
    source = "".join(c.source for c in nb.cells)
    assert re.search(rf"checks\.l{lesson}\b|from amp_edu\.checks import .*\bl{lesson}\b", source), \
        f"{path.name} does not use the graders in amp_edu.checks.l{lesson}"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_every_shipped_exercise_fails_at_each_check(path):
    nb = notebook.read(path)
    refs = handout.course_checks()
    results = grade.grade_notebook(nb, path.parent, smoke=True,
                                   exercise=handout.lesson_checks(refs, path.name)).checks
    passed = [r.name for r in results if r.ok]
    assert not passed, f"{path.name}: checks pass on the unsolved exercise: {passed}"
    for r in results:
        assert "NotImplementedError" in r.message, \
            f"{path.name} check {r.name} failed without a useful message: {r.message!r}"


def test_grade_rejects_bad_paths(tmp_path, capsys):
    from amp_edu.__main__ import main
    assert main(["grade", str(tmp_path / "missing.ipynb")]) == 2
    assert ".ipynb" in capsys.readouterr().err


@pytest.mark.parametrize("path", LESSONS + SOLUTIONS, ids=lambda p: p.name)
def test_notebooks_are_stored_executed_without_errors(path):
    nb = notebook.read(path)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert all(c.execution_count is not None for c in code), f"{path.name} has unexecuted cells"
    errs = [e for e in notebook.error_outputs(nb) if "NBVAL_RAISES_EXCEPTION" not in nb.cells[e[0]].source]
    assert not errs, f"{path.name} stores errors: {errs}"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


def test_percent_round_trip():
    nb = notebook.from_percent("# %% [markdown]\n# # Title\n#\n# text\n\n# %%\nx = 1\nprint(x)\n")
    assert [c.cell_type for c in nb.cells] == ["markdown", "code"]
    assert nb.cells[0].source == "# Title\n\ntext"
    assert notebook.from_percent(notebook.to_percent(nb)).cells[1].source == "x = 1\nprint(x)"
