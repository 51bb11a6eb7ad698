"""checks.core: how a judge reads what the learner's code did, and the Check's two runs."""

import pytest
import torch

from amp_edu.checks.core import NOT_DONE_HINT, Check, CheckFailed, judge_each, learner_result, returned
from amp_edu.plans import byvalue, runner


def _not_done(*a, **k):
    raise NotImplementedError()


def test_returns_the_answer():
    assert returned("f", runner.call(lambda x, *, k: x + k, 1, k=2)) == 3


def test_not_done_yet():
    with pytest.raises(CheckFailed) as e:
        returned("f", runner.call(_not_done, 1), input="x=1", expected=2)
    msg = str(e.value)
    assert "got:      'NotImplementedError'" in msg and NOT_DONE_HINT in msg and "x=1" in msg


def test_not_done_is_never_returned_even_when_runtime_errors_are():
    with pytest.raises(CheckFailed, match="not done yet"):
        returned("f", runner.call(_not_done), returns=("RuntimeError",))
    err = returned("f", runner.call(lambda: (_ for _ in ()).throw(KeyError("banned"))), returns=("LookupError",))
    assert err["type"] == "KeyError" and "LookupError" in err["bases"] and "banned" in err["message"]


def test_crash_names_the_exception_and_hint():
    def boom():
        raise KeyError("w")
    with pytest.raises(CheckFailed) as e:
        returned("f", runner.call(boom), hint=lambda err: f"saw {err['type']}")
    assert "KeyError: 'w'" in str(e.value) and "saw KeyError" in str(e.value)
    with pytest.raises(CheckFailed, match="your function raised on this input"):
        returned("f", runner.call(boom))


def test_an_exception_subclass_of_the_learners_travels_by_its_builtin_bases():
    class Mine(ValueError):
        def __str__(self):
            raise RuntimeError("no message for you")
    err = returned("f", byvalue.roundtrip(runner.call(lambda: (_ for _ in ()).throw(Mine()))), returns=("ValueError",))
    assert err["type"] == "Mine" and err["bases"][0] == "ValueError" and "could not be read" in err["message"]


@pytest.mark.parametrize("outcome", [None, {"ok": 1, "raised": 2}, {"nope": 1}, [1], {"raised": {"type": 1}}])
def test_unreadable_outcomes_fail(outcome):
    with pytest.raises(CheckFailed, match="could not read|unreadable"):
        returned("f", outcome)


def test_same_bits_tells_signed_zeros_and_last_bits_apart_but_not_nan_payloads():
    from amp_edu.checks.core import same, same_bits
    z, nz = torch.tensor([0.0]), torch.tensor([-0.0])
    assert same(z, nz) and not same_bits(z, nz)
    one = torch.tensor([1.0])
    assert not same_bits(one, torch.nextafter(one, torch.tensor([2.0])))
    other_nan = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert same_bits(torch.tensor([float("nan")]), other_nan)
    assert not same_bits(one.double(), one) and not same_bits([1.0], one)


def _double_check() -> Check:
    return Check("double", cases=lambda seed: [(float(seed),), (2.5,)], plan=runner.each,
                 judge=lambda cases, got: judge_each("double", cases, got, lambda x: 2 * x))


def test_a_check_runs_whole_in_a_notebook_and_prints_its_pass_line(capsys):
    assert _double_check()(lambda x: 2 * x) is None
    assert capsys.readouterr().out == "PASS double: 2 cases\n"
    with pytest.raises(CheckFailed, match="expected: 0.0"):
        _double_check()(lambda x: x + 2)


def test_the_plan_stops_at_the_first_raise_and_the_judge_names_that_case():
    calls = []

    def learner(x):
        calls.append(x)
        raise ZeroDivisionError("oops")
    with pytest.raises(CheckFailed, match="ZeroDivisionError: oops"):
        _double_check()(learner)
    assert calls == [0.0]


def test_learner_result_names_a_value_passed_instead_of_a_function():
    with pytest.raises(CheckFailed, match="pass the function itself"):
        learner_result("double", {"learner": [{"callable": False, "type": "float"}], "result": None})
    with pytest.raises(CheckFailed, match="pass the function itself"):
        _double_check()(3.0)


def test_a_check_is_built_from_callables():
    with pytest.raises(TypeError, match="plan must be callable"):
        Check("x", cases=lambda s: [], plan=None, judge=lambda c, r: "")
