"""Authoring tool for lessons: ``python -m amp_edu.course.nbtool {topy,frompy,run} ...``.

* ``topy NB`` prints the notebook as a percent-format script (for editing as text);
* ``frompy SCRIPT NB`` writes the notebook from such a script (outputs dropped);
* ``run NB [NB ...] [--smoke] [--timeout S] [--notebook-timeout S]`` executes each notebook and
  stores it executed (default sizes unless ``--smoke``; limits from
  :data:`amp_edu.course.limits.DEFAULT`); exits 1 if any cell raised (cells tagged
  ``# NBVAL_RAISES_EXCEPTION`` may).

These are authoring tools: they work in a checkout of the course (``run`` refuses, with exit
status 2 and a message saying what to do, when there is none; see
:func:`amp_edu.course.exercises.checkout_root`).
"""

from __future__ import annotations

import argparse
import sys
import time

from . import notebook
from .exercises import checkout_root
from .limits import DEFAULT, NOTEBOOK_FACTOR, GradeLimits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m amp_edu.course.nbtool", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("topy"); p.add_argument("nb")
    p = sub.add_parser("frompy"); p.add_argument("script"); p.add_argument("nb")
    p = sub.add_parser("run"); p.add_argument("nbs", nargs="+"); p.add_argument("--smoke", action="store_true")
    p.add_argument("--timeout", type=float, default=DEFAULT.cell_s, metavar="SECONDS",
                   help="time limit per cell (default %(default)g s, the grader's)")
    p.add_argument("--notebook-timeout", type=float, default=None, metavar="SECONDS",
                   help=f"time limit per notebook (default {NOTEBOOK_FACTOR} x the cell limit)")
    args = ap.parse_args(argv)
    if args.cmd == "topy":
        sys.stdout.write(notebook.to_percent(notebook.read(args.nb)))
        return 0
    if args.cmd == "frompy":
        with open(args.script) as fh:
            notebook.write(notebook.from_percent(fh.read()), args.nb)
        return 0
    try:
        checkout_root()
    except RuntimeError as exc:
        print(f"error: nbtool run stores lessons executed, which is authoring work: {exc}", file=sys.stderr)
        return 2
    try:
        limits = GradeLimits(args.timeout, args.notebook_timeout, DEFAULT.start_s)
    except (TypeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    status = 0
    for path in args.nbs:
        t0 = time.perf_counter()
        errs = notebook.run_in_place(path, smoke=args.smoke, limits=limits)
        print(f"{path}: {'OK' if not errs else 'ERRORS'} in {time.perf_counter() - t0:.0f} s")
        for idx, ename, evalue in errs:
            print(f"  cell {idx}: {ename}: {evalue}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
