"""Notebooks as a learner hands them in, and a private copy of the package to grade them with
(shared by the grading tests: tests/course/test_grade_integrity.py, test_grade_attacks.py)."""

from __future__ import annotations

import compileall
import copy
import shutil
from pathlib import Path

import nbformat

from amp_edu.course import notebook

ROOT = Path(__file__).resolve().parents[1]


def copy_package(dest: Path) -> Path:
    shutil.copytree(ROOT / "amp_edu", dest / "amp_edu", ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(str(dest / "amp_edu"), quiet=1)
    return dest


def exercise(name: str):
    return notebook.read(ROOT / "exercises" / name)


def solved(name: str):
    """The exercise with the solution's answer cells typed in (what a learner who solved it hands in)."""
    nb, sol = exercise(name), notebook.read(ROOT / "solutions" / name)
    for cell, ref in zip(nb.cells, sol.cells):
        if "# YOUR CODE HERE" in cell.source:
            cell.source = "\n".join(ln for ln in ref.source.splitlines() if "### " not in ln)
    return nb


def with_cell(nb, code: str, after: int = 1):
    """``nb`` with a code cell ``code`` after its ``after``-th code cell (1: the setup cell)."""
    nb = copy.deepcopy(nb)
    idx = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"][after - 1]
    nb.cells.insert(idx + 1, nbformat.v4.new_code_cell(code))
    return nb
