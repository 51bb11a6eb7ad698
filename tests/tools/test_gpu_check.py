"""tools/gpu_check.py's plan, checked without running it: what runs where, in which budget, what is skipped."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from amp_edu.course.lessons import LESSONS

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
gc = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gc                 # dataclasses look their module up there
spec.loader.exec_module(gc)


def test_cuda_plan_runs_every_lesson_tests_and_bench_within_budget():
    steps = gc.plan(cuda=True, budget_s=540)
    names = [s.name for s in steps]
    assert not any(s.skipped for s in steps if s.name != "nvidia-smi")
    assert {f"lesson-{ls.stem}" for ls in LESSONS} <= set(names)
    nbval = next(s for s in steps if s.name == "nbval")
    assert all(ls.notebook in nbval.argv for ls in LESSONS) and "--nbval-lax" in nbval.argv
    for path in gc.PARITY_TESTS:
        assert (ROOT / path).exists(), path
    assert "tests/scaler/test_torch_port.py" in next(s for s in steps if s.name == "parity-tests").argv
    assert names[-1] == "bench" and steps[-1].phase == max(s.phase for s in steps)
    # each phase's longest step fits; phases in order fit the budget
    per_phase = {}
    for s in steps:
        per_phase[s.phase] = max(per_phase.get(s.phase, 0), s.timeout_s)
    assert per_phase[1] + per_phase[2] + per_phase[3] <= 540 * 1.4   # limits are caps; the deadline cuts the rest
    for ls in LESSONS:
        st = next(s for s in steps if s.name == f"lesson-{ls.stem}")
        assert st.env["AMP_EDU_SMOKE"] == ("1" if ls.number in gc.SMOKE_ON_GPU else "0")
        assert st.argv[-2 if ls.number in gc.SMOKE_ON_GPU else -1].endswith(f"notebooks/{ls.stem}.ipynb")
    assert {6, 10, 13}.isdisjoint(gc.SMOKE_ON_GPU)          # the compile lessons run at full GPU size


def test_cpu_plan_skips_cuda_steps_with_a_reason():
    steps = gc.plan(cuda=False)
    ran = [s.name for s in steps if not s.skipped]
    assert ran == ["doctor"]
    assert all("no CUDA" in s.skipped for s in steps if s.skipped and s.name != "nvidia-smi")
    steps = gc.plan(cuda=False, allow_cpu=True, lesson_numbers={1}, skip=("bench", "parity-tests"))
    assert [s.name for s in steps if not s.skipped] == ["doctor", "nbval", "lesson-01_number_formats"] or \
        [s.name for s in steps if not s.skipped] == ["doctor", "nvidia-smi", "nbval", "lesson-01_number_formats"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="budget"):
        gc.plan(cuda=True, budget_s=5)
    with pytest.raises(ValueError, match="jobs"):
        gc.plan(cuda=True, jobs=0)


def test_dry_run_writes_environment(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--dry-run", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["dry_run"] is True and env["torch"] and len(env["steps"]) == len(LESSONS) + 5
    assert "dry run: nothing executed" in r.stdout
