"""Grade a whole class: ``python -m amp_edu grade submissions/ --jobs 2 --csv grades.csv``.

Every file under the given folders (hidden folders such as ``.ipynb_checkpoints`` skipped) gets
at least one row: a notebook is graded by :func:`amp_edu.course.grade.grade_notebook` in its own
kernel, anything else (a ``.py``, a ``.txt``) is an ``error`` row saying it is not a notebook. What
a class hands in is graded, not trusted:

* every file is **read once, when the run starts**, and graded from that copy in a temporary
  folder: a submission that writes to a classmate's file, or adds a new learner folder, changes
  nothing in this run's grades (and is reported, below);
* each kernel runs in a **sandbox** (:mod:`.sandbox`: bubblewrap, where it cannot see the
  submissions, the rest of the checkout or the instructor's home) — or, where there is none, as a
  plain process after a printed warning;
* a notebook is **recognised** as a course exercise by its metadata, file name, nbgrader ids or
  check names (:func:`.handout.recognise`) and graded with the course's checks; one that is not
  recognised is an ``error`` row saying so (``--own-checks`` grades an instructor's own notebooks
  by their own check cells);
* **integrity**: inside the kernel the grader's guard compares snapshots around every check
  (:mod:`.integrity`); outside, the run's private copy of the course package (and, without a
  sandbox, the checkout's package and the submissions folders) are hashed before the run and
  after each notebook. A change is a ``tampered`` row naming it, never a pass, and a
  notebook graded after the package changed is not graded at all (``error``);
* a cell that never returns is a ``timeout`` row, a kernel that dies an ``error`` row saying so,
  and processes a notebook leaves behind are killed and noted.

Results are rows ``notebook, check, status, detail`` (:func:`rows`), one per check, with
``check = "(notebook)"`` for a file that could not be graded at all. They are sorted by notebook
and cell, so they do not depend on ``jobs`` or on the order (only the progress lines, printed as
each notebook finishes, come in finishing order).

Ctrl-C or SIGTERM (:func:`stop_on_signals`) sets a ``stop`` event: running kernels are killed within
a fraction of a second, notebooks not finished get an ``error`` row "not graded", and what was
graded is still reported.
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import json
import os
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..validate import check_int
from . import grade as G
from . import ROOT, handout, integrity, kernel, kernelpackage, notebook, sandbox
from .judge import Judge
from .limits import DEFAULT, GradeLimits

NOTEBOOK_ROW = "(notebook)"     # the ``check`` of a row about the notebook as a whole
CSV_FIELDS = ["notebook", "check", "status", "detail"]
EDITED_MARK = "*"               # after a table cell: the check cell had been edited (and was restored)


class UsageError(ValueError):
    """A path that does not exist, or paths holding no notebook (exit status 2)."""


@dataclass
class NotebookResult:
    notebook: str                                   # the path as shown in reports
    checks: list[G.CheckResult] = field(default_factory=list)
    error: str = ""                                 # why the notebook could not be graded at all
    seconds: float = 0.0
    interrupted: bool = False
    exercise: str = ""                              # the course exercise it was recognised as, and how
    findings: list[str] = field(default_factory=list)    # what it tampered with
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.checks) and all(c.ok for c in self.checks)

    def summary(self) -> str:
        if self.error:
            return f"error: {G.first_line(self.error)}"
        n_ok = sum(c.ok for c in self.checks)
        text = f"{n_ok}/{len(self.checks)} checks passed"
        worst = next((c for c in self.checks if c.status == "timeout"), None) or \
            next((c for c in self.checks if c.message.startswith("kernel died")
                  or "not run: kernel died" in c.message), None)
        return text + (f"; {worst.status}: {worst.detail.removeprefix('not run: ')}" if worst else "")


def _display(path: Path) -> str:
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def collect(paths) -> list[Path]:
    """The files to grade: each path itself if a file, every file under it if a folder (files and
    folders whose name starts with ``.`` skipped: checkpoints, editor state).

    Raises :class:`UsageError` for a path that does not exist or when nothing is found.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: dict[Path, None] = {}
    for p in map(Path, paths):
        if p.is_dir():
            under = sorted(q for q in p.rglob("*")
                           if q.is_file() and not any(part.startswith(".") for part in q.relative_to(p).parts))
            if not under:
                print(f"warning: no file under {str(p)!r}", file=sys.stderr)
            for q in under:
                found.setdefault(q.resolve(), None)
        elif p.is_file():
            found.setdefault(p.resolve(), None)
        else:
            raise UsageError(f"no such file or folder: {str(p)!r} (expected a .ipynb notebook "
                             "or a folder of them)")
    if not found:
        raise UsageError("no .ipynb notebook found in " + ", ".join(repr(str(p)) for p in paths))
    return sorted(found, key=_display)


class Watch:
    """The folders learner code must not change: the course package and the submissions.

    Hashed once when the run starts (:func:`.integrity.tree_digest`); :meth:`changes` lists what
    differs now and was not reported before, so the notebook whose grading revealed a change is the
    one blamed (with ``jobs > 1`` others ran at the same time; the message says so). ``package_root``
    is the run's private copy of the package (what the kernels import); ``also`` more folders to
    watch (without a sandbox: the checkout's own package, which a kernel could find and write).
    """

    def __init__(self, package_root, submission_roots=(), *, jobs: int = 1, also=()):
        self.package = Path(package_root).resolve() / "amp_edu"
        self.roots = [Path(r).resolve() for r in (*submission_roots, *also)]
        self.jobs = jobs
        self._lock = threading.Lock()
        self._start = self._digests()
        self._reported: set[str] = set()

    def _digests(self) -> dict[str, dict[str, str]]:
        out = {str(self.package): integrity.tree_digest(self.package)}
        for r in self.roots:
            out[str(r)] = integrity.tree_digest(r)
        return out

    def package_changed(self) -> list[str]:
        """What differs in the package from the start of the run (reported or not)."""
        return integrity.tree_changes(self._start[str(self.package)], integrity.tree_digest(self.package),
                                      "amp_edu")

    def changes(self) -> list[str]:
        with self._lock:
            now = self._digests()
            found = []
            for root, before in self._start.items():
                where = "amp_edu" if root == str(self.package) else _display(Path(root))
                found += integrity.tree_changes(before, now.get(root, {}), where)
            new = [f for f in found if f not in self._reported]
            self._reported.update(new)
        extra = f" (while {self.jobs} notebooks were graded at once; --jobs 1 tells which)" if self.jobs > 1 else ""
        return [f"{f} while this notebook was graded{extra}" for f in new]


def grade_file(path, *, limits: GradeLimits = DEFAULT, smoke: bool = False,
               stop: threading.Event | None = None, course_checks: bool = True,
               isolation: sandbox.Isolation | None = None, package_root=None,
               data: bytes | None = None, watch: Watch | None = None, judge: Judge | None = None) -> NotebookResult:
    """Grade one submitted file; never raises for anything the file contains.

    ``data``: the file's bytes as read when the run started (default: read now). With
    ``course_checks`` (the default) the notebook must be recognised as a course exercise and is
    graded with the course's checks (:mod:`amp_edu.course.handout`); without, by its own check
    cells. ``watch`` (made by :func:`grade_class`) hashes the package and submissions around it;
    ``judge`` (made by :func:`grade_class`) decides the course checks. ``package_root``: the kernel
    package (:mod:`.kernelpackage`); ``None`` builds one for this notebook.
    """
    path = Path(path)
    res = NotebookResult(_display(path))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="amp_edu_grade_") as tmp:
        try:
            copy = Path(tmp) / "submission.ipynb"
            copy.write_bytes(path.read_bytes() if data is None else data)
            if path.suffix != ".ipynb":
                raise ValueError(f"not a notebook: {path.name!r} is not a .ipynb file")
            try:
                nb = notebook.read(copy)
                if not isinstance(getattr(nb, "cells", None), list):
                    raise ValueError("it has no list of cells")
            except Exception as exc:  # noqa: BLE001 - any unreadable file is an error row
                raise ValueError(f"not a notebook: {type(exc).__name__}: {G.first_line(str(exc))}") from exc
            exercise = None
            if course_checks:
                refs = handout.course_checks()
                lesson, how = handout.recognise(nb, path, refs)
                if lesson is None:
                    raise ValueError(how + " (grade an instructor's own exercises with --own-checks)")
                res.exercise = f"{lesson[:-len('.ipynb')]} ({how})"
                res.notes += [f"flagged: {f}" for f in handout.other_exercises(nb, lesson, refs)]
                exercise = handout.lesson_checks(refs, lesson)
            if watch is not None and watch.package_changed():
                raise ValueError("not graded: the course package changed during this run ("
                                 + "; ".join(watch.package_changed()[:3]) + "); restore it and grade again")
            graded = G.grade_notebook(nb, tmp, exercise=exercise, limits=limits, smoke=smoke, stop=stop,
                                      isolation=isolation, package_root=package_root, judge=judge)
            if watch is not None:
                graded.mark_tampered(watch.changes())
            res.checks, res.findings, res.notes = graded.checks, graded.findings, res.notes + graded.notes
        except (ValueError, OSError, kernel.KernelError, G.GradingInterrupted) as exc:
            if stop is not None and stop.is_set():
                res.error, res.interrupted = "not graded: the run was interrupted", True
            else:
                res.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a grader bug must not stop the class
            res.error = f"grader error: {type(exc).__name__}: {exc}"
    res.seconds = time.monotonic() - t0
    return res


def grade_class(paths, *, jobs: int = 1, limits: GradeLimits = DEFAULT, smoke: bool = False,
                stop: threading.Event | None = None, progress=None, course_checks: bool = True,
                isolation: sandbox.Isolation | None = None, package_root=None) -> list[NotebookResult]:
    """Grade every file in ``paths`` with ``jobs`` kernels at once; results sorted by notebook.

    Every file is read when the run starts; the package and the folders given are watched
    (:class:`Watch`). ``progress(done, total, result)`` is called as each notebook finishes. When
    ``stop`` is set, running kernels are killed and every unfinished notebook gets an
    ``interrupted`` result. ``isolation`` defaults to :func:`.sandbox.choose` ``("auto")``.
    """
    jobs = check_int(jobs, "jobs", min=1)
    files = collect(paths)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    isolation = isolation or sandbox.choose("auto")
    source = Path(package_root or ROOT).resolve()
    data = {}
    for f in files:
        try:
            data[f] = f.read_bytes()
        except OSError:
            data[f] = None                     # grade_file reports the error
    stop = stop or threading.Event()
    results: dict[Path, NotebookResult] = {}
    judge = Judge(env={"AMP_EDU_SMOKE": "1" if smoke else "0"})
    with tempfile.TemporaryDirectory(prefix="amp_edu_course_") as private, judge:
        # The kernels import a private copy of the package taken now, without the checks
        # (kernelpackage): an edit to the checkout during the run changes nothing, and a change
        # to the copy can only come from a kernel.
        kernelpackage.build(private, source)
        # In the sandbox a kernel cannot write the submissions or the checkout (a change there is
        # someone else's: not the notebook's); without one, both are watched too.
        folders = [] if isolation.sandboxed else [p for p in map(Path, paths) if p.is_dir()]
        also = [] if isolation.sandboxed else [source / "amp_edu"]
        watch = Watch(private, folders, jobs=jobs, also=also)
        pool = cf.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="grade")
        try:
            _run_pool(pool, files, results, stop, progress, data, limits=limits, smoke=smoke,
                      course_checks=course_checks, isolation=isolation, package_root=private, watch=watch,
                      judge=judge)
        except BaseException:
            stop.set()                        # e.g. a second Ctrl-C: the workers' kernels stop too
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            kernel.kill_all()
    for f in files:
        if f not in results:
            results[f] = NotebookResult(_display(f), error="not graded: the run was interrupted",
                                        interrupted=True)
    return [results[f] for f in files]


def _run_pool(pool, files, results, stop, progress, data, **kw) -> None:
    """Submit every file, collect results as they finish; on ``stop``, wait briefly for the
    running ones (their kernels are being killed) and drop them."""
    futures = {pool.submit(grade_file, f, stop=stop, data=data.get(f), **kw): f for f in files}
    pending = set(futures)
    while pending and not stop.is_set():
        done, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
        for fut in sorted(done, key=lambda fu: _display(futures[fu])):
            results[futures[fut]] = fut.result()
            if progress:
                progress(len(results), len(files), results[futures[fut]])
    if pending:                       # stopped: kernels see ``stop`` within POLL_S seconds
        for fut in pending:
            fut.cancel()
        done, _ = cf.wait(pending, timeout=10)
        for fut in done:
            if not fut.cancelled():
                r = fut.result()
                if not r.interrupted:
                    results[futures[fut]] = r




# -- reports ---------------------------------------------------------------------------------------
def rows(results: list[NotebookResult], *, full: bool = False) -> list[dict]:
    """One dict per (notebook, check): ``notebook, check, status, detail`` (+ ``cell``, ``message``
    with ``full=True``). A notebook that could not be graded is one ``(notebook)`` error row."""
    out = []
    for r in results:
        if r.error:
            row = {"notebook": r.notebook, "check": NOTEBOOK_ROW, "status": "error",
                   "detail": G.first_line(r.error)}
            if full:
                row.update(cell=None, message=r.error)
            out.append(row)
            continue
        for c in r.checks:
            row = {"notebook": r.notebook, "check": c.name, "status": c.status, "detail": c.detail}
            if full:
                row.update(cell=c.cell + 1 if c.cell >= 0 else None, message=c.message, edited=c.edited)
            out.append(row)
    return out


def write_csv(results: list[NotebookResult], path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        w.writerows(rows(results))


def write_json(results: list[NotebookResult], path, *, interrupted: bool = False) -> None:
    """The CSV's rows with the full ``message`` and the check cell's 1-based ``cell`` number, plus
    one entry per notebook (``seconds``, ``passed``)."""
    data = {
        "rows": rows(results, full=True),
        "notebooks": [{"notebook": r.notebook, "passed": r.passed, "seconds": round(r.seconds, 2),
                       "checks_passed": sum(c.ok for c in r.checks), "checks": len(r.checks),
                       "error": r.error or None, "exercise": r.exercise or None,
                       "tampered": r.findings, "notes": r.notes} for r in results],
        "interrupted": interrupted,
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


_MARK = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "timeout": "TIMEOUT", "tampered": "TAMPERED"}


def summary_table(results: list[NotebookResult]) -> str:
    """Notebooks × checks: ``pass`` / ``FAIL`` / ``ERROR`` / ``TIMEOUT`` / ``TAMPERED`` (with
    :data:`EDITED_MARK` when the check cell had been edited), ``-`` where a notebook has no such
    check, and the number passed."""
    names: list[str] = []
    for r in results:
        for c in r.checks:
            if c.name not in names:
                names.append(c.name)
    head = ["notebook"] + names + ["passed"]
    body = []
    for r in results:
        if r.error:
            body.append([r.notebook, "ERROR: " + G.first_line(r.error)])
            continue
        got = {}
        for c in r.checks:
            got.setdefault(c.name, _MARK[c.status] + (EDITED_MARK if c.edited else ""))
        body.append([r.notebook] + [got.get(n, "-") for n in names]
                    + [f"{sum(c.ok for c in r.checks)}/{len(r.checks)}"])
    widths = [max([len(head[j])] + [len(b[j]) for b in body if len(b) > 2]) for j in range(len(head))]
    widths[0] = max([widths[0]] + [len(b[0]) for b in body])
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    lines = [fmt(head), fmt(["-" * w for w in widths])]
    for b in body:
        lines.append(fmt(b) if len(b) > 2 else b[0].ljust(widths[0]) + "  " + b[1])
    if any(c.edited for r in results for c in r.checks):
        lines.append(f"{EDITED_MARK} the check cell had been edited; it was graded with the course's own version")
    n_all = sum(r.passed for r in results)
    lines.append(f"{n_all}/{len(results)} notebooks passed every check")
    return "\n".join(lines)


def not_passed(results: list[NotebookResult]) -> str:
    """One line per check (or notebook) that did not pass: ``notebook  check  status  detail``."""
    lines = [f"{r['notebook']}  {r['check']}  {r['status']}: {r['detail']}"
             for r in rows(results) if r["status"] != "pass"]
    return "\n".join(lines)


@contextmanager
def stop_on_signals(stop: threading.Event, signals=(signal.SIGINT, signal.SIGTERM)):
    """While inside, the first SIGINT/SIGTERM sets ``stop`` (``stop.signum`` records which); a
    second one kills every kernel and raises ``KeyboardInterrupt``. Main thread only."""
    def handler(signum, frame):
        if stop.is_set():
            kernel.kill_all()
            raise KeyboardInterrupt
        stop.signum = signum
        stop.set()
        print(f"\nstopping ({signal.Signals(signum).name}): killing the running kernels ...",
              file=sys.stderr, flush=True)

    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    old = {s: signal.signal(s, handler) for s in signals}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def progress_line(done: int, total: int, r: NotebookResult) -> str:
    return f"[{done}/{total}] {r.notebook}: {r.summary()} ({r.seconds:.1f} s)"


def main(paths, *, limits: GradeLimits = DEFAULT, jobs: int = 1, csv_path=None, json_path=None,
         smoke: bool = False, course_checks: bool = True, sandbox_mode: str = "auto") -> int:
    """The ``grade`` command: progress on stderr, report and table on stdout; the exit status."""
    files = collect(paths)            # UsageError before anything starts
    for out in (csv_path, json_path):
        if out and not Path(out).resolve().parent.is_dir():
            raise UsageError(f"cannot write {str(out)!r}: its folder does not exist")
    try:
        isolation = sandbox.choose(sandbox_mode)
    except sandbox.SandboxUnavailable as exc:
        raise UsageError(f"--sandbox bwrap: {exc}") from None
    if not isolation.sandboxed:
        print(sandbox.warning(isolation), file=sys.stderr, flush=True)
    stop = threading.Event()
    t0 = time.monotonic()

    def progress(done, total, r):
        print(progress_line(done, total, r), file=sys.stderr, flush=True)

    try:
        with stop_on_signals(stop):
            results = grade_class(paths, jobs=jobs, limits=limits, smoke=smoke, stop=stop,
                                  progress=progress, course_checks=course_checks, isolation=isolation)
    except KeyboardInterrupt:          # a second signal: kernels are already killed, stop now
        print("stopped: nothing reported", file=sys.stderr)
        return 128 + getattr(stop, "signum", signal.SIGINT)
    interrupted = stop.is_set()
    try:
        if csv_path:
            write_csv(results, csv_path)
        if json_path:
            write_json(results, json_path, interrupted=interrupted)
    except OSError as exc:            # still print the table below: the grading is not lost
        print(f"error: could not write the results: {exc}", file=sys.stderr)
    if len(results) == 1 and not results[0].error:
        r = results[0]
        print(G.report(G.Graded(r.checks, r.findings, r.notes)))
        print()
    elif any(not r.passed for r in results):
        print("not passed:")
        print(not_passed(results))
        print()
    if len(results) > 1:
        for r in results:
            for n in r.notes:
                print(f"note: {r.notebook}: {n}")
    print(summary_table(results))
    graded = sum(not r.interrupted for r in results)
    print(f"graded {graded}/{len(results)} notebooks in {time.monotonic() - t0:.1f} s"
          + (" (interrupted)" if interrupted else "")
          + ("" if isolation.sandboxed else " WITHOUT a sandbox"))
    sys.stdout.flush()
    if interrupted:
        return 128 + getattr(stop, "signum", signal.SIGINT)
    return 0 if all(r.passed for r in results) else 1
