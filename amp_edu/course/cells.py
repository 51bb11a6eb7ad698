"""The two kinds of marked cell every course notebook has, and how to find them.

* **Solution blocks**: in ``solutions/``, the learner's part of an answer function sits between
  :data:`BEGIN` and :data:`END` lines; ``make exercises`` (:mod:`.exercises`) blanks them and
  :mod:`.nbgrader` turns the cells that hold them into nbgrader answer cells.
* **Check cells**: a code cell whose first line is ``# CHECK: <name>`` (:data:`CHECK_RE`) runs one
  course check; :func:`check_cells` finds them, the grader (:mod:`.grade`) grades them, and
  :mod:`.handout` records them as the solutions wrote them.
"""

from __future__ import annotations

import re

__all__ = ["BEGIN", "END", "CHECK_RE", "check_cells"]

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CHECK_RE = re.compile(r"^#\s*CHECK:\s*(?P<name>.+?)\s*$")


def check_cells(nb) -> list[tuple[int, str]]:
    """``(cell_index, check_name)`` for every check cell of ``nb``."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source:
            m = CHECK_RE.match(cell.source.splitlines()[0])
            if m:
                found.append((i, m.group("name")))
    return found
