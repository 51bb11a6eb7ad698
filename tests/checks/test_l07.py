"""Lesson 07 graders: the reference passes; plausible wrong answers fail with a useful message."""

import math

import pytest
import torch

from amp_edu.checks import l07
from amp_edu.checks.core import CheckFailed
from checkhelp import assert_drawn_and_passing, verdict  # noqa: E402  (tests/ is on sys.path)


def predict(widths, batch, dtype, *, x=True, relu_twice=False, copies=True, first_copy=False, params=False,
            size=None, last=False):
    amp = dtype != torch.float32
    s = size or dtype.itemsize
    hidden = sum(widths[1:-1])
    total = batch * hidden * s * (2 if relu_twice else 1) + (batch * widths[0] * s if x else 0)
    if last:
        total += batch * widths[-1] * s
    start = 0 if first_copy else 1
    w = sum(widths[i] * widths[i + 1] for i in range(start, len(widths) - 1))
    if amp and copies:
        total += w * s
    if params and not amp:
        total += w * 4
    return total


def largest(widths, dtype, budget, *, fixed=True, rounding=math.floor):
    per = predict(widths, 2, dtype) - predict(widths, 1, dtype)
    f = predict(widths, 1, dtype) - per if fixed else 0
    return max(0, rounding((budget - f) / per))


def test_reference_passes(capsys):
    l07.check_predict_saved_bytes(predict)
    l07.check_predict_largest_batch(largest)
    out = capsys.readouterr().out
    assert "PASS predict_saved_bytes" in out and "PASS predict_largest_batch" in out


@pytest.mark.parametrize("kw, hint", [
    (dict(size=4), "2 bytes per element"),
    (dict(copies=False), "copy of each weight"),
    (dict(first_copy=True), "first Linear"),
    (dict(relu_twice=True), "count it once"),
    (dict(x=False), "input x"),
    (dict(params=True), "parameters are not saved activations"),
    (dict(last=True), "last Linear"),
])
def test_wrong_predictions_fail_with_the_slip_named(kw, hint):
    with pytest.raises(CheckFailed) as e:
        l07.check_predict_saved_bytes(lambda w, b, d: predict(w, b, d, **kw))
    msg = str(e.value)
    assert "FAIL predict_saved_bytes" in msg and "input:" in msg and "expected:" in msg
    assert hint in msg


@pytest.mark.parametrize("wrong, hint", [
    (lambda w, d, b: largest(w, d, b, fixed=False), "weight copies"),
    (lambda w, d, b: largest(w, d, b, rounding=round), "round down"),
    (lambda w, d, b: math.floor((b - (predict(w, 1, d) - (predict(w, 2, d) - predict(w, 1, d))))
                                / (predict(w, 2, d) - predict(w, 1, d))), "exceed the budget"),  # no max(0, ...)
    (lambda w, d, b: max(-1, math.floor(((predict(w, 1, d) - (predict(w, 2, d) - predict(w, 1, d))) - b)
                                        / (predict(w, 2, d) - predict(w, 1, d)))), "not the other way round"),
    (lambda w, d, b: largest(w, d, b, rounding=math.ceil), "round down"),
    (lambda w, d, b: largest(w, d, b) + 0.5, "a whole number"),
], ids=["fixed_ignored", "round", "no_clamp", "sign_flipped", "ceil", "not_integer"])
def test_wrong_largest_batch_fails(wrong, hint):
    with pytest.raises(CheckFailed) as e:
        l07.check_predict_largest_batch(wrong)
    assert "FAIL predict_largest_batch" in str(e.value) and hint in str(e.value)


# --- the check in three parts: drawn cases, answers by value ------------------------------------


@pytest.mark.parametrize("check, fn", [(l07.check_predict_saved_bytes, predict),
                                       (l07.check_predict_largest_batch, largest)], ids=["saved", "largest"])
def test_drawn_cases_differ_by_seed_and_the_reference_passes_for_each(check, fn):
    assert_drawn_and_passing(check, fn)


def test_the_pass_lines_are_returned():
    n = len(l07.check_predict_saved_bytes.cases(0))
    assert l07.check_predict_saved_bytes(predict) == f"PASS predict_saved_bytes: {n} cases"
    n = len(l07.check_predict_largest_batch.cases(0))
    assert l07.check_predict_largest_batch(largest) == f"PASS predict_largest_batch: {n} cases"


class AlwaysEqual(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def test_lying_answers_fail_even_holding_the_right_value():
    with pytest.raises(CheckFailed, match="int subclass"):
        l07.check_predict_saved_bytes(lambda w, b, d: AlwaysEqual(predict(w, b, d)))
    with pytest.raises(CheckFailed, match="int subclass"):
        l07.check_predict_largest_batch(lambda w, d, b: AlwaysEqual(largest(w, d, b)))
    with pytest.raises(CheckFailed, match="FAIL predict_saved_bytes"):
        l07.check_predict_saved_bytes(lambda w, b, d: torch.tensor(predict(w, b, d)))


def test_answers_replayed_from_the_self_check_seed_fail_on_another_seed():
    answers = [predict(*case) for case in l07.check_predict_saved_bytes.cases(0)]
    calls = iter(range(10 ** 6))

    def replay(*case):
        return answers[next(calls)]
    assert verdict(l07.check_predict_saved_bytes, 0, replay).startswith("PASS")
    calls = iter(range(10 ** 6))
    with pytest.raises(CheckFailed, match="FAIL predict_saved_bytes"):
        verdict(l07.check_predict_saved_bytes, 1, replay)
