"""Shared fixtures, and the hook that applies the two test tiers.

* **fast** (``pytest -m "not slow"``, ``make test-fast``): the library's unit tests, in-process;
* **course** (``pytest -m slow``, ``make test-course``): everything that runs notebooks, kernels,
  servers or other processes, or compiles -- nbval over the lessons and solutions, kernels started
  by the grader, JupyterLab and the browser, multi-rank launches, fresh interpreters, the mutation
  sweep, Inductor.

Which test is in which tier is decided in one place, ``COURSE_TIER`` in ``tests/tiers.py``; the
collection hook here only applies it. ``make test`` runs both tiers, fast first; the course tier on
two pytest-xdist workers, each taking whole files (``--dist loadfile``: a notebook's cells stay in
order on one kernel), so a course test counts only the processes it started itself and keeps its
time limits loose enough for a second busy worker.

The tests mirror the package: ``tests/<package>/test_<topic>.py`` for ``amp_edu/<package>/``, and
``tests/test_<module>.py`` for a top-level module. Test files are imported with pytest's
``--import-mode=importlib`` (so two folders may each hold a ``test_widgets.py``-like name), and
helpers shared by several test files (``checkhelp``, ``handins``, ``tiers``, ...) sit in ``tests/``,
which is on ``sys.path``.
"""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))     # tests/labserver.py, tiers.py, ...
import tiers  # noqa: E402
# Library tests run at smoke sizes, like the notebooks.
os.environ.setdefault("AMP_EDU_SMOKE", "1")


@pytest.hookimpl(tryfirst=True)          # before ``-m`` deselects by the marker
def pytest_collection_modifyitems(config, items):
    tiers.mark(config, items)


def pytest_configure(config):
    """nbval's per-cell limit is the grader's (``amp_edu.course.limits.DEFAULT.cell_s``), unless
    given on the command line: one number for every runner of a notebook."""
    from amp_edu.course.limits import DEFAULT
    if getattr(config.option, "nbval_cell_timeout", None) == 2000:      # nbval's own default: not given
        config.option.nbval_cell_timeout = DEFAULT.cell_s


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
