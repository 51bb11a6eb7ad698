"""Time a class graded by two versions of the grader, side by side (issue 29's time budget).

    .venv/bin/python tools/grading_time.py --old /tmp/amp_old [--class-size 40] [--jobs 2] [--rounds 1]

``--old`` is a checkout of the course at an earlier commit (``git worktree add /tmp/amp_old
<commit>``), graded with its own package; the new one is this checkout. Each grader grades a class
of ``--class-size`` notebooks made from its own checkout: the exercises both have, in turn, solved
with that checkout's solutions (what a class that did the work hands in), each in a learner's
folder. Both run with the same ``--jobs``, in alternating order (old, new, new, old, ... for
``--rounds``), at smoke sizes, and the tool prints each run's wall time, seconds per notebook, and
the ratio new/old per round. A timing from a busy machine (load above the number of cores during
the run) says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def solved(exercise: Path, solution: Path):
    """The exercise with the solution's answers typed in (tests/course/test_grade_integrity.py's way)."""
    nb, sol = nbformat.read(exercise, 4), nbformat.read(solution, 4)
    for cell, ref in zip(nb.cells, sol.cells):
        if "# YOUR CODE HERE" in cell.source:
            cell.source = "\n".join(ln for ln in ref.source.splitlines() if "### " not in ln)
    return nb


def make_class(checkout: Path, dest: Path, size: int, names: list[str]) -> Path:
    """``size`` learners' folders under ``dest``, each with one of ``names`` solved, in turn."""
    for k in range(size):
        name = names[k % len(names)]
        folder = dest / f"learner{k:02d}"
        folder.mkdir(parents=True)
        nbformat.write(solved(checkout / "exercises" / name, checkout / "solutions" / name), folder / name)
    return dest


def grade(checkout: Path, klass: Path, jobs: int, out: Path) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMP_EDU_SMOKE")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "amp_edu", "grade", str(klass), "--jobs", str(jobs), "--smoke",
                           "--json", str(out)], cwd=checkout, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    data = json.loads(out.read_text()) if out.exists() else {}
    passed = sum(n["passed"] for n in data.get("notebooks", []))
    return seconds, {"passed": passed, "graded": len(data.get("notebooks", [])), "exit": proc.returncode,
                     "tail": proc.stderr[-500:] if proc.returncode not in (0, 1) else ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, required=True, help="a checkout of the earlier grader")
    ap.add_argument("--class-size", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    if not (args.old / "amp_edu" / "course" / "classgrade.py").is_file():
        raise SystemExit(f"--old {args.old}: not a checkout of the course")
    with tempfile.TemporaryDirectory(prefix="amp_edu_timing_") as tmp:
        names = sorted({p.name for p in (ROOT / "exercises").glob("*.ipynb")}
                       & {p.name for p in (args.old / "exercises").glob("*.ipynb")})
        klass = {label: make_class(checkout, Path(tmp) / label, args.class_size, names)
                 for label, checkout in (("old", args.old), ("new", ROOT))}
        print(f"{args.class_size} notebooks ({len(names)} exercises in turn), --jobs {args.jobs}, smoke sizes, "
              f"{os.cpu_count()} cores")
        for r in range(args.rounds):
            order = [("old", args.old), ("new", ROOT)] if r % 2 == 0 else [("new", ROOT), ("old", args.old)]
            times = {}
            for label, checkout in order:
                load0 = os.getloadavg()[0]
                seconds, info = grade(checkout, klass[label], args.jobs, Path(tmp) / f"{label}{r}.json")
                load = max(load0, os.getloadavg()[0])
                busy = f"  BUSY machine (load {load:.1f} > {os.cpu_count()} cores): concludes nothing" \
                    if load > os.cpu_count() else f"  (load {load:.1f})"
                times[label] = seconds
                print(f"round {r + 1} {label}: {seconds:.0f} s, {seconds / args.class_size:.1f} s per notebook, "
                      f"{info['passed']}/{info['graded']} passed every check, exit {info['exit']}{busy}"
                      + (f"\n  {info['tail']}" if info["tail"] else ""))
            print(f"round {r + 1}: new / old = {times['new'] / times['old']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
