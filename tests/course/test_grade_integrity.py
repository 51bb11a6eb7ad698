"""Grade integrity: every cheat a learner tried (issue 22), written as the learner would, on a class.

Each attack is a copy of a shipped exercise with the learner's code added. The class is graded
with the real grader (sandboxed where bubblewrap runs, and once without a sandbox), against a
*copy* of the amp_edu package so that an attack that writes to the package cannot touch this
checkout. For every attack the test asserts its status and what the detail says was found, and
that the honest notebooks' rows are the same with and without the attackers, in either order.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import psutil
import pytest

from amp_edu.course import classgrade, kernel, notebook, sandbox
from handins import copy_package, exercise, solved, with_cell  # noqa: E402  (tests/ is on sys.path)

ROOT = Path(__file__).resolve().parents[2]
EX01 = "01_number_formats.ipynb"
EX06 = "06_tensor_cores.ipynb"
SANDBOX = sandbox.bwrap_problem()
needs_bwrap = pytest.mark.skipif(bool(SANDBOX), reason=f"no sandbox here: {SANDBOX}")
DAEMON = "4242.125"          # the double-forked daemon's `sleep` argument, to find it afterwards


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """A private copy of the amp_edu package (compiled, so kernels need not write bytecode)."""
    return copy_package(tmp_path_factory.mktemp("course"))


REBIND = "check_decode = check_fp16_fate = lambda f: None"
PATCH_MODULE = ("import amp_edu.checks.l01 as l01\n"
                "l01.check_decode = l01.check_fp16_fate = lambda f: print('PASS')")
PATCH_CODE = ("import amp_edu.checks.l01 as l01\n"
              "l01.check_decode.__code__ = (lambda f: print('PASS')).__code__\n"
              "l01.check_fp16_fate.__code__ = (lambda f: print('PASS')).__code__")
PATCH_CORE = ("import amp_edu.checks.core as core, amp_edu.checks.l01 as l01\n"
              "core.same = lambda *a, **k: True\nl01.same = core.same")
FAKE_MODULE = ("import sys, types\n"
               "fake = types.ModuleType('amp_edu.checks.l01')\n"
               "fake.check_decode = fake.check_fp16_fate = lambda f: print('PASS')\n"
               "sys.modules['amp_edu.checks.l01'] = fake\n"
               "from amp_edu.checks.l01 import check_decode, check_fp16_fate")
TRANSFORMER = ("def swallow(lines):\n"
               "    return ['try:\\n'] + ['    ' + ln for ln in lines] + ['\\nexcept BaseException:\\n    print(\"PASS\")\\n']\n"
               "get_ipython().input_transformers_cleanup.append(swallow)")
BUILTINS = ("import builtins\n_real = builtins.isinstance\n"
            "builtins.isinstance = lambda o, t: True if t is float else _real(o, t)")
TORCH = "import torch\ntorch.equal = lambda a, b: True"
DAEMON_CELL = ("import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
               f"        os.execvp('sleep', ['sleep', '{DAEMON}'])\n    os._exit(0)")
APPEND_L06 = ("import amp_edu.checks.l06 as l06\n"
              "with open(l06.__file__, 'a') as f:\n"
              "    f.write('\\ndef check_arithmetic_intensity(f):\\n    print(\"PASS\")\\n'\n"
              "            'def check_predict_bound(f):\\n    print(\"PASS\")\\n')")
ENV_AND_PROC = ("import os, glob\n"
                "ppid = int(os.environ.get('JPY_PARENT_PID', os.getppid()))\n"
                "try:\n    where = os.readlink(f'/proc/{ppid}/cwd')\nexcept OSError:\n    where = ''\n"
                "secret = os.environ.get('AMP_EDU_TEST_SECRET', '')\n"
                "print('found', sorted(glob.glob(where + '/*/*/*.ipynb'))[:3], secret)\n"
                "if secret:\n    check_decode = check_fp16_fate = lambda f: None")


def classmate_attack(subs: Path) -> str:
    """Copy alice's answers, overwrite bob's file with alice's, add a learner folder."""
    alice, bob = subs / "alice" / EX01, subs / "bob" / EX01
    return ("import json, os, shutil\n"
            f"alice, bob = {str(alice)!r}, {str(bob)!r}\n"
            "try:\n"
            "    nb = json.load(open(alice))\n"
            "    for c in nb['cells']:\n"
            "        if c['cell_type'] == 'code' and 'def ' in ''.join(c['source']):\n"
            "            exec(''.join(c['source']))\n"
            "    shutil.copyfile(alice, bob)\n"
            f"    os.makedirs({str(subs / 'zed')!r}, exist_ok=True)\n"
            f"    shutil.copyfile(alice, {str(subs / 'zed' / EX01)!r})\n"
            "except OSError as exc:\n"
            "    print('could not:', exc)")


def make_class(subs: Path, *, attackers_first: bool, attackers: bool = True) -> dict[str, Path]:
    """alice (solved), bob (shipped), carol (solved, edited check) and the attackers, each in a
    folder; ``attackers_first`` names the attackers' folders so they sort (and run) first."""
    pre = "a" if attackers_first else "z"
    honest = {"alice": solved(EX01), "bob": exercise(EX01), "carol": solved(EX01)}
    first, _ = next((i, c) for i, c in enumerate(honest["carol"].cells) if c.source.startswith("# CHECK: decode"))
    honest["carol"].cells[first].source += "\n# I checked this twice"
    plan = dict(honest)
    if attackers:
        deleted = exercise(EX01)
        deleted.cells = [c for c in deleted.cells if not c.source.startswith("# CHECK:")]
        deleted.cells.append(nbformat.v4.new_code_cell("# CHECK: mine\nprint('PASS mine')"))
        plan.update({f"{pre}_rebind": with_cell(exercise(EX01), REBIND),
                     f"{pre}_patch_module": with_cell(exercise(EX01), PATCH_MODULE),
                     f"{pre}_patch_code": with_cell(exercise(EX01), PATCH_CODE),
                     f"{pre}_patch_core": with_cell(exercise(EX01), PATCH_CORE),
                     f"{pre}_fake_module": with_cell(exercise(EX01), FAKE_MODULE),
                     f"{pre}_transformer": with_cell(exercise(EX01), TRANSFORMER),
                     f"{pre}_builtins": with_cell(exercise(EX01), BUILTINS),
                     f"{pre}_torch": with_cell(exercise(EX01), TORCH),
                     f"{pre}_deleted": deleted,
                     f"{pre}_env": with_cell(exercise(EX01), ENV_AND_PROC),
                     f"{pre}_classmates": with_cell(exercise(EX01), classmate_attack(subs)),
                     f"{pre}_daemon": with_cell(solved(EX01), DAEMON_CELL)})
    paths = {}
    for who, nb in plan.items():
        paths[who] = subs / who / EX01
        notebook.write(nb, paths[who])
    return paths


def graded(results) -> dict[str, classgrade.NotebookResult]:
    return {Path(r.notebook).parent.name: r for r in results}


def statuses(r) -> dict[str, str]:
    return {c.name: c.status for c in r.checks}


def daemons() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", DAEMON]]


TAMPERED = {"patch_module": "assigns l01.check_decode",
            "patch_code": "assigns l01.check_decode.__code__",
            "patch_core": "import amp_edu.checks.core",
            "fake_module": "sys.modules (reading frames or rewiring imports)",
            "transformer": "input_transformers_cleanup",
            "builtins": "builtins.isinstance was replaced",
            "torch": "torch.equal was replaced"}


def assert_attacks(by: dict, pre: str) -> None:
    for attack, words in TAMPERED.items():
        r = by[f"{pre}_{attack}"]
        assert set(statuses(r).values()) == {"tampered"}, (attack, statuses(r))
        assert all(words in c.detail for c in r.checks), (attack, [c.detail for c in r.checks])
        assert not r.passed
    dele = by[f"{pre}_deleted"]
    assert statuses(dele) == {"decode": "error", "fp16_fate": "error"}     # the learner's own CHECK: no row
    assert all("is missing from this notebook" in c.detail for c in dele.checks)
    assert any("`# CHECK: mine` is not one of this exercise's checks; run as ordinary code" in n for n in dele.notes)
    # rebinding a check name changes nothing (the grader runs the course's plan, the judge decides):
    # graded on its own (unsolved) answers, as are the two that found nothing to copy
    for who in ("rebind", "env"):
        assert statuses(by[f"{pre}_{who}"]) == {"decode": "fail", "fp16_fate": "fail"}, who
    mates = by[f"{pre}_classmates"]                # it execs the code it read: flagged, found or not
    assert set(statuses(mates).values()) == {"tampered"} and "exec() of code built at run time" in mates.checks[0].detail
    daemon = by[f"{pre}_daemon"]
    assert statuses(daemon) == {"decode": "pass", "fp16_fate": "pass"}
    assert any(f"sleep {DAEMON}" in n for n in daemon.notes), daemon.notes
    assert not daemons()


def honest_rows(results) -> list[tuple]:
    return [(r["notebook"].split("/")[-2], r["check"], r["status"], r["detail"])
            for r in classgrade.rows(results) if r["notebook"].split("/")[-2] in ("alice", "bob", "carol")]


@pytest.fixture(scope="module")
def honest_alone(tmp_path_factory, package) -> list[tuple]:
    """The honest learners' rows graded in a class of their own, in the sandbox: what a class with
    attackers graded before or after them must reproduce (graded once for both order tests)."""
    alone = tmp_path_factory.mktemp("alone")
    make_class(alone, attackers_first=True, attackers=False)
    return honest_rows(classgrade.grade_class([alone], jobs=2, smoke=True, isolation=sandbox.choose("bwrap"),
                                              package_root=package))


@needs_bwrap
def test_every_attack_in_the_sandbox_gets_its_status_and_honest_grades_do_not_move(tmp_path, package, monkeypatch,
                                                                                     honest_alone):
    monkeypatch.setenv("AMP_EDU_TEST_SECRET", "the grader's token")
    subs = tmp_path / "subs"
    paths = make_class(subs, attackers_first=True)
    before = {p: p.read_bytes() for p in paths.values()}
    iso = sandbox.choose("bwrap")
    results = classgrade.grade_class([subs], jobs=2, smoke=True, isolation=iso, package_root=package)
    by = graded(results)
    assert_attacks(by, "a")
    assert statuses(by["alice"]) == {"decode": "pass", "fp16_fate": "pass"}
    assert statuses(by["bob"]) == {"decode": "fail", "fp16_fate": "fail"}
    carol = {c.name: c for c in by["carol"].checks}
    assert carol["decode"].status == "pass" and carol["decode"].edited
    assert carol["decode"].detail.startswith("edited check restored:")
    assert "pass*" in classgrade.summary_table(results)
    # the sandbox stopped every write: no file changed, no folder added
    assert {p: p.read_bytes() for p in paths.values()} == before and not (subs / "zed").exists()
    assert honest_rows(results) == honest_alone


@needs_bwrap
def test_the_attackers_graded_last_change_nothing_either(tmp_path, package, honest_alone):
    subs = tmp_path / "subs"
    make_class(subs, attackers_first=False)
    iso = sandbox.choose("bwrap")
    results = classgrade.grade_class([subs], jobs=2, smoke=True, isolation=iso, package_root=package)
    assert_attacks(graded(results), "z")
    assert honest_rows(results) == honest_alone


def test_without_a_sandbox_writes_are_caught_and_reported(tmp_path, capsys):
    """No sandbox: appending to the (copied) package's l06.py, overwriting a classmate and adding a
    learner folder are ``tampered``; the classmate is graded from what was handed in; a notebook
    graded after the package changed is not graded; a double-forked daemon is still killed."""
    package = copy_package(tmp_path / "course")
    subs = tmp_path / "subs"
    notebook.write(solved(EX01), subs / "alice" / EX01)
    notebook.write(exercise(EX01), subs / "bob" / EX01)
    notebook.write(with_cell(exercise(EX01), classmate_attack(subs)), subs / "mallory" / EX01)
    notebook.write(with_cell(exercise(EX06), APPEND_L06), subs / "nina" / EX06)
    notebook.write(solved(EX06), subs / "oscar" / EX06)
    notebook.write(with_cell(solved(EX01), DAEMON_CELL), subs / "kim" / EX01)
    (subs / "quinn").mkdir()
    (subs / "quinn" / "answers.py").write_text("def decode(bits): ...\n")
    iso = sandbox.choose("none")
    results = classgrade.grade_class([subs], jobs=1, smoke=True, isolation=iso, package_root=package)
    by = graded(results)
    assert statuses(by["alice"]) == {"decode": "pass", "fp16_fate": "pass"}
    assert statuses(by["bob"]) == {"decode": "fail", "fp16_fate": "fail"}      # from the bytes handed in
    mallory = by["mallory"]
    assert set(statuses(mallory).values()) == {"tampered"}
    assert any("bob/01_number_formats.ipynb was changed" in f for f in mallory.findings), mallory.findings
    assert any("zed/01_number_formats.ipynb was added" in f for f in mallory.findings), mallory.findings
    nina = by["nina"]
    assert set(statuses(nina).values()) == {"tampered"}
    assert any("amp_edu/checks/l06.py was changed" in f for f in nina.findings), nina.findings
    assert by["oscar"].error.startswith("not graded: the course package changed during this run")
    assert statuses(by["kim"]) == {"decode": "pass", "fp16_fate": "pass"} and not daemons()
    assert by["quinn"].error == "not a notebook: 'answers.py' is not a .ipynb file"
    assert "zed" not in by                    # added during the run: not graded in it
    rows = classgrade.rows(results)
    assert ("tampered" in {r["status"] for r in rows}
            and not any(r["status"] == "pass" for r in rows if "mallory" in r["notebook"]))


def test_a_course_exercise_is_recognised_by_metadata_or_name_and_otherwise_refused(tmp_path):
    nb = exercise(EX01)
    nb.cells = [c for c in nb.cells if not c.source.startswith("# CHECK:")]
    notebook.write(nb, tmp_path / "renamed.ipynb")                  # metadata says 01
    r = classgrade.grade_file(tmp_path / "renamed.ipynb", smoke=True, isolation=sandbox.choose("auto"))
    assert r.exercise.startswith("01_number_formats (its metadata says")
    assert statuses(r) == {"decode": "error", "fp16_fate": "error"}
    nb.metadata.pop("amp_edu")
    notebook.write(nb, tmp_path / "mine.ipynb")                      # nothing says which exercise
    r = classgrade.grade_file(tmp_path / "mine.ipynb", smoke=True)
    assert r.error.startswith("not recognised as a course exercise") and "--own-checks" in r.error


def test_a_kernel_sees_neither_the_graders_environment_nor_other_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("AMP_EDU_TEST_SECRET", "hunter2")
    hidden = tmp_path / "instructor"
    hidden.mkdir()
    (hidden / "grades.csv").write_text("secret")
    work = tmp_path / "work"
    work.mkdir()
    modes = ["none"] + ([] if SANDBOX else ["bwrap"])
    for mode in modes:
        with kernel.JupyterKernel(work, isolation=sandbox.choose(mode)) as k:
            run = k.run("import os\nprint('AMP_EDU_TEST_SECRET' in os.environ, "
                        f"os.path.exists({str(hidden)!r}), len(os.listdir('/proc')))", timeout=30)
        secret, visible, _ = run.stdout.split()
        assert secret == "False", mode
        assert visible == ("True" if mode == "none" else "False"), mode   # without a sandbox it can read


def test_the_cli_warns_when_there_is_no_sandbox(tmp_path, capsys):
    from amp_edu.__main__ import main
    nb = tmp_path / "x.ipynb"
    notebook.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# CHECK: one\nprint('PASS one')")]), nb)
    assert main(["grade", str(nb), "--own-checks", "--sandbox", "none"]) == 0
    out, err = capsys.readouterr()
    assert "WITHOUT a sandbox" in err and "WITHOUT a sandbox" in out
    with pytest.raises(SystemExit):
        main(["grade", str(nb), "--sandbox", "docker"])
