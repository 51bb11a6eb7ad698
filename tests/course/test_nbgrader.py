"""``python -m amp_edu nbgrader``: the course as an nbgrader course folder, proved with nbgrader itself.

The fast tests check the metadata with nbgrader's own validator and its own ``ClearSolutions``
preprocessor on every solution. The end-to-end test runs the real command line on lesson 01 in a
temporary folder: ``nbgrader generate_assignment`` must give the notebook ``make exercises`` writes
into ``exercises/`` (``tests/course/test_exercises.py`` checks that ``exercises/`` is not stale), and
``nbgrader autograde`` must score a solved notebook full marks — the release and a notebook
started from ``exercises/`` alike —, the shipped exercise zero, and a notebook whose check cells
were edited to pass zero too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.preprocessors import ClearSolutions
from traitlets.config import Config

from amp_edu.__main__ import main
from amp_edu.course import exercises, nbgrader, notebook
from amp_edu.course.cells import BEGIN, END

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
LESSON = "01_number_formats"


def cells(nb) -> list[tuple[str, str]]:
    """What a learner sees: cell types and sources, trailing whitespace normalised."""
    return [(c.cell_type, "\n".join(ln.rstrip() for ln in c.source.strip().splitlines())) for c in nb.cells]


def nbgrader_config() -> Config:
    """The configuration ``nbgrader_config.py`` sets, loaded the way nbgrader loads it."""
    cfg = Config()
    exec(nbgrader.config_text(), {"get_config": lambda: cfg})
    return cfg


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_every_solution_becomes_a_valid_nbgrader_source_with_the_exercise_as_its_release(path):
    nb = nbgrader.to_nbgrader(notebook.read(path))
    MetadataValidator().validate_nb(nb)                 # nbgrader's own check: ids unique, points set
    roles = [(c.metadata.nbgrader["grade"], c.metadata.nbgrader["solution"], c.metadata.nbgrader["locked"])
             for c in nb.cells]
    checks = [c for c in nb.cells if c.source.startswith("# CHECK:")]
    assert all(c.metadata.nbgrader["grade_id"].startswith("check_") and c.metadata.nbgrader["points"] == 1
               for c in checks)
    assert sum(r == (True, False, True) for r in roles) == len(checks)
    def answers(cell_type):
        return sum(BEGIN in c.source for c in nb.cells if c.cell_type == cell_type)
    assert sum(r == (False, True, False) for r in roles) == answers("code")        # autograded answers
    assert sum(r == (True, True, False) for r in roles) == answers("markdown")     # manually graded ones
    assert all(r in [(True, False, True), (False, True, False), (True, True, False), (False, False, True)]
               for r in roles)
    released, _ = ClearSolutions(config=nbgrader_config()).preprocess(nb, {})
    assert cells(released) == cells(exercises.strip(notebook.read(path)))   # what `make exercises` writes


def test_written_answers_and_bad_markers(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("Why?\n\n### BEGIN SOLUTION\nbecause\n### END SOLUTION"),
        nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
        nbformat.v4.new_code_cell("# CHECK: f\nassert f() == 1"),
        nbformat.v4.new_code_cell("# CHECK: f\nassert f() == 1"),
    ])
    out = nbgrader.to_nbgrader(nb, points=2)
    meta = [c.metadata.nbgrader for c in out.cells]
    assert (meta[0]["grade"], meta[0]["solution"], meta[0]["points"]) == (True, True, 2)
    assert [m["grade_id"] for m in meta] == ["answer_text", "answer_f", "check_f", "check_f_2"]
    MetadataValidator().validate_nb(out)
    bad = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1  # END SOLUTION here")])
    with pytest.raises(ValueError, match="without being one"):
        nbgrader.to_nbgrader(bad)
    with pytest.raises(ValueError, match="must not contain a solution block"):
        nbgrader.to_nbgrader(nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_code_cell("# CHECK: f\n### BEGIN SOLUTION\nx\n### END SOLUTION")]))
    with pytest.raises(ValueError, match="at least one solution block"):
        nbgrader.to_nbgrader(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# CHECK: f\n1")]))


def test_cli_refuses_to_overwrite_without_force(tmp_path, capsys):
    sols = tmp_path / "sol"
    sols.mkdir()
    (sols / f"{LESSON}.ipynb").write_bytes((ROOT / "solutions" / f"{LESSON}.ipynb").read_bytes())
    course = tmp_path / "course"
    assert main(["nbgrader", str(course), "--solutions", str(sols)]) == 0
    assert (course / "source" / LESSON / f"{LESSON}.ipynb").is_file()
    assert (course / "nbgrader_config.py").is_file()
    assert main(["nbgrader", str(course), "--solutions", str(sols)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["nbgrader", str(course), "--solutions", str(sols), "--force"]) == 0
    assert main(["nbgrader", str(tmp_path / "c2"), "--solutions", str(tmp_path)]) == 2


def run_nbgrader(args: list[str], cwd: Path, timeout: float = 300) -> str:
    """``nbgrader ARGS`` in ``cwd`` from this environment, bounded in time (its kernels too)."""
    bindir = str(Path(sys.executable).parent)        # nbgrader runs `alembic` from PATH
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), PYTHONPATH=str(ROOT),
               AMP_EDU_SMOKE="1")
    proc = subprocess.Popen([os.path.join(bindir, "nbgrader"), *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"nbgrader {' '.join(args)} ran past {timeout} s")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)         # any kernel it left behind
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, out
    return out


def test_nbgrader_generates_the_exercise_and_autogrades_solved_full_and_shipped_zero(tmp_path):
    sols = tmp_path / "sol"
    sols.mkdir()
    (sols / f"{LESSON}.ipynb").write_bytes((ROOT / "solutions" / f"{LESSON}.ipynb").read_bytes())
    course = tmp_path / "course"
    assert main(["nbgrader", str(course), "--solutions", str(sols)]) == 0

    run_nbgrader(["generate_assignment", LESSON], course)
    release = notebook.read(course / "release" / LESSON / f"{LESSON}.ipynb")
    assert cells(release) == cells(exercises.strip(notebook.read(sols / f"{LESSON}.ipynb")))

    # a learner who solved it: the released notebook with the solutions typed in
    source = {c.metadata.nbgrader["grade_id"]: c for c in notebook.read(course / "source" / LESSON / f"{LESSON}.ipynb").cells}
    for c in release.cells:
        if c.metadata.get("nbgrader", {}).get("solution"):
            c.source = "\n".join(ln for ln in source[c.metadata.nbgrader["grade_id"]].source.splitlines()
                                 if ln.strip() not in (BEGIN, END))
    notebook.write(release, course / "submitted" / "solver" / LESSON / f"{LESSON}.ipynb")
    # a learner who solved the notebook from exercises/ (what the README hands out) instead
    ours = notebook.read(ROOT / "exercises" / f"{LESSON}.ipynb")
    for c in ours.cells:
        if c.metadata.get("nbgrader", {}).get("solution"):
            c.source = "\n".join(ln for ln in source[c.metadata.nbgrader["grade_id"]].source.splitlines()
                                 if ln.strip() not in (BEGIN, END))
    notebook.write(ours, course / "submitted" / "from_exercises" / LESSON / f"{LESSON}.ipynb")
    # a learner who edited the checks instead: nbgrader restores locked cells from the source
    cheat = notebook.read(course / "release" / LESSON / f"{LESSON}.ipynb")
    for c in cheat.cells:
        if c.source.startswith("# CHECK:"):
            c.source = c.source.splitlines()[0] + "\nprint('PASS')"
    notebook.write(cheat, course / "submitted" / "cheater" / LESSON / f"{LESSON}.ipynb")
    # a learner who handed in the exercise as shipped
    shipped = course / "submitted" / "shipped" / LESSON / f"{LESSON}.ipynb"
    shipped.parent.mkdir(parents=True)
    shipped.write_bytes((ROOT / "exercises" / f"{LESSON}.ipynb").read_bytes())

    run_nbgrader(["autograde", LESSON], course)
    n_checks = sum(c.source.startswith("# CHECK:") for c in release.cells)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        solved = gb.find_submission(LESSON, "solver")
        unsolved = gb.find_submission(LESSON, "shipped")
        assert (solved.score, solved.max_score) == (n_checks, n_checks)
        ours = gb.find_submission(LESSON, "from_exercises")
        assert (ours.score, ours.max_score) == (n_checks, n_checks)
        assert (unsolved.score, unsolved.max_score) == (0, n_checks)
        assert gb.find_submission(LESSON, "cheater").score == 0
