"""tests/cellgraph.py, the def-use graph that picks which cells of a lesson the browser test runs."""

import json

import pytest

from amp_edu.course.lessons import LESSONS
from cellgraph import binds, browser_cells, needed, reads, widget_cells  # noqa: E402


def test_binds_and_reads():
    src = "import numpy as np\nfrom a.b import c\nx, (y, z) = 1, (2, 3)\nm.w = 4\nd['k'] = 5\ndef f():\n    return q\n"
    assert binds(src) == {"np", "c", "x", "y", "z", "m", "d", "f"}
    assert reads(src) == {"m", "d", "q"}                  # q: read when f is called; builtins never count
    assert reads("print(len(v))") == {"v"}
    assert binds("!ls\nr = 1") == {"r"} and binds("%time r = 1") == set()   # inside a magic: not seen


def test_needed_follows_the_latest_binding_transitively():
    cells = ["import torch\na = 1", "b = a + 1", "a = 10", "c = b * a", "unused = 3", "show(c)"]
    assert needed(cells, [5]) == [0, 1, 2, 3, 5]          # c <- 3; b <- 1 (a <- 0); a <- 2
    assert needed(["model = M()", "model.fc = L()", "w = model"], [2]) == [0, 1, 2]   # a change counts
    with pytest.raises(ValueError):
        needed(cells, [6])


def test_every_lesson_runs_its_widget_cells_and_its_first_cell():
    for lesson in LESSONS:
        nb = json.loads(open(lesson.notebook).read())
        chosen, widgets = browser_cells(nb), widget_cells(nb)
        assert widgets and set(widgets) <= set(chosen) and chosen[0] == 0, lesson.stem
