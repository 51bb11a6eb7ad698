"""Grading a class: real kernels on tiny generated notebooks, with short time limits.

Every case the class grader promises is run for real: a cell that never returns, a kernel that
exits or segfaults, a file that is not a notebook, a folder of mixed submissions (CSV/JSON, exit
status, files left untouched, ``--jobs 1`` == ``--jobs 2``), and SIGINT/SIGTERM in the middle of a
run with the processes counted before and after.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from amp_edu.__main__ import main
from amp_edu.course import classgrade, kernel
from amp_edu.course.limits import GradeLimits

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 3.0            # the per-cell limit these tests grade with (seconds)
SLACK = 3.0            # "within a few seconds of the limit"

SOLVED = "def f(x):\n    return 2 * x"
CHECK_F = ("# CHECK: double\n"
           "assert f(2) == 4, 'FAIL double\\n  input: 2\\n  expected: 4\\n  got: %r\\n  hint: multiply by two' % f(2)\n"
           "print('PASS double')")
CHECK_G = "# CHECK: second\nprint('PASS second')"
HANG = "import time\nwhile True:\n    time.sleep(0.2)"


def grade_own(path, cell_s: float = LIMIT, notebook_s: float | None = None) -> classgrade.NotebookResult:
    """Grade a notebook of these tests' own (not course) checks with short limits."""
    return classgrade.grade_file(path, limits=GradeLimits(cell_s, notebook_s), course_checks=False)


def write_nb(path: Path, *sources: str) -> Path:
    cells = [nbformat.v4.new_markdown_cell(s[3:]) if s.startswith("MD:") else nbformat.v4.new_code_cell(s)
             for s in sources]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))
    return path


def by_check(result: classgrade.NotebookResult) -> dict:
    return {c.name: c for c in result.checks}


def _name(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:          # it ended meanwhile (the sandbox starts short-lived helpers)
        return ""


def kernel_pids(folder: Path) -> set[int]:
    """Every ipykernel started by :mod:`amp_edu.course.kernel` (any parent, orphans included) that
    runs in ``folder``: a kernel's cwd is its notebook's folder, so a test counts its own kernels
    and not those another test file grades meanwhile (the course tier runs two workers)."""
    found = set()
    for p in psutil.process_iter(["cmdline", "cwd"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ipykernel_launcher" in cmd and "amp_edu_kernel_" in cmd and \
                Path(p.info["cwd"] or "/").is_relative_to(folder):
            found.add(p.pid)
    return found


def test_a_hanging_cell_is_a_timeout_at_its_cell_and_the_kernel_is_killed(tmp_path):
    nb = write_nb(tmp_path / "hang.ipynb", "MD:# title", SOLVED, CHECK_F, HANG, CHECK_G)
    before = kernel_pids(tmp_path)
    t0 = time.monotonic()
    r = grade_own(nb)
    elapsed = time.monotonic() - t0
    checks = by_check(r)
    assert checks["double"].status == "pass"
    assert checks["second"].status == "timeout"
    assert "not run: cell 4 (`import time`) timed out" in checks["second"].detail
    assert f"{LIMIT:g} s limit per cell" in checks["second"].detail
    # kernel start (~1 s) + the limit + the kill, and nothing of the kernel left afterwards
    assert elapsed < LIMIT + SLACK + 2, elapsed
    assert kernel_pids(tmp_path) <= before and not kernel.LIVE


def test_the_hanging_check_cell_itself_reports_how_long_it_ran(tmp_path):
    nb = write_nb(tmp_path / "hang.ipynb", SOLVED, "# CHECK: double\n" + HANG)
    [c] = grade_own(nb).checks
    assert (c.status, c.ok) == ("timeout", False)
    assert c.detail == f"cell 2 (`# CHECK: double`) did not finish within the {LIMIT:g} s limit per cell; kernel killed"
    ran = float(c.message.split("was still running after ")[1].split(" s")[0])
    assert LIMIT <= ran < LIMIT + 1, c.message


def test_the_notebook_as_a_whole_is_bounded_too(tmp_path):
    step = "import time; time.sleep(1.5)"
    nb = write_nb(tmp_path / "slow.ipynb", step, step, step, CHECK_G)
    [c] = grade_own(nb, notebook_s=2.5).checks
    assert c.status == "timeout" and "the notebook's 2.5 s limit" in c.message, c.message


@pytest.mark.parametrize("death, how", [
    ("import os; os._exit(3)", "exit status 3"),
    ("import ctypes; ctypes.string_at(0)", "killed by SIGSEGV"),
    # what the out-of-memory killer does to a process
    ("import os; os.kill(os.getpid(), 9)", "killed by SIGKILL (often the out-of-memory killer)"),
], ids=["os._exit", "segfault", "SIGKILL"])
def test_a_kernel_that_dies_is_reported_at_its_cell_within_seconds(tmp_path, death, how):
    nb = write_nb(tmp_path / "dies.ipynb", SOLVED, CHECK_F, death, CHECK_G)
    t0 = time.monotonic()
    r = grade_own(nb, 60)       # the limit is far away: death is noticed, not waited out
    elapsed = time.monotonic() - t0
    checks = by_check(r)
    assert checks["double"].status == "pass"
    assert checks["second"].status == "error"
    assert checks["second"].detail == f"not run: kernel died in cell 3 (`{death}`): {how}"
    assert elapsed < 10, elapsed
    assert not kernel.LIVE


def test_kill_ends_the_whole_process_tree_even_children_that_left_the_group(tmp_path):
    code = ("import subprocess\n"
            "a = subprocess.Popen(['sleep', '97'])\n"
            "b = subprocess.Popen(['sleep', '98'], start_new_session=True)\n"
            "print(a.pid, b.pid)")
    with kernel.JupyterKernel(tmp_path) as k:
        run = k.run(code, timeout=10)
        assert run.status == "ok", run
        pids = [int(x) for x in run.stdout.split()] + [k.proc.pid]
        assert all(psutil.pid_exists(p) for p in pids)
    gone = [p for p in pids if not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE]
    assert gone == pids


def test_files_that_are_not_notebooks_are_error_rows(tmp_path):
    (tmp_path / "notjson.ipynb").write_text("this is not json")
    (tmp_path / "list.ipynb").write_text("[1, 2]")
    (tmp_path / "notes.txt").write_text("hello")
    write_nb(tmp_path / "nochecks.ipynb", "x = 1")
    for name, words in [("notjson.ipynb", "not a notebook"), ("list.ipynb", "not a notebook"),
                        ("notes.txt", "not a .ipynb file"), ("nochecks.ipynb", "no check cells")]:
        r = grade_own(tmp_path / name)
        [row] = classgrade.rows([r])
        assert (row["check"], row["status"]) == ("(notebook)", "error"), row
        assert words in row["detail"], row


def make_class(folder: Path) -> dict[str, Path]:
    """A folder of submissions as a class hands them in (and a checkpoint to be skipped)."""
    (folder / "frank").mkdir(parents=True)
    (folder / "frank" / "ex.ipynb").write_text("{not json")
    return {
        "alice": write_nb(folder / "alice" / "ex.ipynb", "MD:# ex", SOLVED, CHECK_F, CHECK_G),
        "bob": write_nb(folder / "bob" / "ex.ipynb", "def f(x):\n    return x + 1", CHECK_F, CHECK_G),
        "carol": write_nb(folder / "carol" / "ex.ipynb", SOLVED, CHECK_F, HANG, CHECK_G),
        "dave": write_nb(folder / "dave" / "ex.ipynb", "import os; os._exit(3)", CHECK_F, CHECK_G),
        "erin": write_nb(folder / "erin" / "ex.ipynb", "def f(x)\n    return 2 * x", CHECK_F, CHECK_G),
        "frank": folder / "frank" / "ex.ipynb",
        "skip": write_nb(folder / "alice" / ".ipynb_checkpoints" / "ex-checkpoint.ipynb", "1/0", CHECK_G),
    }


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() + str(p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_of_mixed_submissions_csv_json_exit_status_and_jobs(tmp_path, capsys, monkeypatch):
    subs = tmp_path / "subs"
    make_class(subs)
    before = digest(subs)
    monkeypatch.chdir(tmp_path)
    csv_path, json_path = tmp_path / "grades.csv", tmp_path / "grades.json"
    rc = main(["grade", "subs", "--own-checks", "--timeout", str(LIMIT), "--jobs", "2",
               "--csv", str(csv_path), "--json", str(json_path)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert digest(subs) == before, "a submitted file was modified"

    with open(csv_path, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == ["notebook", "check", "status", "detail"]
        got = [(r["notebook"], r["check"], r["status"], r["detail"]) for r in reader]
    nb = lambda who: f"subs/{who}/ex.ipynb"  # noqa: E731
    died = "not run: kernel died in cell 1 (`import os; os._exit(3)`): exit status 3"
    hung = f"not run: cell 3 (`import time`) timed out (the {LIMIT:g} s limit per cell)"
    assert got == [
        (nb("alice"), "double", "pass", "PASS double"),
        (nb("alice"), "second", "pass", "PASS second"),
        (nb("bob"), "double", "fail", "hint: multiply by two"),
        (nb("bob"), "second", "pass", "PASS second"),
        (nb("carol"), "double", "pass", "PASS double"),
        (nb("carol"), "second", "timeout", hung),
        (nb("dave"), "double", "error", died),
        (nb("dave"), "second", "error", died),
        (nb("erin"), "double", "error", "NameError: name 'f' is not defined"),
        (nb("erin"), "second", "pass", "PASS second"),
        (nb("frank"), "(notebook)", "error",
         "not a notebook: NotJSONError: Notebook does not appear to be JSON: '{not json'"),
    ]

    data = json.loads(json_path.read_text())
    full = {(r["notebook"], r["check"]): r for r in data["rows"]}
    assert [(r["notebook"], r["check"], r["status"], r["detail"]) for r in data["rows"]] == got
    bob = full[(nb("bob"), "double")]
    assert "expected: 4" in bob["message"] and "got: 3" in bob["message"]
    assert "SyntaxError" in full[(nb("erin"), "double")]["message"]        # the earlier cell is named
    assert bob["cell"] == 2 and data["interrupted"] is False
    seconds = {n["notebook"]: n["seconds"] for n in data["notebooks"]}
    assert seconds[nb("carol")] < 2 * LIMIT + SLACK      # the hang cost about one limit, not more

    # progress on stderr, one line per notebook with its time; the table last on stdout
    assert len([ln for ln in err.splitlines() if ln.startswith("[")]) == 6
    assert f"{nb('carol')}: 1/2 checks passed; timeout:" in err and " s)" in err
    table = out[out.index("notebook  "):]
    assert "TIMEOUT" in table and "FAIL" in table and "ERROR: not a notebook" in table
    assert out.rstrip().splitlines()[-2] == "1/6 notebooks passed every check"

    # the same class with one kernel at a time gives the same rows
    again = classgrade.grade_class([subs], jobs=1, limits=GradeLimits(LIMIT), course_checks=False)
    assert [(r["notebook"], r["check"], r["status"], r["detail"]) for r in classgrade.rows(again)] == got


def test_one_notebook_keeps_the_per_check_report_and_exit_codes(tmp_path, capsys):
    ok = write_nb(tmp_path / "ok.ipynb", SOLVED, CHECK_F, CHECK_G)
    assert main(["grade", str(ok), "--own-checks", "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    assert "[PASS] double\n[PASS] second\n2/2 checks passed" in out

    bad = write_nb(tmp_path / "bad.ipynb", "def f(x):\n    return x", CHECK_F, CHECK_G)
    assert main(["grade", str(bad), "--own-checks", "--timeout", "30"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] double\n       AssertionError: FAIL double" in out and "hint: multiply by two" in out


def test_bad_usage_exits_2(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "missing.ipynb")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["grade", str(tmp_path / "empty")]) == 2
    assert "no .ipynb notebook found" in capsys.readouterr().err
    one = write_nb(tmp_path / "one.ipynb", CHECK_G)
    assert main(["grade", str(one), "--csv", str(tmp_path / "no" / "such.csv")]) == 2
    assert "its folder does not exist" in capsys.readouterr().err
    for bad in (["--jobs", "0"], ["--timeout", "-1"], ["--timeout", "soon"], []):
        with pytest.raises(SystemExit) as exc:
            main(["grade", *bad] + ([str(tmp_path)] if bad else []))
        assert exc.value.code == 2


def test_grade_class_jobs_must_be_a_positive_int(tmp_path):
    with pytest.raises(ValueError, match="jobs"):
        classgrade.grade_class([tmp_path], jobs=0)
    for bad in (True, 2.0, "2"):
        with pytest.raises(TypeError, match="jobs"):
            classgrade.grade_class([tmp_path], jobs=bad)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_run_reports_it_and_leaves_no_process(tmp_path, sig):
    """Grade [alice (quick), carol (hangs with a child process), zed]: signal while carol hangs."""
    subs = tmp_path / "subs"
    write_nb(subs / "a_alice.ipynb", SOLVED, CHECK_F, CHECK_G)
    write_nb(subs / "b_carol.ipynb", SOLVED, CHECK_F,
             "import subprocess\nchild = subprocess.Popen(['sleep', '123.25'])\n" + HANG, CHECK_G)
    write_nb(subs / "c_zed.ipynb", SOLVED, CHECK_F)
    me = psutil.Process()
    children_before = {p.pid for p in me.children(recursive=True)}
    csv_path = tmp_path / "partial.csv"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "amp_edu", "grade", str(subs), "--own-checks", "--timeout", "120",
                             "--csv", str(csv_path)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:       # wait until carol's kernel and its child run
            family = psutil.Process(proc.pid).children(recursive=True)
            seen |= {p.pid for p in family}
            if any(_name(p) == "sleep" for p in family):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the hanging notebook never started")
        assert len(seen) >= 2                      # a kernel and its child
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert stopped_in < 8, stopped_in
    assert proc.returncode == 128 + sig, (proc.returncode, out, err)
    assert "graded 1/3 notebooks" in out and "(interrupted)" in out
    assert "a_alice.ipynb  pass    pass" in out
    rows = list(csv.DictReader(open(csv_path)))
    assert [(r["check"], r["status"]) for r in rows] == [
        ("double", "pass"), ("second", "pass"),
        ("(notebook)", "error"), ("(notebook)", "error")]
    assert rows[-1]["detail"] == "not graded: the run was interrupted"
    survivors = [p for p in seen if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert survivors == []
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "123.25"]]
    assert {p.pid for p in me.children(recursive=True)} == children_before


def test_a_stop_from_another_thread_ends_a_running_cell_and_kill_all_is_safe_meanwhile(tmp_path):
    import threading
    stop = threading.Event()
    box = {}

    def worker():
        with kernel.JupyterKernel(tmp_path, stop=stop) as k:
            box["pid"] = k.proc.pid
            box["run"] = k.run(HANG, timeout=60)

    t = threading.Thread(target=worker)
    t.start()
    deadline = time.monotonic() + 30
    while "pid" not in box and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    t0 = time.monotonic()
    stop.set()
    kernel.kill_all()            # as the signal path does: processes only, sockets left to the owner
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 5
    assert box["run"].status == "stopped"
    assert not psutil.pid_exists(box["pid"]) or psutil.Process(box["pid"]).status() == psutil.STATUS_ZOMBIE
    assert not kernel.LIVE


def test_a_flood_of_output_is_capped_and_still_times_out(tmp_path):
    with kernel.JupyterKernel(tmp_path) as k:
        run = k.run("while True:\n    print('x' * 1000)", timeout=LIMIT)
    assert run.status == "timeout" and run.seconds < LIMIT + SLACK
    assert len(run.stdout) <= kernel.MAX_OUTPUT + 50 and run.stdout.endswith("[output truncated]")
