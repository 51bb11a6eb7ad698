"""One set of limits: GradeLimits validates, and every runner takes its default from it."""

from __future__ import annotations

import inspect
import tomllib
from pathlib import Path

import pytest

from amp_edu.__main__ import main
from amp_edu.course import classgrade, grade, nbgrader, notebook, nbtool
from amp_edu.course.limits import DEFAULT, NOTEBOOK_FACTOR, GradeLimits

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_validation():
    assert (DEFAULT.cell_s, DEFAULT.notebook_s, DEFAULT.start_s) == (300.0, 300.0 * NOTEBOOK_FACTOR, 60.0)
    assert GradeLimits(5).notebook_s == 5 * NOTEBOOK_FACTOR and GradeLimits(5, 7).notebook_s == 7
    for bad, err in [(dict(cell_s=0), ValueError), (dict(cell_s=-1), ValueError),
                     (dict(notebook_s=float("inf")), ValueError), (dict(start_s=float("nan")), ValueError),
                     (dict(cell_s="5"), TypeError), (dict(cell_s=True), TypeError), (dict(start_s=None), TypeError)]:
        with pytest.raises(err):
            GradeLimits(**bad)
    with pytest.raises(AttributeError):
        DEFAULT.cell_s = 1                                           # frozen


def test_every_runner_defaults_to_the_one_set():
    for fn in (grade.grade_notebook, classgrade.grade_file, classgrade.grade_class, classgrade.main,
               notebook.execute, notebook.run_in_place, nbgrader.write_course):
        assert inspect.signature(fn).parameters["limits"].default is DEFAULT, fn.__qualname__
    text = nbgrader.config_text()
    assert f"c.Execute.timeout = {int(DEFAULT.cell_s)}\n" in text
    assert f"c.Execute.startup_timeout = {int(DEFAULT.start_s)}\n" in text


def test_nbval_uses_the_same_cell_limit(request):
    """conftest.py hands nbval GradeLimits' cell limit; pyproject.toml states none of its own."""
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--nbval-cell-timeout" not in opts
    assert request.config.option.nbval_cell_timeout == DEFAULT.cell_s


def test_the_command_lines_take_their_defaults_from_it(capsys):
    with pytest.raises(SystemExit):
        main(["grade", "--help"])
    assert f"(default {DEFAULT.cell_s:g} s)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        nbtool.main(["run", "--help"])
    assert f"(default {DEFAULT.cell_s:g} s" in capsys.readouterr().out
    assert nbtool.main(["run", "x.ipynb", "--timeout", "0"]) in (2,)
