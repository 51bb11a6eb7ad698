"""Grade one learner notebook: ``make grade NB=exercises/01_number_formats.ipynb``.

A *check* is a code cell whose first line is ``# CHECK: <name>``; it calls a grader from
``amp_edu.checks`` that prints one ``PASS`` line or raises an ``AssertionError`` naming the input,
the expected and the actual answer, and a hint. The notebook runs top to bottom in a fresh kernel
(:class:`amp_edu.course.kernel.JupyterKernel`), one cell at a time, and a cell that raises does not stop
the run — exactly like "Run All" with errors allowed. Each check ends with one status:

``pass``      the check ran without raising;
``fail``      the grader said the answer is wrong (an ``AssertionError``; the message has a hint);
``error``     the check raised anything else, the kernel died before it could run, or it is missing;
``timeout``   the check cell, or an earlier cell, was still running at its time limit;
``tampered``  the notebook changed what the checks run (:mod:`amp_edu.course.integrity`): never a pass.

**A course exercise** (``exercise`` given: the lesson's :class:`~amp_edu.course.handout.CourseCheck`
list) is graded with the course's checks, and **decided outside the kernel**. For each check cell
the grader draws a fresh seed; the judge (:mod:`amp_edu.course.judge`, a process that never runs
learner code) writes that seed's cases to a file; the kernel runs only the check's *plan* on the
learner's functions (evaluated through the protocol's ``user_expressions``, whatever the cell now
says) and writes what they returned, by value (:mod:`amp_edu.plans.byvalue`); the judge reads it
and decides. The kernel imports a copy of the package without the checks
(:mod:`amp_edu.course.kernelpackage`), so no expected value is ever in the learner's process.
What the exercise forbids (:mod:`amp_edu.checks.rules`) is looked for in every code cell, and a use
fails the check it belongs to. Around each check the guard's snapshots (:mod:`amp_edu.course.integrity`)
are compared with the first: a change marks the notebook ``tampered`` — a report, since no verdict
depends on the kernel. A check cell that differs from the course's is reported ``edited``; a
check of the exercise that the notebook lacks is an ``error`` naming it; a ``# CHECK:`` line that
is not one of the exercise's is run as ordinary code and noted. **An instructor's own exercise**
(``exercise=None``) runs its check cells as they are, in the kernel.

Limits (:class:`~amp_edu.course.limits.GradeLimits`): each cell may run ``cell_s`` seconds, the
whole notebook ``notebook_s``. A cell past its limit, or a kernel that dies (``os._exit``, a
segfault, the out-of-memory killer), ends the run: the kernel is killed and every check not yet run
is reported with the status and the cell that stopped it. Cells are numbered from 1 in notebook
order (markdown cells count), and quoted by their first line so an instructor can find them.

The learner's file is only read: the kernel runs in ``cwd`` (a temporary folder by default).
:mod:`amp_edu.course.classgrade` grades many notebooks with this.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass, field

import nbformat

from ..checks.rules import grader_internals, violations
from . import handout, integrity, kernelpackage
from .judge import Judge, JudgeError
from . import ROOT
from .cells import check_cells
from .kernel import JupyterKernel, KernelError
from .limits import DEFAULT, GradeLimits
from .sandbox import Isolation

STATUSES = ("pass", "fail", "error", "timeout", "tampered")
FAIL_ENAMES = {"AssertionError", "CheckFailed"}   # a grader's verdict (checks.core.CheckFailed)
EDITED_NOTE = "this check cell had been edited; it was graded with the course's own version"
MISSING = "the check cell `# CHECK: {name}` is missing from this notebook"


class GradingInterrupted(RuntimeError):
    """The ``stop`` event was set (Ctrl-C / SIGTERM) while the notebook was being graded."""


@dataclass
class CheckResult:
    """One check of one notebook. ``cell`` is the check cell's 0-based index in ``nb.cells``
    (-1 when the cell is missing); ``message`` the grader's full message (its PASS line, or the
    error / limit it hit); ``edited``: the cell differed from the course's and was not run as written."""

    name: str
    cell: int
    ok: bool
    message: str
    status: str = ""
    edited: bool = False
    was: str = ""          # once tampered: the status and detail the check itself gave

    def __post_init__(self):
        if not self.status:
            self.status = "pass" if self.ok else "fail"
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def detail(self) -> str:
        """One line for a table: a grader's ``hint:`` line when it has one, else the first line;
        prefixed ``edited check restored:`` when the cell had been edited."""
        line = first_line(self.message)
        return f"edited check restored: {line}" if self.edited else line


@dataclass
class Graded:
    """What grading one notebook found: the checks, what was tampered with, and notes."""

    checks: list[CheckResult] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)     # what the notebook changed (→ tampered)
    notes: list[str] = field(default_factory=list)        # worth telling, not a grade
    leftovers: list[str] = field(default_factory=list)    # processes the notebook left running

    def mark_tampered(self, findings: list[str]) -> None:
        """Add ``findings``; then every check is ``tampered``, its message saying what was found
        and what the check itself gave."""
        self.findings += [f for f in findings if f not in self.findings]
        if not self.findings:
            return
        what = "; ".join(self.findings)
        for c in self.checks:
            if c.status != "tampered":
                c.was = f"{c.status}: {first_line(c.message)}"
            c.status, c.ok = "tampered", False
            c.message = f"tampered: {what}\n(the check itself: {c.was})"


def first_line(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("hint:"):
            return "hint: " + ln[5:].strip()
    return lines[0] if lines else ""


def cell_label(nb, i: int) -> str:
    """``cell 5 (`while True: ...`)`` — how a report names cell ``i`` (0-based)."""
    head = next((ln.strip() for ln in nb.cells[i].source.splitlines() if ln.strip()), "")
    if len(head) > 40:
        head = head[:37] + "..."
    return f"cell {i + 1} (`{head}`)"


def _store_outputs(cell, run, count: int, error: dict | None = None) -> None:
    """Put what the cell printed / raised into the notebook, as "Run All" would."""
    outs = []
    if run.stdout:
        outs.append(nbformat.v4.new_output("stream", name="stdout", text=run.stdout))
    if run.stderr:
        outs.append(nbformat.v4.new_output("stream", name="stderr", text=run.stderr))
    err = error or ({"ename": run.ename, "evalue": run.evalue, "traceback": run.traceback}
                    if run.status == "error" else None)
    if err:
        outs.append(nbformat.v4.new_output("error", ename=err.get("ename", ""), evalue=err.get("evalue", ""),
                                           traceback=err.get("traceback", [])))
    cell.outputs = outs
    cell.execution_count = count if run.status in ("ok", "error") else None


def grade_notebook(nb, cwd=None, *, exercise: dict[str, handout.CourseCheck] | None = None,
                   limits: GradeLimits = DEFAULT, smoke: bool = False,
                   stop: threading.Event | None = None, isolation: Isolation | None = None,
                   package_root=None, judge: Judge | None = None) -> Graded:
    """Run ``nb`` (outputs are stored in it) and grade it; see the module docstring.

    ``exercise``: the course checks of the exercise ``nb`` is (``None``: grade its own check cells).
    ``cwd`` is the kernel's working folder (a fresh temporary one if ``None``); ``isolation`` and
    ``package_root`` are passed to :class:`~amp_edu.course.kernel.JupyterKernel` (for a course exercise,
    ``None`` builds a kernel package without the checks for this notebook); ``judge`` decides the
    course checks (``None``: a judge process for this notebook). Raises ``ValueError`` if
    there is nothing to grade, :class:`~amp_edu.course.kernel.KernelError` if the kernel does not
    start, :class:`GradingInterrupted` if ``stop`` is set meanwhile.
    """
    if not isinstance(limits, GradeLimits):
        raise TypeError(f"limits must be a GradeLimits, got {type(limits).__name__}")
    if exercise is None and not check_cells(nb):
        raise ValueError("this notebook has no check cells (cells starting with '# CHECK: <name>')")
    if exercise is not None and not exercise:
        raise ValueError("exercise must name at least one course check")
    with tempfile.TemporaryDirectory(prefix="amp_edu_grade_") as tmp:
        if exercise is not None and package_root is None:
            package_root = kernelpackage.build(os.path.join(tmp, "package"), ROOT)
        own_judge = judge is None and exercise is not None
        if own_judge:
            judge = Judge(env={"AMP_EDU_SMOKE": "1" if smoke else "0"})
        try:
            return _Run(nb, str(cwd or os.path.join(tmp, "work")), exercise, limits, smoke, stop, isolation,
                        package_root, judge).go()
        finally:
            if own_judge:
                judge.close()


class _Run:
    """One notebook's grading (the state the cell loop shares)."""

    def __init__(self, nb, cwd, exercise, limits, smoke, stop, isolation, package_root, judge):
        self.nb, self.cwd, self.exercise, self.limits = nb, cwd, exercise, limits
        self.smoke, self.stop, self.isolation, self.package_root = smoke, stop, isolation, package_root
        self.judge = judge
        os.makedirs(cwd, exist_ok=True)
        self.out = Graded()
        self.results: dict[int, CheckResult] = {}
        self.halted: tuple[str, str] | None = None       # (status, why) for the checks that never ran
        self.last_error = ""                             # the latest non-check cell that raised
        self.token = secrets.token_hex(12)
        self.handle = integrity.HANDLE + self.token
        self.base: dict | None = None
        self.t0 = time.monotonic()

    # -- which cells are checks ----------------------------------------------------------------
    def _checks(self) -> dict[int, str]:
        found = dict(check_cells(self.nb))
        if self.exercise is None:
            return found
        ours, seen = {}, set()
        for i, name in found.items():
            if name in self.exercise and name not in seen:
                ours[i] = name
                seen.add(name)
            else:
                what = (f"a second `# CHECK: {name}`" if name in seen
                        else f"`# CHECK: {name}` is not one of this exercise's checks")
                self.out.notes.append(f"{cell_label(self.nb, i)}: {what}; run as ordinary code, not graded")
        return ours

    def go(self) -> Graded:
        checks = self._checks()
        env = {"AMP_EDU_SMOKE": "1" if self.smoke else "0"}
        start = min(self.limits.start_s, self.limits.notebook_s)
        with JupyterKernel(self.cwd, env=env, stop=self.stop, start_timeout=start, isolation=self.isolation,
                    package_root=self.package_root) as k:
            if self.exercise is not None:
                self._install(k)
            self._cells(k, checks)
        self.out.leftovers = list(k.leftovers)
        if self.out.leftovers:
            self.out.notes.append(f"the notebook left {len(self.out.leftovers)} process(es) running, "
                                  f"killed: {', '.join(self.out.leftovers)}")
        for i, name in checks.items():
            if i in self.results:
                self.out.checks.append(self.results[i])
            else:
                status, why = self.halted or ("error", "did not run")
                self.out.checks.append(CheckResult(name, i, False, f"not run: {why}", status,
                                                   edited=self._edited(i, name)))
        if self.exercise is not None:
            present = set(checks.values())
            self.out.checks += [CheckResult(n, -1, False, MISSING.format(name=n), "error")
                                for n in self.exercise if n not in present]
            self._rules(checks)
        self.out.mark_tampered([])
        return self.out

    def _edited(self, i: int, name: str) -> bool:
        return self.exercise is not None and handout.is_edited(self.nb.cells[i].source, self.exercise[name])

    # -- the exercise's rules ------------------------------------------------------------------
    def _rules(self, checks: dict[int, str]) -> None:
        """A use of something the exercise forbids fails the check whose rule it breaks."""
        from ..checks import registry        # here, not at import: grading one lesson loads no other's checks
        sources = [(cell_label(self.nb, i), c.source) for i, c in enumerate(self.nb.cells)
                   if c.cell_type == "code" and i not in checks]
        for name, ref in self.exercise.items():
            rules = registry.check(ref.module, ref.function).rules
            found = violations(sources, rules)
            result = next((r for r in self.out.checks if r.name == name), None)
            if found and result is not None and result.status in ("pass", "fail"):
                result.ok, result.status = False, "fail"
                result.message = (f"FAIL {name}\n  rule:     {found[0]}\n"
                                  f"  hint:     the exercise forbids this ({found[0]}): write it yourself\n"
                                  f"(the values themselves: {first_line(result.message)})")
        given = handout.given_cells()
        written = [(where, src) for (where, src) in sources if handout.cell_digest(src) not in given]
        self.out.mark_tampered(grader_internals(written, kernelpackage.exercise_names()))

    # -- the guard -----------------------------------------------------------------------------
    def _install(self, k: JupyterKernel) -> None:
        code = (f"__import__('amp_edu.course.integrity', fromlist=['install'])"
                f".install(get_ipython(), {self.token!r})")
        run = k.run(code, timeout=self._left(), store_history=False,
                    expressions={"snapshot": f"{self.handle}.snapshot()"})
        if run.status != "ok":
            raise KernelError(f"the grader could not set up the course's checks in the kernel "
                              f"({run.status}): {run.ename or run.exit_detail}: {first_line(run.evalue)}")
        reply = run.expressions.get("snapshot") or {}
        self.base = self._snapshot(reply)
        if self.base is None:
            raise KernelError("the grader could not take its first snapshot in the kernel: "
                              f"{reply.get('ename', 'no answer')}: {first_line(reply.get('evalue', ''))}")

    def _snapshot(self, reply: dict | None) -> dict | None:
        if not reply or reply.get("status") != "ok":
            return None
        try:
            return json.loads(ast.literal_eval(reply["data"]["text/plain"]))
        except (ValueError, SyntaxError, KeyError, TypeError):
            return None

    def _verify(self, run) -> None:
        """Compare the snapshots taken around a check with the first one (on the grader's side)."""
        for when in ("before", "after"):
            snap = self._snapshot(run.expressions.get(when))
            if snap is None:
                reply = run.expressions.get(when) or {}
                self.out.mark_tampered([f"the grader's snapshot {when} the check failed "
                                        f"({reply.get('ename', 'no answer')}: {first_line(reply.get('evalue', ''))})"])
            else:
                self.out.mark_tampered(integrity.changes(self.base, snap))

    # -- the cells -----------------------------------------------------------------------------
    def _left(self) -> float:
        return min(self.limits.cell_s, self.limits.notebook_s - (time.monotonic() - self.t0))

    def _cells(self, k: JupyterKernel, checks: dict[int, str]) -> None:
        count = 0
        for i, cell in enumerate(self.nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            limit = self._left()
            if limit <= 0:
                self.halted = ("timeout", f"the notebook's {self.limits.notebook_s:g} s limit was reached "
                                          f"before {cell_label(self.nb, i)}")
                return
            count += 1
            course = self.exercise is not None and i in checks
            judged = None
            if course:
                run, judged = self._course_check(k, i, checks[i], limit)
                if run is None:
                    continue
            else:
                run = k.run(cell.source, timeout=limit)
            verdict = run.expressions.get("check") if course and run.status == "ok" else None
            _store_outputs(cell, run, count, verdict if verdict and verdict.get("status") == "error" else None)
            if judged is not None:
                cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=judged["message"] + "\n"))
            if not self._outcome(i, checks, run, limit, verdict, judged):
                return
            if course and run.status == "ok":
                self._verify(run)

    def _course_check(self, k: JupyterKernel, i: int, name: str, limit: float):
        """Run check ``name``'s plan in the kernel between two snapshots, and have the judge decide:
        ``(the kernel's run, the judge's verdict or None)``; ``(None, None)`` when the judge failed
        (the check is then an ``error``)."""
        ref = self.exercise[name]
        seed = secrets.randbits(62)                     # never sent to the kernel
        tag = f"{self.token}_{i}"
        inputs, outputs = (os.path.join(self.cwd, f".amp_edu_{what}_{tag}.bin") for what in ("cases", "answer"))
        ask = {"module": ref.module, "function": ref.function, "seed": seed}
        try:
            where = self.judge.ask({"op": "inputs", "path": inputs, **ask}, timeout=limit)
            if "plan" not in where:
                raise JudgeError(where.get("message", "no plan"))
        except JudgeError as exc:
            self.results[i] = CheckResult(name, i, False, f"the grader's judge failed: {exc}", "error",
                                          self._edited(i, name))
            return None, None
        module, function = where["plan"]
        call = (f"{self.handle}.run({module!r}, {function!r}, {inputs!r}, {outputs!r}"
                f"{', ' if ref.args else ''}{ref.args})")
        snap = f"{self.handle}.snapshot()"
        run = k.run("", timeout=limit, store_history=False,
                    expressions={"before": snap, "check": call, "after": snap})
        reply = run.expressions.get("check") or {}
        if run.status != "ok" or reply.get("status") != "ok":
            return run, None
        try:
            judged = self.judge.ask({"op": "verdict", "path": outputs, **ask}, timeout=self.limits.cell_s)
        except JudgeError as exc:
            judged = {"status": "error", "message": f"the grader's judge failed: {exc}"}
        for path in (inputs, outputs):
            try:
                os.remove(path)
            except OSError:
                pass
        return run, judged

    def _outcome(self, i, checks, run, limit, verdict, judged=None) -> bool:
        """Record what cell ``i`` did; ``False`` when the run cannot go on."""
        where = cell_label(self.nb, i)
        name = checks.get(i)
        edited = name is not None and self._edited(i, name)
        if run.status == "stopped":
            raise GradingInterrupted(f"stopped while running {where}")
        if run.status == "timeout":
            which = (f"the {self.limits.cell_s:g} s limit per cell" if limit == self.limits.cell_s
                     else f"the notebook's {self.limits.notebook_s:g} s limit")
            why = (f"{where} did not finish within {which}; kernel killed\n"   # no timing on line 1:
                   f"(it was still running after {run.seconds:.1f} s)")             # reports stay equal
            if name is not None:
                self.results[i] = CheckResult(name, i, False, why, "timeout", edited)
            self.halted = ("timeout", f"{where} timed out ({which})")
            return False
        if run.status == "died":
            why = f"kernel died in {where}: {run.exit_detail}"
            if name is not None:
                msg = why + (f"\n{run.stderr}" if run.stderr else "")
                self.results[i] = CheckResult(name, i, False, msg, "error", edited)
            self.halted = ("error", why)
            return False
        if name is None:
            if run.status == "error":
                self.last_error = f"{where} raised {run.ename}: {first_line(run.evalue)}"
            return True
        if judged is not None:                        # a course check, decided by the judge
            status = {"pass": "pass", "fail": "fail"}.get(judged.get("status"), "error")
            res = CheckResult(name, i, status == "pass", str(judged.get("message", "")), status, edited)
            if edited:
                res.message += f"\n({EDITED_NOTE})"
            self.results[i] = res
            return True
        if verdict is not None:                       # the plan's expression raised in the kernel
            status = "ok" if verdict.get("status") == "ok" else "error"
            ename, evalue = verdict.get("ename", ""), verdict.get("evalue", "")
        else:
            status, ename, evalue = run.status, run.ename, run.evalue
        if status == "ok":
            res = CheckResult(name, i, True, run.stdout.strip(), "pass", edited)
        else:
            msg = f"{ename}: {evalue}"
            if ename == "NameError" and self.last_error:
                msg += f"\n(an earlier cell failed: {self.last_error})"
            res = CheckResult(name, i, False, msg, "fail" if ename in FAIL_ENAMES else "error", edited)
        if edited:
            res.message += f"\n({EDITED_NOTE})"
        self.results[i] = res
        return True


_MARK = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "timeout": "TIMEOUT", "tampered": "TAMPERED"}


def report(graded: Graded) -> str:
    """The per-check report: ``[PASS] name`` or ``[FAIL] name`` + the indented message, then notes."""
    lines = []
    for r in graded.checks:
        lines.append(f"[{_MARK[r.status]}] {r.name}" + (" (edited check restored)" if r.edited else ""))
        if not r.ok:
            lines.extend("       " + ln for ln in r.message.splitlines())
    n_ok = sum(r.ok for r in graded.checks)
    lines.append(f"{n_ok}/{len(graded.checks)} checks passed")
    lines += [f"note: {n}" for n in graded.notes]
    return "\n".join(lines)
