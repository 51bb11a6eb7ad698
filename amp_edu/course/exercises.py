"""Generate ``exercises/`` from ``solutions/`` — the solutions are the single source.

In a solution notebook the learner's part sits between two marker lines::

    def decode_fp16(bits):
        ### BEGIN SOLUTION
        ...worked solution...
        ### END SOLUTION

:func:`strip` replaces each such block by ``# YOUR CODE HERE`` and ``raise NotImplementedError()``
at the block's indentation (in a markdown cell, by ``YOUR ANSWER HERE``), and clears all outputs,
so the learner starts from a clean notebook. :func:`stale` lists exercises that no longer match
their solution (a test fails on it; ``make exercises`` fixes it).

Regenerating exercises is authoring work: it needs a *checkout* of the course (the repository,
with ``solutions/``), found by :func:`checkout_root`. A learner who installed the package with
``pip install .`` (or from a wheel) has only ``amp_edu`` itself — which is all that
``python -m amp_edu grade`` and ``doctor`` need — and gets a clear error here instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat

from . import ROOT, notebook
from .cells import BEGIN, END, check_cells
from .handout import cell_digest, checklist_text, from_solutions
from .nbgrader import to_nbgrader


def is_checkout(path) -> bool:
    """Is ``path`` the course repository (its ``pyproject.toml`` names amp_edu, with ``solutions/``
    and the ``amp_edu`` package beside it)?"""
    path = Path(path)
    try:
        toml = (path / "pyproject.toml").read_text()
    except OSError:
        return False
    return ('name = "amp_edu"' in toml and (path / "solutions").is_dir()
            and (path / "amp_edu" / "__init__.py").is_file())


def checkout_root(package_parent=None, cwd=None) -> Path:
    """The course checkout the authoring tools work in.

    Tried in order: the folder above the ``amp_edu`` package (``package_parent``, default
    :data:`amp_edu.course.ROOT`: the checkout itself in an editable install or a clone), then ``cwd`` (default
    the current folder) and each folder above it. Raises ``RuntimeError`` saying what to do when
    none is a checkout — the case of ``pip install .`` run by a learner.
    """
    package_parent = Path(package_parent or ROOT).resolve()
    cwd = Path(cwd or os.getcwd()).resolve()
    for candidate in (package_parent, cwd, *cwd.parents):
        if is_checkout(candidate):
            return candidate
    raise RuntimeError(
        f"this needs a checkout of the course repository (with solutions/), but amp_edu is installed "
        f"in {package_parent} and {cwd} is not inside a checkout: clone the repository, "
        f"`pip install -e .` in it, and run this from there. (`python -m amp_edu grade` and "
        f"`doctor` work without a checkout.)")


def _strip_source(source: str, markdown: bool) -> str:
    out, inside, indent = [], False, ""
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError(f"nested {BEGIN!r} in cell:\n{source}")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            if markdown:
                out.append(indent + "YOUR ANSWER HERE")
            else:
                out.append(indent + "# YOUR CODE HERE")
                out.append(indent + "raise NotImplementedError()")
            continue
        if stripped == END:
            if not inside:
                raise ValueError(f"{END!r} without {BEGIN!r} in cell:\n{source}")
            inside = False
            continue
        if not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{BEGIN!r} without {END!r} in cell:\n{source}")
    return "\n".join(out)


def strip(nb):
    """A copy of solution notebook ``nb`` with the solutions removed and outputs cleared."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    n_blocks = 0
    for cell in nb.cells:
        if cell.cell_type not in ("code", "markdown"):
            continue
        n_blocks += cell.source.count(BEGIN)
        cell.source = _strip_source(cell.source, cell.cell_type == "markdown")
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    if n_blocks == 0:
        raise ValueError("a solution notebook must mark at least one ### BEGIN SOLUTION block")
    nb.metadata.pop("widgets", None)
    return nb


def exercise(solution_path) -> "nbformat.NotebookNode":
    """The exercise made from the solution at ``solution_path``: :func:`strip`, plus

    * the notebook metadata ``{"amp_edu": {"exercise": "<NN_name>"}}`` by which the class grader
      recognises it whatever the learner renames the file to
      (:func:`amp_edu.course.handout.recognise`);
    * on every cell, the nbgrader role :func:`amp_edu.course.nbgrader.to_nbgrader` gives it, so a
      notebook a learner started from ``exercises/`` is graded by ``nbgrader autograde`` exactly
      like nbgrader's own release (without it nbgrader finds no answer and no test cell and scores
      a solved notebook 0). A solution with no check cell has nothing to autograde: no roles.
    """
    path = Path(solution_path)
    sol = notebook.read(path)
    nb = strip(sol)
    if check_cells(sol):
        for cell, graded in zip(nb.cells, to_nbgrader(sol).cells):
            cell.metadata["nbgrader"] = graded.metadata["nbgrader"]
    nb.metadata["amp_edu"] = {"exercise": path.stem}
    return nb


def expected_exercises(solutions_dir: Path | None = None) -> dict[str, str]:
    """``{filename: notebook JSON text}`` that ``exercises/`` should hold."""
    solutions_dir = Path(solutions_dir or checkout_root() / "solutions")
    return {p.name: nbformat.writes(exercise(p)) + "\n" for p in sorted(solutions_dir.glob("*.ipynb"))}


CHECKLIST = Path(__file__).with_name("checklist.py")      # the grader's list of the course's checks


def expected_checklist(solutions_dir: Path | None = None) -> str:
    """The text :data:`CHECKLIST` should hold (:func:`amp_edu.course.handout.checklist_text`)."""
    solutions_dir = Path(solutions_dir or checkout_root() / "solutions")
    given = {}
    for path in sorted(solutions_dir.glob("*.ipynb")):
        nb = exercise(path)
        checks = {i for i, _ in check_cells(nb)}
        given[path.name] = sorted({cell_digest(c.source) for i, c in enumerate(nb.cells)
                                   if c.cell_type == "code" and i not in checks and c.source.strip()})
    return checklist_text(from_solutions(solutions_dir), given)


def generate(solutions_dir: Path | None = None, exercises_dir: Path | None = None) -> list[Path]:
    """Write ``exercises/`` from ``solutions/``; removes exercises whose solution is gone. With the
    default folders, also writes the grader's checklist (:data:`CHECKLIST`)."""
    written = []
    if solutions_dir is None and exercises_dir is None:
        CHECKLIST.write_text(expected_checklist())
        written.append(CHECKLIST)
    exercises_dir = Path(exercises_dir or checkout_root() / "exercises")
    exercises_dir.mkdir(exist_ok=True)
    want = expected_exercises(solutions_dir)
    for name, text in want.items():
        path = exercises_dir / name
        path.write_text(text)
        written.append(path)
    for path in exercises_dir.glob("*.ipynb"):
        if path.name not in want:
            path.unlink()
    return written


def stale(solutions_dir: Path | None = None, exercises_dir: Path | None = None) -> list[str]:
    """Names of exercises that are missing, extra, or differ from what :func:`generate` writes
    (and, with the default folders, the checklist's path when it is stale)."""
    defaults = solutions_dir is None and exercises_dir is None
    exercises_dir = Path(exercises_dir or checkout_root() / "exercises")
    want = expected_exercises(solutions_dir)
    have = {p.name: p.read_text() for p in exercises_dir.glob("*.ipynb")}
    bad = sorted(n for n in want.keys() | have.keys() if want.get(n) != have.get(n))
    if defaults and (not CHECKLIST.is_file() or CHECKLIST.read_text() != expected_checklist()):
        bad.append(str(CHECKLIST.relative_to(CHECKLIST.parents[2])))
    return bad
