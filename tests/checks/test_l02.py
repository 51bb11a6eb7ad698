"""Graders of exercise 02: the reference passes; plausible wrong answers fail with a useful hint."""

import pytest
import torch

from amp_edu.checks import l02
from amp_edu.checks.core import CheckFailed
from checkhelp import assert_drawn_and_passing, AlwaysEqual, LyingTensor, verdict  # noqa: E402  (tests/ is on sys.path)


def ref_fraction(grads, scale):
    x = torch.cat([g.reshape(-1) for g in grads])
    nz = x != 0
    n = int(nz.sum())
    return int((nz & ((x * scale).half() == 0)).sum()) / n if n else 0.0


def test_reference_underflow_fraction_passes(capsys):
    l02.check_underflow_fraction(ref_fraction)
    assert capsys.readouterr().out.startswith("PASS underflow_fraction")


def _strict(grads, scale):
    x = torch.cat([g.reshape(-1) for g in grads]).abs() * scale
    n = int((x != 0).sum())
    return int(((x != 0) & (x < 2.0 ** -25)).sum()) / n if n else 0.0


def _floor24(grads, scale):
    x = torch.cat([g.reshape(-1) for g in grads]).abs() * scale
    n = int((x != 0).sum())
    return int(((x != 0) & (x < 2.0 ** -24)).sum()) / n if n else 0.0


def _with_zeros(grads, scale):
    x = torch.cat([g.reshape(-1) for g in grads])
    return int(((x * scale).half() == 0).sum()) / x.numel()


def _no_scale(grads, scale):
    return ref_fraction(grads, 1.0)


def _no_abs(grads, scale):
    x = torch.cat([g.reshape(-1) for g in grads]) * scale
    n = int((x != 0).sum())
    return int(((x != 0) & (x <= 2.0 ** -25)).sum()) / n if n else 0.0


def _first_only(grads, scale):
    return ref_fraction(grads[:1], scale)


def _divides_by_zero(grads, scale):
    x = torch.cat([g.reshape(-1) for g in grads])
    nz = x != 0
    return int((nz & ((x * scale).half() == 0)).sum()) / int(nz.sum())


def _returns_tensor(grads, scale):
    return torch.tensor(ref_fraction(grads, scale))


@pytest.mark.parametrize("wrong, hint", [
    (_strict, "2^-25 itself is a tie"), (_floor24, "round UP to 2^-24"), (_with_zeros, "exact zeros"),
    (_no_scale, "loss scale"), (_no_abs, "magnitude"), (_first_only, "ALL the tensors"),
    (_divides_by_zero, "ZeroDivisionError"), (_returns_tensor, "Python float"),
])
def test_wrong_underflow_fractions_fail(wrong, hint):
    with pytest.raises(CheckFailed) as e:
        l02.check_underflow_fraction(wrong)
    msg = str(e.value)
    assert msg.startswith("FAIL underflow_fraction") and "input:" in msg and "expected:" in msg
    assert hint in msg, msg


def ref_lost(w, u):
    return ((w.float() - u).half() == w) & (u != 0)


def test_reference_lost_updates_passes(capsys):
    l02.check_lost_updates(ref_lost)
    assert capsys.readouterr().out.startswith("PASS lost_updates")


@pytest.mark.parametrize("wrong, hint", [
    (lambda w, u: (u.abs() < 2.0 ** -11 * w.float().abs()) & (u != 0), "rule of thumb"),
    (lambda w, u: (w.float() - u).half() == w, "exactly 0"),
    (lambda w, u: ((w - u.half()) == w) & (u != 0), "round the update to fp16 first"),
    (lambda w, u: ((w.float() - u).half() != w) & (u != 0), "lost means"),
    (lambda w, u: ((w.float() - u).half() == w).float(), "bool tensor"),
    (lambda w, u: ((w.float() + u).half() == w) & (u != 0), "subtracted"),
])
def test_wrong_lost_updates_fail(wrong, hint):
    with pytest.raises(CheckFailed) as e:
        l02.check_lost_updates(wrong)
    assert hint in str(e.value), str(e.value)


# --- the check in three parts: drawn cases, answers by value ------------------------------------


@pytest.mark.parametrize("check, fn", [(l02.check_underflow_fraction, ref_fraction),
                                       (l02.check_lost_updates, ref_lost)], ids=["underflow", "lost"])
def test_drawn_cases_differ_by_seed_and_the_reference_passes_for_each(check, fn):
    assert_drawn_and_passing(check, fn)


def test_the_pass_line_is_returned_and_counts_every_case(capsys):
    line = l02.check_underflow_fraction(ref_fraction)
    assert line == f"PASS underflow_fraction: {len(l02.check_underflow_fraction.cases(0))} cases"
    assert l02.check_lost_updates(ref_lost) == f"PASS lost_updates: {len(l02.check_lost_updates.cases(0))} cases"


def test_a_lying_float_fails():
    with pytest.raises(CheckFailed, match="FAIL underflow_fraction"):
        l02.check_underflow_fraction(lambda grads, scale: AlwaysEqual(0.5))
    # even holding the right value: it is not a plain float
    with pytest.raises(CheckFailed, match="float subclass"):
        l02.check_underflow_fraction(lambda grads, scale: AlwaysEqual(ref_fraction(grads, scale)))


def test_a_lying_tensor_fails():
    with pytest.raises(CheckFailed, match="bool tensor"):
        l02.check_lost_updates(lambda w, u: ref_lost(w, u).as_subclass(LyingTensor))


def test_reading_the_expected_value_from_the_callers_frames_finds_nothing():
    import sys

    def snoop(grads, scale):
        frame = sys._getframe(1)
        while frame is not None:
            if "expected" in frame.f_locals:
                return frame.f_locals["expected"]
            frame = frame.f_back
        return 0.25
    with pytest.raises(CheckFailed, match="FAIL underflow_fraction"):
        l02.check_underflow_fraction(snoop)


def test_answers_replayed_from_the_self_check_seed_fail_on_another_seed():
    answers = [ref_fraction(*case) for case in l02.check_underflow_fraction.cases(0)]
    calls = iter(range(10 ** 6))

    def replay(grads, scale):
        return answers[next(calls)]
    assert verdict(l02.check_underflow_fraction, 0, replay).startswith("PASS")
    calls = iter(range(10 ** 6))
    with pytest.raises(CheckFailed, match="FAIL underflow_fraction"):
        verdict(l02.check_underflow_fraction, 1, replay)


def test_changing_the_gradients_in_place_fails():
    def scales_in_place(grads, scale):
        answer = ref_fraction(grads, scale)
        for g in grads:
            g.mul_(scale).abs_()
        return answer
    with pytest.raises(CheckFailed, match="only read") as e:
        l02.check_underflow_fraction(scales_in_place)
    assert "`grads`" in str(e.value)


def test_changing_the_weight_in_place_fails():
    def steps_in_place(w, u):
        answer = ref_lost(w, u)
        w.sub_(u.half())
        return answer
    with pytest.raises(CheckFailed, match="only read") as e:
        l02.check_lost_updates(steps_in_place)
    assert "`weight`" in str(e.value)
