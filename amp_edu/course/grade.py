"""Grade one learner notebook: ``make grade NB=exercises/01_number_formats.ipynb``.

A *check* is a code cell whose first line is ``# CHECK: <name>``; it calls a grader from
``amp_edu.checks`` that prints one ``PASS`` line or raises an ``AssertionError`` naming the input,
the expected and the actual answer, and a hint. The notebook runs top to bottom in a fresh kernel
(:class:`amp_edu.course.kernel.Kernel`), one cell at a time, and a cell that raises does not stop
the run — exactly like "Run All" with errors allowed. Each check ends with one status:

``pass``     the check cell ran without raising;
``fail``     the grader said the answer is wrong (an ``AssertionError``; the message has a hint);
``error``    the check cell raised anything else, or the kernel died before the check could run;
``timeout``  the check cell, or an earlier cell, was still running at its time limit.

Limits: each cell may run ``timeout`` seconds, the whole notebook ``notebook_timeout`` (by default
:data:`NOTEBOOK_FACTOR` × ``timeout``). A cell past its limit, or a kernel that dies (``os._exit``,
a segfault, the out-of-memory killer), ends the run: the kernel is killed and every check not yet
run is reported with the status and the cell that stopped it. Cells are numbered from 1 in notebook
order (markdown cells count), and quoted by their first line so an instructor can find them.

The learner's file is only read: the kernel runs in a temporary folder, and with ``amp_edu``
importable from it. :mod:`amp_edu.course.classgrade` grades many notebooks with this.
"""

from __future__ import annotations

import re
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import notebook
from .kernel import Kernel

CHECK_RE = re.compile(r"^#\s*CHECK:\s*(?P<name>.+?)\s*$")
STATUSES = ("pass", "fail", "error", "timeout")
DEFAULT_TIMEOUT = 300.0      # seconds per cell: the slowest exercise cell takes a few seconds on a CPU
NOTEBOOK_FACTOR = 4          # the default whole-notebook limit, in units of the per-cell limit
FAIL_ENAMES = {"AssertionError", "CheckFailed"}   # a grader's verdict (checks.core.CheckFailed)


class GradingInterrupted(RuntimeError):
    """The ``stop`` event was set (Ctrl-C / SIGTERM) while the notebook was being graded."""


@dataclass
class CheckResult:
    """One check of one notebook. ``cell`` is the check cell's 0-based index in ``nb.cells``;
    ``message`` the grader's full message (its PASS line, or the error / limit it hit)."""

    name: str
    cell: int
    ok: bool
    message: str
    status: str = ""

    def __post_init__(self):
        if not self.status:
            self.status = "pass" if self.ok else "fail"
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def detail(self) -> str:
        """One line for a table: a grader's ``hint:`` line when it has one, else the first line."""
        return first_line(self.message)


def first_line(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("hint:"):
            return "hint: " + ln[5:].strip()
    return lines[0] if lines else ""


def check_cells(nb) -> list[tuple[int, str]]:
    """``(cell_index, check_name)`` for every check cell of ``nb``."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source:
            m = CHECK_RE.match(cell.source.splitlines()[0])
            if m:
                found.append((i, m.group("name")))
    return found


def cell_label(nb, i: int) -> str:
    """``cell 5 (`while True: ...`)`` — how a report names cell ``i`` (0-based)."""
    head = next((ln.strip() for ln in nb.cells[i].source.splitlines() if ln.strip()), "")
    if len(head) > 40:
        head = head[:37] + "..."
    return f"cell {i + 1} (`{head}`)"


def _store_outputs(cell, run, count: int) -> None:
    """Put what the cell printed / raised into the notebook, as "Run All" would."""
    outs = []
    if run.stdout:
        outs.append(nbformat.v4.new_output("stream", name="stdout", text=run.stdout))
    if run.stderr:
        outs.append(nbformat.v4.new_output("stream", name="stderr", text=run.stderr))
    if run.status == "error":
        outs.append(nbformat.v4.new_output("error", ename=run.ename, evalue=run.evalue,
                                           traceback=run.traceback))
    cell.outputs = outs
    cell.execution_count = count if run.status in ("ok", "error") else None


def grade_notebook(nb, cwd=None, *, smoke: bool = False, timeout: float = DEFAULT_TIMEOUT,
                   notebook_timeout: float | None = None,
                   stop: threading.Event | None = None) -> list[CheckResult]:
    """Run ``nb`` (outputs are stored in it) and return one :class:`CheckResult` per check cell.

    ``cwd`` is the kernel's working folder (a fresh temporary one if ``None``). Raises
    ``ValueError`` if ``nb`` has no check cell, :class:`~amp_edu.course.kernel.KernelError` if
    the kernel does not start, :class:`GradingInterrupted` if ``stop`` is set meanwhile.
    """
    checks = dict(check_cells(nb))
    if not checks:
        raise ValueError("this notebook has no check cells (cells starting with '# CHECK: <name>')")
    if timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    budget = notebook_timeout if notebook_timeout is not None else NOTEBOOK_FACTOR * timeout
    if budget <= 0:
        raise ValueError(f"notebook_timeout must be a positive number of seconds, got {budget!r}")
    with tempfile.TemporaryDirectory(prefix="amp_edu_grade_") as tmp:
        return _run(nb, cwd or tmp, checks, smoke=smoke, timeout=timeout, budget=budget, stop=stop)


def _run(nb, cwd, checks, *, smoke, timeout, budget, stop) -> list[CheckResult]:
    t0 = time.monotonic()
    results: dict[int, CheckResult] = {}
    halted: tuple[str, str] | None = None      # (status, why) for the checks that never ran
    last_error = ""                            # the latest non-check cell that raised
    env = {"AMP_EDU_SMOKE": "1" if smoke else "0"}
    with Kernel(cwd, env=env, stop=stop, start_timeout=min(60.0, budget)) as k:
        count = 0
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            left = budget - (time.monotonic() - t0)
            limit = min(timeout, left)
            if limit <= 0:
                halted = ("timeout", f"the notebook's {budget:g} s limit was reached before "
                                     f"{cell_label(nb, i)}")
                break
            count += 1
            run = k.run(cell.source, timeout=limit)
            _store_outputs(cell, run, count)
            where = cell_label(nb, i)
            if run.status == "stopped":
                raise GradingInterrupted(f"stopped while running {where}")
            if run.status == "timeout":
                which = (f"the {timeout:g} s limit per cell" if limit == timeout
                         else f"the notebook's {budget:g} s limit")
                why = (f"{where} did not finish within {which}; kernel killed\n"   # no timing on line 1:
                       f"(it was still running after {run.seconds:.1f} s)")             # reports stay equal
                if i in checks:
                    results[i] = CheckResult(checks[i], i, False, why, "timeout")
                halted = ("timeout", f"{where} timed out ({which})")
                break
            if run.status == "died":
                why = f"kernel died in {where}: {run.exit_detail}"
                if i in checks:
                    msg = why + (f"\n{run.stderr}" if run.stderr else "")
                    results[i] = CheckResult(checks[i], i, False, msg, "error")
                halted = ("error", why)
                break
            if i not in checks:
                if run.status == "error":
                    last_error = f"{where} raised {run.ename}: {first_line(run.evalue)}"
                continue
            if run.status == "ok":
                results[i] = CheckResult(checks[i], i, True, run.stdout.strip(), "pass")
            else:
                msg = f"{run.ename}: {run.evalue}"
                if run.ename == "NameError" and last_error:
                    msg += f"\n(an earlier cell failed: {last_error})"
                status = "fail" if run.ename in FAIL_ENAMES else "error"
                results[i] = CheckResult(checks[i], i, False, msg, status)
    out = []
    for i, name in checks.items():
        if i in results:
            out.append(results[i])
        else:
            status, why = halted or ("error", "did not run")
            out.append(CheckResult(name, i, False, f"not run: {why}", status))
    return out


def grade(path, *, smoke: bool = False, timeout: float = DEFAULT_TIMEOUT,
          notebook_timeout: float | None = None) -> list[CheckResult]:
    """Grade the notebook file at ``path`` (only read; the kernel runs in a temporary folder)."""
    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"NB must be an existing .ipynb file, got {str(path)!r}")
    return grade_notebook(notebook.read(path), smoke=smoke, timeout=timeout,
                          notebook_timeout=notebook_timeout)


def report(results: list[CheckResult]) -> str:
    """Today's per-check report: ``[PASS] name`` or ``[FAIL] name`` + the indented message."""
    lines = []
    for r in results:
        mark = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "timeout": "TIMEOUT"}[r.status]
        lines.append(f"[{mark}] {r.name}")
        if not r.ok:
            lines.extend("       " + ln for ln in r.message.splitlines())
    n_ok = sum(r.ok for r in results)
    lines.append(f"{n_ok}/{len(results)} checks passed")
    return "\n".join(lines)
