"""How long a notebook may run: one set of limits for grading, storing lessons and nbgrader.

Every place that runs a notebook — ``python -m amp_edu grade`` (one notebook or a class), the
nbgrader export's ``c.Execute.timeout``, ``nbtool run`` (storing a lesson executed) — takes its
limits from one :class:`GradeLimits`, and its defaults from :data:`DEFAULT`::

    GradeLimits()                        # cell_s=300, notebook_s=1200, start_s=60
    GradeLimits(cell_s=30)               # notebook_s is then 4 x 30 = 120 unless given
    GradeLimits(cell_s=5, notebook_s=8)  # a tiny budget for tests

``cell_s`` bounds one cell, ``notebook_s`` the whole notebook (a notebook of many slow cells
cannot run for ever), ``start_s`` how long a kernel may take to answer after it is started. The
defaults fit the course: the slowest exercise or lesson cell takes well under a minute on a laptop
CPU, and a lesson at default size under three minutes in all (CONTRIBUTING.md), so 300 s per cell
leaves room for a slow machine without letting a hung cell cost more than five minutes.

pytest's nbval plugin cannot read Python objects: its ``--nbval-cell-timeout`` is written in
``pyproject.toml``, and ``tests/course/test_grade_limits.py`` compares it with ``cell_s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..validate import check_number

NOTEBOOK_FACTOR = 4          # notebook_s defaults to this many cell limits


@dataclass(frozen=True)
class GradeLimits:
    """Seconds a notebook may run: per cell, for the whole notebook, and for its kernel to start.

    ``notebook_s=None`` means :data:`NOTEBOOK_FACTOR` × ``cell_s``. Wrong types raise
    ``TypeError``, values that are not positive and finite ``ValueError``.
    """

    cell_s: float = 300.0
    notebook_s: float | None = field(default=None)
    start_s: float = 60.0

    def __post_init__(self):
        cell = check_number(self.cell_s, "cell_s", positive=True)
        object.__setattr__(self, "cell_s", cell)
        nb = self.notebook_s if self.notebook_s is not None else NOTEBOOK_FACTOR * cell
        object.__setattr__(self, "notebook_s", check_number(nb, "notebook_s", positive=True))
        object.__setattr__(self, "start_s", check_number(self.start_s, "start_s", positive=True))


DEFAULT = GradeLimits()
