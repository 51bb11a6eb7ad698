"""Installing the course into a hosted notebook runtime that already has its own torch.

Colab, Kaggle, SageMaker and most JupyterHubs come with a torch built for their GPU and CUDA. The
course must go in *beside* that torch, never replace it: a ``pip install`` that pulls another torch
downloads gigabytes and can leave a CPU-only or mismatched-CUDA build behind. pip keeps an installed
package when it already satisfies the requirement (``torch>=2.4`` here), but another dependency that
asked for a different torch would make it swap; a *constraint* ``torch==<the installed version>``
forbids that. The version is the one pip knows (``importlib.metadata.version("torch")``, e.g.
``2.14.1``), not ``torch.__version__``, which can carry a build tag pip never saw (``2.14.1+cu130``
from a wheel named ``torch-2.14.1``: that constraint matches nothing and pip gives up). Constrained,
pip either keeps this torch or stops with a resolution error that names the package that wanted
another one.

:data:`INSTALL_CELL` is that one cell, as the README and every page of the course site show it.
It installs the course's folder in editable mode (so ``solutions/`` and the graders stay beside it)
and puts the folder on ``sys.path``, so the running kernel imports ``amp_edu`` without a restart.
``make test-compat`` runs it in a fresh environment that holds only torch 2.14.1 and checks that the
torch is the same afterwards (:func:`torch_kept`).
"""

from __future__ import annotations

__all__ = ["INSTALL_CELL", "install_cell", "torch_kept"]

INSTALL_CELL = '''\
# Once per runtime: install the course beside this runtime's torch, which pip must keep.
COURSE = ".."  # the course's folder: ".." from its notebooks/, else where you put it
import os, subprocess, sys, tempfile
from importlib.metadata import version  # pip's version of torch (not torch.__version__)
keep = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
keep.write(f"torch=={version('torch')}\\n"); keep.close()  # a constraint: no other torch
pip = [sys.executable, "-m", "pip", "install", "-q", "-c", keep.name, "-e", COURSE]
subprocess.run(pip, check=True)
sys.path.insert(0, os.path.abspath(COURSE))  # importable now, without a kernel restart
print(f"amp_edu installed beside torch {version('torch')}")
'''


def install_cell(course: str = "..") -> str:
    """:data:`INSTALL_CELL` with ``COURSE`` set to ``course`` (a path, as a string)."""
    if not isinstance(course, str) or not course.strip():
        raise TypeError(f"course must be a non-empty path string, got {course!r}")
    return INSTALL_CELL.replace('COURSE = ".."', f"COURSE = {course!r}", 1)


def torch_kept(before: str, after: str) -> None:
    """Raise ``AssertionError`` unless the torch version ``after`` the install is ``before``'s."""
    for name, v in (("before", before), ("after", after)):
        if not isinstance(v, str) or not v:
            raise TypeError(f"{name} must be a torch version string such as '2.14.1', got {v!r}")
    if before != after:
        raise AssertionError(f"the install replaced the runtime's torch: {before} -> {after}")
