"""The judge and the kernel's package: no expected value in the learner's process, verdicts by value."""

import io
import json
import subprocess
import sys
import textwrap

import pytest

from amp_edu.checks import l01, l04
from amp_edu.course import ROOT, judge, kernelpackage
from amp_edu.plans import byvalue, runner



@pytest.fixture(scope="module")
def kernel_package(tmp_path_factory):
    return kernelpackage.build(tmp_path_factory.mktemp("k"), ROOT)


def test_the_kernel_package_holds_no_check_and_no_judge(kernel_package):
    pkg = kernel_package / "amp_edu"
    assert (pkg / "plans" / "runner.py").is_file() and (pkg / "formats").exists()
    assert not (pkg / "course" / "judge.py").exists()
    stub = (pkg / "checks" / "l01.py").read_text()
    assert "_reference" not in stub and "decompose" not in stub and "Check" not in stub
    assert {p.name for p in (pkg / "checks").iterdir()} >= {"__init__.py", "l01.py", "l04.py"}
    assert not (pkg / "checks" / "core.py").exists() and not (pkg / "checks" / "rules.py").exists()


def test_the_stand_ins_import_and_say_where_checks_run(kernel_package):
    code = textwrap.dedent("""
        import amp_edu, amp_edu.checks.l01 as l01, amp_edu.checks.l04 as l04
        assert amp_edu.__file__.startswith(%r), amp_edu.__file__
        from amp_edu.checks.l01 import check_decode, check_fp16_fate
        check_decode(lambda *a: 0.0)
        try:
            import amp_edu.checks.core
        except ImportError:
            print("no core")
        try:
            import amp_edu.course.judge
        except ImportError:
            print("no judge")
    """ % str(kernel_package))
    out = subprocess.run([sys.executable, "-c", code], cwd=kernel_package, capture_output=True, text=True,
                         env={"PYTHONPATH": str(kernel_package), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["(this check is graded by the course's judge, outside this kernel)",
                                       "no core", "no judge"]


def test_every_check_module_can_be_stood_in_for():
    from amp_edu.checks.registry import MODULES

    for module in MODULES:
        assert "def _graded_outside" in kernelpackage.stub_source(module)


def plan_then_judge(check, seed, *learner, tmp_path):
    """What the class grader does, in one process: inputs file, plan, answer file, verdict."""
    inp, out = tmp_path / "in.bin", tmp_path / "out.bin"
    where = judge.inputs(_module_of(check), _name_of(check), seed, str(inp))
    plan = getattr(__import__(where["plan"][0], fromlist=["x"]), where["plan"][1])
    runner.run(plan, str(inp), str(out), *learner)
    return judge.verdict(_module_of(check), _name_of(check), seed, str(out))


def _module_of(check):
    return {id(l01.check_decode): "amp_edu.checks.l01", id(l01.check_fp16_fate): "amp_edu.checks.l01",
            id(l04.check_unscale): "amp_edu.checks.l04", id(l04.check_update): "amp_edu.checks.l04"}[id(check)]


def _name_of(check):
    mod = __import__(_module_of(check), fromlist=["x"])
    return next(n for n in mod.__all__ if getattr(mod, n) is check)


def fate_ok(x):
    import math
    a = abs(x)
    if math.isnan(x):
        return "nan"
    if a >= 65520:
        return "inf"
    if a <= 2.0 ** -25:
        return "zero"
    if a < 2.0 ** -14 - 2.0 ** -25:
        return "subnormal"
    return "normal"


def test_the_judge_passes_a_right_answer_and_fails_a_wrong_one(tmp_path):
    assert plan_then_judge(l01.check_fp16_fate, 7, fate_ok, tmp_path=tmp_path) == {
        "status": "pass", "message": "PASS fp16_fate: 102 cases"}
    wrong = plan_then_judge(l01.check_fp16_fate, 7, lambda x: "normal", tmp_path=tmp_path)
    assert wrong["status"] == "fail" and wrong["message"].startswith("FAIL fp16_fate")


def test_seeds_draw_different_inputs():
    a, b = l01.check_fp16_fate.cases(1), l01.check_fp16_fate.cases(2)
    assert repr(a[:30]) == repr(b[:30]) and a[30:] != b[30:]


def test_a_lying_float_fails_in_the_judge(tmp_path):
    class Yes(str):
        def __eq__(self, other):
            return True
        __hash__ = str.__hash__
    got = plan_then_judge(l01.check_fp16_fate, 3, lambda x: Yes("normal"), tmp_path=tmp_path)
    assert got["status"] == "fail" and "str subclass" in got["message"]


def test_an_answer_file_the_kernel_forged_is_judged_by_value(tmp_path):
    out = tmp_path / "out.bin"
    out.write_bytes(b"\x80\x04pickle")                                 # not this format: refused
    judge.inputs("amp_edu.checks.l01", "check_fp16_fate", 5, str(tmp_path / "in.bin"))
    got = judge.verdict("amp_edu.checks.l01", "check_fp16_fate", 5, str(out))
    assert got["status"] == "fail" and "could not be read by value" in got["message"]
    missing = judge.verdict("amp_edu.checks.l01", "check_fp16_fate", 5, str(tmp_path / "none.bin"))
    assert missing["status"] == "error" and "wrote no answer" in missing["message"]


def test_the_judge_refuses_what_is_not_a_course_check(tmp_path):
    replies = io.StringIO()
    requests = io.StringIO("\n".join(json.dumps(r) for r in [
        {"op": "inputs", "module": "os", "function": "system", "seed": 1, "path": str(tmp_path / "x")},
        {"op": "inputs", "module": "amp_edu.checks.l01", "function": "RULES", "seed": 1, "path": str(tmp_path / "x")},
        {"op": "rm -rf", "module": "amp_edu.checks.l01", "function": "check_decode", "seed": 1, "path": "x"},
    ]) + "\n")
    stdout = sys.stdout
    try:
        judge.serve(requests, replies)
    finally:
        sys.stdout = stdout
    answers = [json.loads(line) for line in replies.getvalue().splitlines()]
    assert [a["status"] for a in answers] == ["error"] * 3
    assert "not a course check module" in answers[0]["message"] and "is not a course check" in answers[1]["message"]


def test_the_judge_process_answers_and_is_restarted_after_a_timeout(tmp_path):
    with judge.Judge(env={"AMP_EDU_SMOKE": "1"}) as j:
        where = j.ask({"op": "inputs", "module": "amp_edu.checks.l01", "function": "check_fp16_fate", "seed": 9,
                       "path": str(tmp_path / "in.bin")}, timeout=120)
        assert where == {"plan": ["amp_edu.plans.runner", "each"]}
        cases = byvalue.load(tmp_path / "in.bin")
        byvalue.save({"learner": runner.learner_info([fate_ok]), "result": runner.each(cases, fate_ok)},
                     tmp_path / "out.bin")
        got = j.ask({"op": "verdict", "module": "amp_edu.checks.l01", "function": "check_fp16_fate", "seed": 9,
                     "path": str(tmp_path / "out.bin")}, timeout=120)
        assert got["status"] == "pass"
        with pytest.raises(judge.JudgeError, match="did not answer within"):
            j.ask({"op": "inputs", "module": "amp_edu.checks.l01", "function": "check_decode", "seed": 1,
                   "path": str(tmp_path / "d.bin")}, timeout=0.001)
        again = j.ask({"op": "verdict", "module": "amp_edu.checks.l01", "function": "check_fp16_fate", "seed": 9,
                       "path": str(tmp_path / "out.bin")}, timeout=120)
        assert again["status"] == "pass"
