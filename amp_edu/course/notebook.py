"""Run notebooks in *this* Python environment, and move them to and from percent-format scripts.

Two kernel runners, on purpose: storing a lesson executed (:func:`execute`, ``nbtool run``) uses
nbclient, because a stored lesson needs every output kind Jupyter has — figures and rich
``display_data``, ``execute_result``, ``update_display_data``/``clear_output`` and the widget state
saved in the notebook's metadata, none of which the grader keeps. Grading uses
:class:`amp_edu.course.kernel.JupyterKernel`, because a learner's notebook needs what nbclient does not
give: a sandbox, a process tree that is killed and verified gone, output caps, a stop event polled
every 0.1 s, and the ``user_expressions`` the integrity guard evaluates checks with. Both take
their limits from one :class:`~amp_edu.course.limits.GradeLimits`.

The lessons are stored as ``.ipynb`` — the single source. To edit one as text::

    python -m amp_edu.course.nbtool topy notebooks/01_number_formats.ipynb > /tmp/01.py
    # ... edit /tmp/01.py (``# %%`` code cells, ``# %% [markdown]`` cells with ``# `` lines) ...
    python -m amp_edu.course.nbtool frompy /tmp/01.py notebooks/01_number_formats.ipynb
    python -m amp_edu.course.nbtool run notebooks/01_number_formats.ipynb   # store it executed
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import nbformat

from .limits import DEFAULT, GradeLimits

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def _kernel_manager():
    """A kernel manager that starts ipykernel with this interpreter, whatever kernelspecs are installed."""
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class _CurrentEnv(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):  # noqa: D401 - jupyter API
            return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES,
                              **ipykernel.kernelspec.get_kernel_dict())

    return KernelManager(kernel_name="python3", kernel_spec_manager=_CurrentEnv())


def execute(nb, cwd: str | os.PathLike, *, allow_errors: bool = False, limits: GradeLimits = DEFAULT,
            env: dict | None = None):
    """Execute notebook ``nb`` (a NotebookNode) in place with this environment's Python.

    Each cell may run ``limits.cell_s`` seconds and all of them ``limits.notebook_s`` (a cell
    started late gets what is left); the kernel ``limits.start_s`` to start. ``env`` entries are
    set in the kernel's environment (e.g. ``{"AMP_EDU_SMOKE": "1"}``).
    """
    from nbclient import NotebookClient

    if not isinstance(limits, GradeLimits):
        raise TypeError(f"limits must be a GradeLimits, got {type(limits).__name__}")
    t0 = time.monotonic()

    def cell_limit(cell) -> int:          # nbclient wants whole seconds
        left = limits.notebook_s - (time.monotonic() - t0)
        return max(1, math.ceil(min(limits.cell_s, left)))

    km = _kernel_manager()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        client = NotebookClient(nb, km=km, timeout_func=cell_limit, allow_errors=allow_errors,
                                startup_timeout=math.ceil(limits.start_s),
                                resources={"metadata": {"path": str(cwd)}})
        client.execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def error_outputs(nb):
    """``(cell_index, ename, evalue)`` for every stored error output."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append((i, out.get("ename"), out.get("evalue")))
    return found


def from_percent(text: str):
    """Build a notebook from a percent-format script (``# %%`` / ``# %% [markdown]`` cells)."""
    cells, kind, buf = [], None, []

    def flush():
        if kind is None:
            return
        lines = list(buf)
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if kind == "markdown":
            lines = [ln[2:] if ln.startswith("# ") else ln[1:] if ln.startswith("#") else ln for ln in lines]
            cells.append(nbformat.v4.new_markdown_cell("\n".join(lines)))
        else:
            cells.append(nbformat.v4.new_code_cell("\n".join(lines)))

    for line in text.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, buf = ("markdown" if "[markdown]" in line else "code"), []
        else:
            buf.append(line)
    flush()
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def to_percent(nb) -> str:
    """The inverse of :func:`from_percent` (outputs are dropped)."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            body = "\n".join(("# " + ln) if ln else "#" for ln in cell.source.splitlines())
            parts.append("# %% [markdown]\n" + body)
        elif cell.cell_type == "code":
            parts.append("# %%\n" + cell.source)
    return "\n\n".join(parts) + "\n"


def read(path) -> "nbformat.NotebookNode":
    return nbformat.read(str(path), as_version=4)


def write(nb, path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def run_in_place(path, *, smoke: bool = False, limits: GradeLimits = DEFAULT) -> list:
    """Execute the notebook at ``path`` and store it executed; returns its error outputs."""
    nb = read(path)
    env = {"AMP_EDU_SMOKE": "1" if smoke else "0"}
    execute(nb, Path(path).resolve().parent, allow_errors=True, limits=limits, env=env)
    write(nb, path)
    errs = [e for e in error_outputs(nb) if "NBVAL_RAISES_EXCEPTION" not in nb.cells[e[0]].source]
    return errs
