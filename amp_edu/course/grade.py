"""Grade a learner's exercise notebook: ``make grade NB=exercises/01_number_formats.ipynb``.

The notebook is run top to bottom in a fresh kernel (errors do not stop it). Every code cell whose
first line is ``# CHECK: <name>`` is a check; it passed if it ran without error. The report lists
each check with the grader's message (input, expected, got, hint) and the exit status is non-zero
if any check failed or did not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import notebook

CHECK_RE = re.compile(r"^#\s*CHECK:\s*(?P<name>.+?)\s*$")


@dataclass
class CheckResult:
    name: str
    cell: int
    ok: bool
    message: str


def check_cells(nb) -> list[tuple[int, str]]:
    """``(cell_index, check_name)`` for every check cell of ``nb``."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source:
            m = CHECK_RE.match(cell.source.splitlines()[0])
            if m:
                found.append((i, m.group("name")))
    return found


def _cell_result(cell) -> tuple[bool, str]:
    text = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return False, f"{out.get('ename')}: {out.get('evalue')}"
        if out.get("output_type") == "stream":
            text.append(out.get("text", ""))
    if cell.get("execution_count") is None:
        return False, "did not run"
    return True, "".join(text).strip()


def grade_notebook(nb, cwd, *, smoke: bool = False, timeout: int = 600) -> list[CheckResult]:
    """Execute ``nb`` in place and return one :class:`CheckResult` per check cell."""
    checks = check_cells(nb)
    if not checks:
        raise ValueError("this notebook has no check cells (cells starting with '# CHECK: <name>')")
    notebook.execute(nb, cwd, allow_errors=True, timeout=timeout,
                     env={"AMP_EDU_SMOKE": "1" if smoke else "0"})
    results = []
    for idx, name in checks:
        ok, msg = _cell_result(nb.cells[idx])
        results.append(CheckResult(name, idx, ok, msg))
    return results


def grade(path, *, smoke: bool = False, timeout: int = 600) -> list[CheckResult]:
    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"NB must be an existing .ipynb file, got {str(path)!r}")
    return grade_notebook(notebook.read(path), path.resolve().parent, smoke=smoke, timeout=timeout)


def report(results: list[CheckResult]) -> str:
    lines = []
    for r in results:
        mark = "PASS" if r.ok else "FAIL"
        lines.append(f"[{mark}] {r.name}")
        if not r.ok:
            lines.extend("       " + ln for ln in r.message.splitlines())
    n_ok = sum(r.ok for r in results)
    lines.append(f"{n_ok}/{len(results)} checks passed")
    return "\n".join(lines)
