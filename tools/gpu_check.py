#!/usr/bin/env python
"""The course's GPU outputs in one command: ``make gpu-check`` (or ``python tools/gpu_check.py``).

On a CUDA machine (written for one H100/H200, 16 cores) it runs, within ``--budget`` seconds
(default 540, i.e. 9 minutes):

1. ``environment.json``: torch, CUDA, driver, GPU, capability, flags, commit, what ran and how long;
2. ``doctor.txt`` (``python -m amp_edu doctor``) and ``nvidia-smi.txt``;
3. the parity tests on the GPU (GradScaler and autocast ports and agreement, fp8 parity, the bench's
   method tests), in parallel with
4. every lesson under nbval (``pytest --nbval-lax``, ``AMP_EDU_SMOKE=1``, as CI runs them, on
   several workers), including lessons 06, 10 and 13 with ``torch.compile``;
5. every lesson executed and stored into ``notebooks/`` of the output folder (``--out``, default
   ``build/gpu``): the course's GPU outputs, at full GPU sizes except the lessons named in
   ``SMOKE_ON_GPU`` (run smoke so the whole check fits the budget; each is listed in
   environment.json with the reason);
6. the benchmark alone at the end (``bench_gpu.json``; ``--quick`` when too little time is left).

Steps 3-5 share the GPU, so the timings inside the stored lessons carry the lessons' own load
caveats; ``--jobs 1`` runs the lessons one at a time when clean timings matter more than time.

On a machine without CUDA every step that needs it is skipped with its reason printed, and the
rest (environment, doctor) runs: ``--dry-run`` prints the plan and writes environment.json
without running anything. ``--allow-cpu`` runs the plan on a CPU anyway (to test this script,
with ``--lessons`` and ``--smoke`` to keep it short). ``tests/tools/test_gpu_check.py`` checks the plan.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 540                      # 9 minutes on one H100/H200
#: the parity / agreement / method tests whose GPU paths the CPU CI never runs
PARITY_TESTS = ("tests/scaler/test_scaler.py", "tests/scaler/test_torch_port.py", "tests/autocast/test_api.py",
                "tests/autocast/test_torch_port.py", "tests/autocast/test_agreement.py",
                "tests/autocast/test_under_compile.py", "tests/fp8/test_linear_parity.py", "tests/fp8/test_torchao_port.py",
                "tests/measure/test_timing.py", "tests/bench/test_bench.py", "tests/test_memory.py", "tests/device/test_device.py")
#: lessons stored at smoke size on the GPU too, and why (the rest run at full GPU size)
SMOKE_ON_GPU = {
    8: "its multi-seed convergence study runs many full training runs; at full size it alone would "
       "take most of the budget",
    11: "several processes on one GPU (gloo/NCCL ranks); the full size adds nothing the smoke size "
        "does not show and costs minutes",
    14: "transformers models built from a config; full size is a CPU-sized study, not a GPU one",
}
#: the order lessons start in: the long ones first, so the pool ends together
LONG_FIRST = (13, 10, 6, 12, 8, 7, 5, 14, 9, 2, 4, 11, 3, 1, 0)


@dataclass
class Step:
    name: str
    argv: list[str]
    timeout_s: float
    needs_cuda: bool = True
    env: dict = field(default_factory=dict)
    phase: int = 1                    # steps of one phase run together; phases run in order
    why: str = ""                     # what it is for (printed in the plan)
    skipped: str | None = None        # set when the step will not run, with the reason
    log: str | None = None            # file (under the output folder) for its output


def lessons(numbers=None):
    sys.path.insert(0, str(ROOT))
    from amp_edu.course.lessons import LESSONS
    got = [ls for ls in LESSONS if numbers is None or ls.number in numbers]
    order = {n: i for i, n in enumerate(LONG_FIRST)}
    return sorted(got, key=lambda ls: order.get(ls.number, len(order)))


def plan(*, cuda: bool, out: str = "build/gpu", budget_s: float = BUDGET_S, jobs: int = 4,
         lesson_numbers=None, smoke: bool = False, allow_cpu: bool = False, skip=(),
         python: str = sys.executable) -> list[Step]:
    """The steps this machine would run, in order, each with its time limit or the reason it is skipped."""
    if budget_s < 60:
        raise ValueError(f"budget_s must be at least 60 seconds, got {budget_s!r}")
    if not 1 <= int(jobs) <= 16:
        raise ValueError(f"jobs must be between 1 and 16, got {jobs!r}")
    py = python
    steps = [
        Step("doctor", [py, "-m", "amp_edu", "doctor"], 60, needs_cuda=False, phase=0, log="doctor.txt",
             why="what amp_edu detects (device, capability, flags)"),
        Step("nvidia-smi", ["nvidia-smi", "-q"], 30, phase=0, log="nvidia-smi.txt",
             why="the GPU, driver and clocks as the driver reports them"),
        Step("parity-tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                              "-n", "4", "--dist", "loadfile", *PARITY_TESTS],
             0.45 * budget_s, env={"AMP_EDU_SMOKE": "1"}, phase=1, log="parity_tests.log",
             why="the GPU paths of the GradScaler/autocast/fp8 parity and the bench's method tests"),
    ]
    chosen = lessons(lesson_numbers)
    steps.append(Step("nbval", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                                "--nbval-lax", "-n", str(max(2, jobs)), "--dist", "loadfile",
                                *[ls.notebook for ls in sorted(chosen, key=lambda ls: ls.number)]],
                      0.45 * budget_s, env={"AMP_EDU_SMOKE": "1"}, phase=1, log="nbval.log",
                      why="every lesson under nbval as CI runs it (smoke sizes), on the GPU"))
    for ls in chosen:
        small = smoke or ls.number in SMOKE_ON_GPU
        steps.append(Step(f"lesson-{ls.stem}", [py, str(Path(__file__).resolve()), "--execute", ls.notebook,
                                                f"{out}/notebooks/{ls.stem}.ipynb"] + (["--smoke"] if small else []),
                          0.6 * budget_s, env={"AMP_EDU_SMOKE": "1" if small else "0"}, phase=2,
                          log=f"lessons/{ls.stem}.log",
                          why=("smoke size: " + SMOKE_ON_GPU[ls.number]) if ls.number in SMOKE_ON_GPU and not smoke
                          else ("smoke size (--smoke)" if small else "full GPU size"),))
    steps.append(Step("bench", [py, "-m", "amp_edu", "bench", "--json", f"{out}/bench_gpu.json"],
                      0.3 * budget_s, phase=3, log="bench.txt",
                      why="the benchmark, alone on the GPU (commit as amp_edu/reference/gpu_<name>.json)"))
    for st in steps:
        if st.name in skip or st.name.split("-")[0] in skip:
            st.skipped = "skipped by --skip"
        elif st.needs_cuda and not cuda and not allow_cpu:
            st.skipped = ("no CUDA device: this step produces GPU outputs; on a CPU `make test` runs "
                          "the same tests and lessons")
        elif st.name == "nvidia-smi" and shutil.which("nvidia-smi") is None:
            st.skipped = "nvidia-smi is not on PATH"
    return steps


def _cuda_info() -> dict:
    try:
        import torch
    except ImportError as exc:                     # pragma: no cover - the course needs torch
        return {"torch": None, "error": str(exc)}
    info = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
            "cuda_runtime": torch.version.cuda, "cpu_threads": torch.get_num_threads(),
            "matmul_fp32_precision": torch.backends.cuda.matmul.fp32_precision}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, capability=f"{p.major}.{p.minor}", gpu_memory_gib=round(p.total_memory / 2**30, 1),
                    sm_count=p.multi_processor_count, cudnn=torch.backends.cudnn.version())
    return info


def environment(steps, args) -> dict:
    def out_of(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=ROOT).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "python": platform.python_version(), "platform": platform.platform(),
           "cpu_count": os.cpu_count(), "commit": out_of(["git", "rev-parse", "HEAD"]),
           "tree_dirty": bool(out_of(["git", "status", "--porcelain", "--untracked-files=no"])),
           "driver": out_of(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
           "budget_s": args.budget, "jobs": args.jobs, "dry_run": args.dry_run,
           "env": {k: os.environ.get(k) for k in ("AMP_EDU_SMOKE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
                                                  "CUDA_VISIBLE_DEVICES", "ONEDNN_MAX_CPU_ISA")},
           "smoke_on_gpu": {f"{n:02d}": why for n, why in SMOKE_ON_GPU.items()}}
    env.update(_cuda_info())
    env["steps"] = [{k: v for k, v in asdict(s).items() if k != "env"} | {"env": s.env} for s in steps]
    return env


def _run(step: Step, out: Path, deadline: float) -> dict:
    left = deadline - time.monotonic()
    limit = min(step.timeout_s, left)
    res = {"name": step.name, "limit_s": round(limit, 1)}
    if limit < 10:
        res.update(status="skipped", reason=f"the budget is spent ({left:.0f} s left)")
        return res
    log = out / step.log if step.log else None
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1", **step.env)
    try:
        with open(log, "w") if log else open(os.devnull, "w") as fh:
            proc = subprocess.run(step.argv, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                  timeout=limit, start_new_session=True)
        res.update(status="pass" if proc.returncode == 0 else "fail", rc=proc.returncode)
    except subprocess.TimeoutExpired:
        res.update(status="timeout")
    except OSError as exc:
        res.update(status="error", reason=str(exc))
    res["seconds"] = round(time.monotonic() - t0, 1)
    if log and log.exists():
        res["tail"] = log.read_text(errors="replace").strip().splitlines()[-3:]
    return res


def run(steps, out: Path, budget_s: float, jobs: int, bench_quick_s: float = 150) -> list[dict]:
    deadline = time.monotonic() + budget_s
    results = []
    for phase in sorted({s.phase for s in steps}):
        todo = [s for s in steps if s.phase == phase]
        for s in todo:
            if s.skipped:
                print(f"[gpu-check] {s.name}: skipped ({s.skipped})", flush=True)
                results.append({"name": s.name, "status": "skipped", "reason": s.skipped})
        todo = [s for s in todo if not s.skipped]
        if phase == 3:                              # the bench: full if the time is there, else --quick
            for s in todo:
                if deadline - time.monotonic() < s.timeout_s and "--quick" not in s.argv:
                    s.argv.insert(s.argv.index("--json"), "--quick")
                    s.timeout_s = min(s.timeout_s, bench_quick_s)
        workers = 1 if phase in (0, 3) else (len(todo) if phase == 1 else jobs)
        with cf.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futs = {pool.submit(_run, s, out, deadline): s for s in todo}
            for fut in cf.as_completed(futs):
                r = fut.result()
                results.append(r)
                print(f"[gpu-check] {r['name']}: {r['status']}" + (f" in {r['seconds']} s" if "seconds" in r else "")
                      + (f" ({r['reason']})" if r.get("reason") else ""), flush=True)
    return results


def execute_one(src: str, dest: str, smoke: bool) -> int:
    """Execute lesson ``src`` in its own folder (relative paths as in the course) and store it at ``dest``."""
    sys.path.insert(0, str(ROOT))
    from amp_edu.course import notebook
    from amp_edu.course.limits import DEFAULT, GradeLimits
    nb = notebook.read(ROOT / src)
    t0 = time.monotonic()
    limits = GradeLimits(DEFAULT.cell_s * 2, None, DEFAULT.start_s)
    notebook.execute(nb, (ROOT / src).parent, allow_errors=True, limits=limits,
                     env={"AMP_EDU_SMOKE": "1" if smoke else "0"})
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    notebook.write(nb, dest)
    errs = [e for e in notebook.error_outputs(nb) if "NBVAL_RAISES_EXCEPTION" not in nb.cells[e[0]].source]
    print(f"{src} -> {dest}: {'OK' if not errs else 'ERRORS'} in {time.monotonic() - t0:.0f} s")
    for idx, ename, evalue in errs:
        print(f"  cell {idx}: {ename}: {str(evalue)[:300]}")
    return 1 if errs else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("GPU_CHECK_OUT", "build/gpu"))
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for everything (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=4, help="lessons executed at once (default %(default)s)")
    ap.add_argument("--lessons", type=int, nargs="+", metavar="N", help="only these lessons (numbers)")
    ap.add_argument("--smoke", action="store_true", help="store every lesson at smoke size")
    ap.add_argument("--skip", nargs="+", default=(), metavar="STEP",
                    help="steps to leave out: doctor, nvidia-smi, parity-tests, nbval, lesson, bench")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write environment.json, run nothing")
    ap.add_argument("--allow-cpu", action="store_true", help="run the CUDA steps without CUDA (to test this script)")
    ap.add_argument("--execute", nargs=2, metavar=("LESSON", "DEST"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.execute:
        return execute_one(*args.execute, smoke=args.smoke)
    t0 = time.monotonic()
    out = (ROOT / args.out) if not os.path.isabs(args.out) else Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info = _cuda_info()
    cuda = bool(info.get("cuda_available"))
    try:
        steps = plan(cuda=cuda, out=str(out), budget_s=args.budget, jobs=args.jobs,
                     lesson_numbers=set(args.lessons) if args.lessons else None, smoke=args.smoke,
                     allow_cpu=args.allow_cpu, skip=tuple(args.skip))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"[gpu-check] {'CUDA: ' + info.get('gpu', '?') if cuda else 'no CUDA device'}; torch {info.get('torch')}; "
          f"budget {args.budget:.0f} s; output in {out}", flush=True)
    for s in steps:
        print(f"  phase {s.phase}  {s.name:<44} " + (f"SKIP: {s.skipped}" if s.skipped else
              f"≤{s.timeout_s:.0f} s  {s.why}"), flush=True)
    env = environment(steps, args)
    (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
    if args.dry_run:
        print(f"[gpu-check] dry run: nothing executed; wrote {out / 'environment.json'} in {time.monotonic() - t0:.1f} s")
        return 0
    results = run(steps, out, args.budget, args.jobs)
    env["results"] = results
    env["total_s"] = round(time.monotonic() - t0, 1)
    (out / "environment.json").write_text(json.dumps(env, indent=1, default=str))
    bad = [r["name"] for r in results if r["status"] in ("fail", "timeout", "error")]
    print(f"[gpu-check] done in {env['total_s']} s: {len(results) - len(bad)} of {len(results)} steps passed or "
          f"were skipped" + (f"; not passed: {', '.join(bad)}" if bad else "") + f"; see {out / 'environment.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
