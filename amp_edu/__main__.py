"""``python -m amp_edu {doctor,bench,exercises,grade}`` — the course's command line."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m amp_edu", description="the amp_edu course tools")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("doctor", help="what this machine can do for mixed precision")
    b = sub.add_parser("bench", help="matmul and training-step benchmarks")
    b.add_argument("--quick", action="store_true", help="a short run (under a minute on a CPU)")
    b.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    sub.add_parser("exercises", help="regenerate exercises/ from solutions/")
    g = sub.add_parser("grade", help="grade an exercise notebook")
    g.add_argument("notebook")
    g.add_argument("--smoke", action="store_true", help="run with AMP_EDU_SMOKE=1 (tiny sizes)")
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
        for path in generate():
            print(f"wrote {path}")
        return 0
    if args.cmd == "grade":
        from .course.grade import grade, report
        try:
            results = grade(args.notebook, smoke=args.smoke)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(report(results))
        return 0 if all(r.ok for r in results) else 1
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
