"""Graders of exercise 03: the reference passes; plausible wrong answers fail with a useful hint."""

import math

import pytest
import torch

from amp_edu.checks import l03
from amp_edu.checks.core import CheckFailed


def ref_scale(grads):
    m = max(float(g.abs().max()) for g in grads)
    return 2.0 ** math.floor(math.log2(65504.0 / m))


def test_reference_choose_scale_passes(capsys):
    l03.check_choose_scale(ref_scale)
    assert capsys.readouterr().out.startswith("PASS choose_scale")


@pytest.mark.parametrize("wrong, hint", [
    (lambda gs: 2.0 ** round(math.log2(65504.0 / max(float(g.abs().max()) for g in gs))), "overflow"),
    (lambda gs: 2.0 ** math.floor(math.log2(65504.0 / float(gs[0].abs().max()))), "ALL tensors"),
    (lambda gs: max(1.0, ref_scale(gs)), "below 1"),
    (lambda gs: 2.0 ** math.floor(math.log2(65504.0 / max(float(g.max()) for g in gs))), "overflow"),
    (lambda gs: 2.0 ** (math.ceil(math.log2(65504.0 / max(float(g.abs().max()) for g in gs))) - 1), "<="),
    (lambda gs: 65504.0 / max(float(g.abs().max()) for g in gs), "power of two"),
])
def test_wrong_scales_fail(wrong, hint):
    with pytest.raises(CheckFailed) as e:
        l03.check_choose_scale(wrong)
    assert "FAIL choose_scale" in str(e.value) and hint in str(e.value), str(e.value)


def make_step(*, zero_first=True, check="grads", bad=torch.isfinite, clear_on_skip=True, unscale="before"):
    """The reference step (all defaults) or one plausible mistake in it."""
    def step(model, optimizer, loss_fn, x, y, scale):
        if zero_first:
            optimizer.zero_grad()
        scaled = loss_fn(model(x), y) * scale
        if check == "loss" and not torch.isfinite(scaled):
            return False
        scaled.backward()
        if check == "grads" and not all(bad(p.grad).all() for p in model.parameters()):
            if clear_on_skip:
                optimizer.zero_grad()
            return False
        if unscale == "before":
            for p in model.parameters():
                p.grad /= scale
        optimizer.step()
        if unscale == "after":
            for p in model.parameters():
                p.grad /= scale
        return True
    return step


def test_reference_scaled_step_passes(capsys):
    l03.check_scaled_step(make_step())
    assert capsys.readouterr().out.startswith("PASS scaled_step")


@pytest.mark.parametrize("mistake, hint", [
    (dict(unscale="never"), "divide every gradient by scale"),
    (dict(check="none"), "skip the step"),
    (dict(bad=lambda g: ~torch.isinf(g)), "inf and NaN"),
    (dict(check="loss"), "EVERY gradient"),
    (dict(zero_first=False), "accumulate"),
    (dict(clear_on_skip=False), "clear the gradients"),
    (dict(unscale="after"), "divide every gradient"),
], ids=["no_unscale", "no_skip", "inf_only", "loss_check_only", "no_zero_grad", "keeps_bad_grads",
        "unscale_after_step"])
def test_wrong_scaled_steps_fail(mistake, hint):
    with pytest.raises(CheckFailed) as e:
        l03.check_scaled_step(make_step(**mistake))
    msg = str(e.value)
    assert msg.startswith("FAIL scaled_step") and "input:" in msg, msg
    assert hint in msg, msg


def test_unsolved_exercises_fail_with_the_not_done_message():
    def todo(*a):
        raise NotImplementedError()
    for check in (l03.check_choose_scale, l03.check_scaled_step):
        with pytest.raises(CheckFailed, match="not done yet"):
            check(todo)


def test_single_overflow_scenario_has_one_inf_in_one_parameter_and_no_nan():
    """The premise of the last scenario: exactly one parameter's gradient holds inf, none holds NaN."""
    i = len(l03._SCENARIOS) - 1
    (kind, scale), = l03._SCENARIOS[i][1]
    model = l03._model(i)
    x, y = l03._batch(kind, 100 * i)
    (l03._loss_fn(model(x), y) * scale).backward()
    grads = [p.grad for p in model.parameters()]
    assert not any(bool(torch.isnan(g).any()) for g in grads)
    assert sum(bool(torch.isinf(g).any()) for g in grads) == 1
    assert torch.isfinite(grads[0]).all() and torch.isfinite(grads[-1]).all()


def _checks_one_param(index):
    """A step that looks at one parameter's gradient only (the first, or the last) before stepping."""
    def step(model, optimizer, loss_fn, x, y, scale):
        optimizer.zero_grad()
        (loss_fn(model(x), y) * scale).backward()
        if not torch.isfinite(list(model.parameters())[index].grad).all():
            optimizer.zero_grad()
            return False
        for p in model.parameters():
            p.grad /= scale
        optimizer.step()
        return True
    return step


@pytest.mark.parametrize("wrong", [make_step(bad=lambda g: ~torch.isnan(g)), _checks_one_param(0),
                                   _checks_one_param(-1)], ids=["nan_only", "first_param_only", "last_param_only"])
def test_partial_overflow_checks_fail(wrong):
    with pytest.raises(CheckFailed) as e:
        l03.check_scaled_step(wrong)
    msg = str(e.value)
    assert "one weight gradient overflows" in msg and "EVERY gradient" in msg, msg
