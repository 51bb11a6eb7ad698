"""Shared fixtures, and the two test tiers.

* **fast** (``pytest -m "not slow"``): the library's unit tests, a few minutes on two cores;
* **course** (``pytest -m slow``): everything that runs notebooks, servers or other processes, or
  compiles — nbval over the lessons and solutions, kernels started by the grader, JupyterLab and
  the browser, multi-rank launches, fresh interpreters, the mutation sweep, Inductor.

nbval's notebook cells are marked ``slow`` here; a test module that starts kernels, servers or processes says
``pytestmark = pytest.mark.slow`` itself. ``make test`` runs both tiers, fast first; the course tier on
two pytest-xdist workers, each taking whole files (``--dist loadfile``: a notebook's cells stay in
order on one kernel), so a course test counts only the processes it started itself.
"""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))     # tests/labserver.py
# Library tests run at smoke sizes, like the notebooks.
os.environ.setdefault("AMP_EDU_SMOKE", "1")


def pytest_configure(config):
    """nbval's per-cell limit is the grader's (``amp_edu.course.limits.DEFAULT.cell_s``), unless
    given on the command line: one number for every runner of a notebook."""
    from amp_edu.course.limits import DEFAULT
    if getattr(config.option, "nbval_cell_timeout", None) == 2000:      # nbval's own default: not given
        config.option.nbval_cell_timeout = DEFAULT.cell_s


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":          # nbval: a notebook's cells
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def one_thread():
    """torch on one thread for the test, restored after: tiny models run faster without thread
    start-up costs, and a busy machine disturbs them less (``pytest.mark.usefixtures("one_thread")``)."""
    from amp_edu.device import num_threads

    with num_threads(1):
        yield


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """One ``make lab`` server for the whole session; yields ``(base_url, token)``."""
    import labserver
    try:
        with labserver.serve(tmp_path_factory.mktemp("lab")) as served:
            yield served
    except RuntimeError as exc:
        pytest.fail(str(exc))
