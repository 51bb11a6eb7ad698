"""``python -m amp_edu {doctor,bench,exercises,grade,nbgrader}`` — the course's command line."""

from __future__ import annotations

import argparse
import sys


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def _limits():
    from .course import limits
    return limits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m amp_edu", description="the amp_edu course tools")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("doctor", help="what this machine can do for mixed precision")
    b = sub.add_parser("bench", help="matmul and training-step benchmarks")
    b.add_argument("--quick", action="store_true", help="a short run (under a minute on a CPU)")
    b.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    sub.add_parser("exercises", help="regenerate exercises/ from solutions/")
    g = sub.add_parser("grade", help="grade learner notebooks: files, or folders of them",
                       description="Grade each notebook in its own kernel (the files are only read). "
                       "Exit status: 0 every check passed, 1 some did not, 2 bad usage.")
    g.add_argument("paths", nargs="+", metavar="PATH",
                   help="a .ipynb notebook, or a folder: every .ipynb under it (checkpoints skipped)")
    g.add_argument("--timeout", type=_seconds, default=_limits().DEFAULT.cell_s,
                   metavar="SECONDS", help="time limit per cell (default %(default)g s)")
    g.add_argument("--notebook-timeout", type=_seconds, default=None, metavar="SECONDS",
                   help="time limit per notebook (default: %s x the cell limit)"
                   % _limits().NOTEBOOK_FACTOR)
    g.add_argument("--start-timeout", type=_seconds, default=_limits().DEFAULT.start_s, metavar="SECONDS",
                   help="time a kernel may take to start (default %(default)g s)")
    g.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                   help="run each kernel in bubblewrap: auto (when available, else warn), bwrap "
                   "(required), none (plain processes; see the README's 'For instructors')")
    g.add_argument("--jobs", type=_positive_int, default=1, metavar="N",
                   help="grade N notebooks at once (default 1); results do not depend on N")
    g.add_argument("--csv", metavar="FILE", help="write rows notebook,check,status,detail")
    g.add_argument("--json", metavar="FILE", help="write the same rows with the full messages")
    g.add_argument("--smoke", action="store_true", help="run with AMP_EDU_SMOKE=1 (tiny sizes)")
    g.add_argument("--own-checks", action="store_true",
                   help="grade each notebook's check cells as they are, for an instructor's own "
                   "exercises (by default a notebook must be a course exercise, recognised by its "
                   "metadata, file name or checks, and is graded with the course's own checks)")
    n = sub.add_parser("nbgrader", help="write an nbgrader course folder from solutions/")
    n.add_argument("dir", metavar="DIR", help="the nbgrader course folder to create")
    n.add_argument("--solutions", metavar="DIR", default=None,
                   help="where the solution notebooks are (default: the course's solutions/)")
    n.add_argument("--force", action="store_true", help="overwrite DIR/source if it exists")
    args = ap.parse_args(argv)

    if args.cmd == "doctor":
        from .device import report
        print(report())
        return 0
    if args.cmd == "bench":
        from .bench import main as bench_main
        return bench_main(quick=args.quick, json_path=args.json)
    if args.cmd == "exercises":
        from .course.exercises import generate
        try:
            written = generate()
        except RuntimeError as exc:          # not a checkout: say what to do
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for path in written:
            print(f"wrote {path}")
        return 0
    if args.cmd == "grade":
        from .course import classgrade
        limits = _limits().GradeLimits(args.timeout, args.notebook_timeout, args.start_timeout)
        try:
            return classgrade.main(args.paths, limits=limits, jobs=args.jobs,
                                   csv_path=args.csv, json_path=args.json, smoke=args.smoke,
                                   course_checks=not args.own_checks, sandbox_mode=args.sandbox)
        except classgrade.UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.cmd == "nbgrader":
        from .course import nbgrader
        try:
            for path in nbgrader.write_course(args.dir, args.solutions, force=args.force):
                print(f"wrote {path}")
        except (ValueError, FileExistsError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
