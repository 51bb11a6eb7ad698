"""Grade a whole class: ``python -m amp_edu grade submissions/ --jobs 2 --csv grades.csv``.

Every ``.ipynb`` under the given folders (``.ipynb_checkpoints`` and other hidden folders skipped)
is graded by :func:`amp_edu.course.grade.grade_notebook` in its own kernel, from a copy in a
temporary folder — the submitted file is never written. What a class hands in is graded, not
trusted: a cell that never returns is a ``timeout`` row, a kernel that dies an ``error`` row
saying so, a file that is not a notebook an ``error`` row — and the next notebook is graded. Check
cells known to the course are graded with the course's own version (:mod:`.reference`), so an
edited or deleted check does not pass.

Results are rows ``notebook, check, status, detail`` (:func:`rows`), one per check, with
``check = "(notebook)"`` for a notebook that could not be graded at all. They are sorted by
notebook and cell, so they do not depend on ``jobs`` (only the progress lines, printed as each
notebook finishes, come in finishing order).

Ctrl-C or SIGTERM (:func:`stop_on_signals`) sets a ``stop`` event: running kernels are killed within
a fraction of a second, notebooks not finished get an ``error`` row "not graded", and what was
graded is still reported.
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import json
import os
import shutil
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
from . import kernel, reference

NOTEBOOK_ROW = "(notebook)"     # the ``check`` of a row about the notebook as a whole
CSV_FIELDS = ["notebook", "check", "status", "detail"]
EDITED_NOTE = "this check cell had been edited; it was graded with the course's own version"
MISSING = "the check cell `# CHECK: {name}` is missing from this notebook"


class UsageError(ValueError):
    """A path that does not exist, or paths holding no notebook (exit status 2)."""


@dataclass
class NotebookResult:
    notebook: str                                   # the path as shown in reports
    checks: list[G.CheckResult] = field(default_factory=list)
    error: str = ""                                 # why the notebook could not be graded at all
    seconds: float = 0.0
    interrupted: bool = False

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
    """The files to grade: each path itself if a file, every ``.ipynb`` under it if a folder.

    Raises :class:`UsageError` for a path that does not exist or when nothing is found.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: dict[Path, None] = {}
    for p in map(Path, paths):
        if p.is_dir():
            under = sorted(q for q in p.rglob("*.ipynb")
                           if q.is_file() and not any(part.startswith(".") for part in
                                                      q.relative_to(p).parts[:-1]))
            if not under:
                print(f"warning: no .ipynb notebook under {str(p)!r}", file=sys.stderr)
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


def grade_file(path, *, smoke: bool = False, timeout: float = G.DEFAULT_TIMEOUT,
               notebook_timeout: float | None = None, stop: threading.Event | None = None,
               course_checks: bool = True) -> NotebookResult:
    """Grade one submitted file; never raises for anything the file contains.

    With ``course_checks`` (the default) check cells known to the course are graded with the
    course's own source, and a missing one is an ``error`` (:mod:`amp_edu.course.reference`).
    """
    path = Path(path)
    res = NotebookResult(_display(path))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="amp_edu_grade_") as tmp:
        try:
            copy = Path(tmp) / "submission.ipynb"
            shutil.copyfile(path, copy)
            if path.suffix != ".ipynb":
                raise ValueError(f"not a notebook: {path.name!r} is not a .ipynb file")
            try:
                nb = G.notebook.read(copy)
                if not isinstance(getattr(nb, "cells", None), list):
                    raise ValueError("it has no list of cells")
            except Exception as exc:  # noqa: BLE001 - any unreadable file is an error row
                raise ValueError(f"not a notebook: {type(exc).__name__}: {G.first_line(str(exc))}") from exc
            edited, missing = reference.restore(nb, reference.course_checks()) if course_checks else ([], [])
            res.checks = G.grade_notebook(nb, tmp, smoke=smoke, timeout=timeout,
                                          notebook_timeout=notebook_timeout, stop=stop)
            for c in res.checks:
                if c.name in edited:
                    c.message += f"\n({EDITED_NOTE})"
            res.checks += [G.CheckResult(name, -1, False, MISSING.format(name=name), "error")
                           for name in missing]
        except (ValueError, OSError, kernel.KernelError, G.GradingInterrupted) as exc:
            if stop is not None and stop.is_set():
                res.error, res.interrupted = "not graded: the run was interrupted", True
            else:
                res.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a grader bug must not stop the class
            res.error = f"grader error: {type(exc).__name__}: {exc}"
    res.seconds = time.monotonic() - t0
    return res


def grade_class(paths, *, jobs: int = 1, smoke: bool = False, timeout: float = G.DEFAULT_TIMEOUT,
                notebook_timeout: float | None = None, stop: threading.Event | None = None,
                progress=None, course_checks: bool = True) -> list[NotebookResult]:
    """Grade every notebook in ``paths`` with ``jobs`` kernels at once; results sorted by notebook.

    ``progress(done, total, result)`` is called as each notebook finishes. When ``stop`` is set,
    running kernels are killed and every unfinished notebook gets an ``interrupted`` result.
    """
    jobs = check_int(jobs, "jobs", min=1)
    files = collect(paths)
    stop = stop or threading.Event()
    results: dict[Path, NotebookResult] = {}
    pool = cf.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="grade")
    try:
        _run_pool(pool, files, results, stop, progress, smoke=smoke, timeout=timeout,
                  notebook_timeout=notebook_timeout, course_checks=course_checks)
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


def _run_pool(pool, files, results, stop, progress, **kw) -> None:
    """Submit every file, collect results as they finish; on ``stop``, wait briefly for the
    running ones (their kernels are being killed) and drop them."""
    futures = {pool.submit(grade_file, f, stop=stop, **kw): f for f in files}
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
                row.update(cell=c.cell + 1 if c.cell >= 0 else None, message=c.message)
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
                       "error": r.error or None} for r in results],
        "interrupted": interrupted,
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


_MARK = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "timeout": "TIMEOUT"}


def summary_table(results: list[NotebookResult]) -> str:
    """Notebooks × checks: ``pass`` / ``FAIL`` / ``ERROR`` / ``TIMEOUT``, ``-`` where a notebook has
    no such check, and the number passed."""
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
            got.setdefault(c.name, _MARK[c.status])
        body.append([r.notebook] + [got.get(n, "-") for n in names]
                    + [f"{sum(c.ok for c in r.checks)}/{len(r.checks)}"])
    widths = [max([len(head[j])] + [len(b[j]) for b in body if len(b) > 2]) for j in range(len(head))]
    widths[0] = max([widths[0]] + [len(b[0]) for b in body])
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    lines = [fmt(head), fmt(["-" * w for w in widths])]
    for b in body:
        lines.append(fmt(b) if len(b) > 2 else b[0].ljust(widths[0]) + "  " + b[1])
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


def main(paths, *, timeout: float = G.DEFAULT_TIMEOUT, notebook_timeout: float | None = None,
         jobs: int = 1, csv_path=None, json_path=None, smoke: bool = False,
         course_checks: bool = True) -> int:
    """The ``grade`` command: progress on stderr, report and table on stdout; the exit status."""
    files = collect(paths)            # UsageError before anything starts
    for out in (csv_path, json_path):
        if out and not Path(out).resolve().parent.is_dir():
            raise UsageError(f"cannot write {str(out)!r}: its folder does not exist")
    stop = threading.Event()
    t0 = time.monotonic()

    def progress(done, total, r):
        print(progress_line(done, total, r), file=sys.stderr, flush=True)

    try:
        with stop_on_signals(stop):
            results = grade_class(files, jobs=jobs, smoke=smoke, timeout=timeout,
                                  notebook_timeout=notebook_timeout, stop=stop, progress=progress,
                                  course_checks=course_checks)
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
        print(G.report(results[0].checks))
        print()
    elif any(not r.passed for r in results):
        print("not passed:")
        print(not_passed(results))
        print()
    print(summary_table(results))
    graded = sum(not r.interrupted for r in results)
    print(f"graded {graded}/{len(results)} notebooks in {time.monotonic() - t0:.1f} s"
          + (" (interrupted)" if interrupted else ""))
    sys.stdout.flush()
    if interrupted:
        return 128 + getattr(stop, "signum", signal.SIGINT)
    return 0 if all(r.passed for r in results) else 1
