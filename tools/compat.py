"""The course on another torch than the pinned one (``make test-compat``).

    .venv/bin/python tools/compat.py [--torch 2.14.1] [--venv build/venv-torch2.14.1] [--lessons 04 05 10 12 13]

A learner on a hosted runtime has the torch it ships, not ``constraints.txt``'s. This tool builds
that situation and runs the course in it:

1. **a runtime with only torch**: a fresh virtual environment (``--venv``, reused when it already
   holds that torch) and ``pip install torch==VERSION``, nothing else;
2. **the hosted install cell** (:data:`amp_edu.course.hosted.INSTALL_CELL`), run as a learner runs
   it, from ``notebooks/``; torch's version (pip's) must be the same afterwards;
3. **the tested versions of everything else**: the ``test`` extra with ``constraints.txt`` less its
   torch pin (torch pinned to ``VERSION`` instead), so a failure is torch's doing;
4. the fast tier (``pytest -m "not slow"``) and the chosen lessons under nbval, at smoke sizes.

It prints one line per step with its time and pytest's counts, and exits non-zero when a step
failed. A maintainer's tool, run once per change of the version-dependent code; it needs several
GB of disk for a CUDA build of torch (``df -h``) and several minutes of CPU.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amp_edu.course import hosted  # noqa: E402
from amp_edu.course.lessons import LESSONS  # noqa: E402

DEFAULT_TORCH = "2.14.1"
DEFAULT_LESSONS = ("04", "05", "10", "12", "13")


def constraints_without_torch(text: str, torch_version: str) -> str:
    """``constraints.txt``'s text with its ``torch==`` pin replaced by ``torch==torch_version``."""
    if not isinstance(text, str) or not isinstance(torch_version, str):
        raise TypeError("text and torch_version must be strings")
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?([a-z0-9.+]*)", torch_version):
        raise ValueError(f"torch_version must look like 2.14.1, got {torch_version!r}")
    lines = [ln for ln in text.splitlines() if not re.match(r"\s*torch\s*==", ln, re.I)]
    return "\n".join(lines + [f"torch=={torch_version}"]) + "\n"


def lesson_notebooks(numbers) -> list[str]:
    """The notebooks of the lessons numbered ``numbers`` (``"04"`` or ``4``), from the lesson list."""
    by_number = {l.number: l for l in LESSONS}
    out = []
    for n in numbers:
        try:
            out.append(by_number[int(n)].notebook)
        except (KeyError, ValueError):
            raise ValueError(f"no lesson {n!r}; lessons are {', '.join(f'{k:02d}' for k in by_number)}") from None
    return out


def _py(venv: Path) -> str:
    return str(venv / "bin" / "python")


def _torch_version(venv: Path) -> str | None:
    r = subprocess.run([_py(venv), "-c", "from importlib.metadata import version; print(version('torch'))"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def _step(name, cmd, **kw) -> subprocess.CompletedProcess:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, **kw)
    print(f"compat: {name}: exit {r.returncode} in {time.perf_counter() - t0:.0f} s", flush=True)
    return r


def _pytest_counts(out: str) -> str:
    tail = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    return tail[-1].strip("= ") if tail else "no summary line"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tools/compat.py", description=__doc__.split("\n\n")[1])
    ap.add_argument("--torch", default=DEFAULT_TORCH, help="torch version to test (default %(default)s)")
    ap.add_argument("--venv", default=None, help="environment folder (default build/venv-torch<VERSION>)")
    ap.add_argument("--lessons", nargs="*", default=list(DEFAULT_LESSONS), help="lessons to run under nbval")
    ap.add_argument("--no-fast", action="store_true", help="skip the fast tier")
    args = ap.parse_args(argv)
    notebooks = lesson_notebooks(args.lessons)
    venv = Path(args.venv or ROOT / "build" / f"venv-torch{args.torch}").resolve()
    failed = []

    have = _torch_version(venv) if (venv / "bin" / "python").exists() else None
    if have not in (None, args.torch):
        print(f"compat: {venv} holds torch {have}, not {args.torch}: remove it or pass another --venv", file=sys.stderr)
        return 2
    if have is None:                                            # 1. a runtime with only torch
        if _step("fresh environment", [sys.executable, "-m", "venv", "--clear", str(venv)]).returncode:
            return 1
        if _step(f"pip install torch=={args.torch} (only)",
                 [_py(venv), "-m", "pip", "install", "-q", f"torch=={args.torch}"]).returncode:
            return 1
    before = _torch_version(venv)
    r = _step("hosted install cell, from notebooks/", [_py(venv), "-c", hosted.INSTALL_CELL],
              cwd=ROOT / "notebooks")                           # 2. as a learner runs it
    after = _torch_version(venv)
    try:
        hosted.torch_kept(before, after)
        print(f"compat: torch {before} before the install cell, {after} after: kept")
    except AssertionError as exc:
        print(f"compat: {exc}", file=sys.stderr)
        failed.append("hosted install")
    if r.returncode:
        failed.append("hosted install")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as c:   # 3. the tested rest
        c.write(constraints_without_torch((ROOT / "constraints.txt").read_text(), args.torch))
    if _step("test extra, constraints.txt less its torch pin",
             [_py(venv), "-m", "pip", "install", "-q", "-c", c.name, "-e", ".[test]"], cwd=ROOT).returncode:
        return 1
    os.unlink(c.name)
    env = {**os.environ, "AMP_EDU_SMOKE": "1"}
    runs = [] if args.no_fast else [("fast tier", ["-m", "not slow", "--continue-on-collection-errors"])]
    runs.append((f"lessons {' '.join(args.lessons)} under nbval", notebooks))
    for name, extra in runs:                                     # 4. the tests
        r = _step(name, [_py(venv), "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
                  cwd=ROOT, env=env, capture_output=True, text=True)
        print(f"compat: {name} on torch {args.torch}: {_pytest_counts(r.stdout)}")
        if r.returncode:
            failed.append(name)
            print("\n".join(ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR")))[-6000:])
    print(f"compat: torch {args.torch}: {'everything passed' if not failed else 'FAILED: ' + ', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
