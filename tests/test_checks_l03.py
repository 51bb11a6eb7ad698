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


def ref_step(model, optimizer, loss_fn, x, y, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    if not all(torch.isfinite(p.grad).all() for p in model.parameters()):
        optimizer.zero_grad()
        return False
    for p in model.parameters():
        p.grad /= scale
    optimizer.step()
    return True


def test_reference_scaled_step_passes(capsys):
    l03.check_scaled_step(ref_step)
    assert capsys.readouterr().out.startswith("PASS scaled_step")


def no_unscale(model, optimizer, loss_fn, x, y, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    if not all(torch.isfinite(p.grad).all() for p in model.parameters()):
        optimizer.zero_grad()
        return False
    optimizer.step()
    return True


def no_skip(model, optimizer, loss_fn, x, y, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    for p in model.parameters():
        p.grad /= scale
    optimizer.step()
    return True


def inf_only(model, optimizer, loss_fn, x, y, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    if any(torch.isinf(p.grad).any() for p in model.parameters()):
        optimizer.zero_grad()
        return False
    for p in model.parameters():
        p.grad /= scale
    optimizer.step()
    return True


def loss_check_only(model, optimizer, loss_fn, x, y, scale):
    optimizer.zero_grad()
    scaled = loss_fn(model(x), y) * scale
    if not torch.isfinite(scaled):
        return False
    scaled.backward()
    for p in model.parameters():
        p.grad /= scale
    optimizer.step()
    return True


def no_zero_grad(model, optimizer, loss_fn, x, y, scale):
    (loss_fn(model(x), y) * scale).backward()
    if not all(torch.isfinite(p.grad).all() for p in model.parameters()):
        optimizer.zero_grad()
        return False
    for p in model.parameters():
        p.grad /= scale
    optimizer.step()
    return True


def keeps_bad_grads(model, optimizer, loss_fn, x, y, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    if not all(torch.isfinite(p.grad).all() for p in model.parameters()):
        return False
    for p in model.parameters():
        p.grad /= scale
    optimizer.step()
    return True


def unscale_after_step(model, optimizer, loss_fn, x, y, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    if not all(torch.isfinite(p.grad).all() for p in model.parameters()):
        optimizer.zero_grad()
        return False
    optimizer.step()
    for p in model.parameters():
        p.grad /= scale
    return True


@pytest.mark.parametrize("wrong, hint", [
    (no_unscale, "divide every gradient by scale"), (no_skip, "skip the step"),
    (inf_only, "inf and NaN"), (loss_check_only, "EVERY gradient"), (no_zero_grad, "accumulate"),
    (keeps_bad_grads, "clear the gradients"), (unscale_after_step, "divide every gradient"),
])
def test_wrong_scaled_steps_fail(wrong, hint):
    with pytest.raises(CheckFailed) as e:
        l03.check_scaled_step(wrong)
    msg = str(e.value)
    assert msg.startswith("FAIL scaled_step") and "input:" in msg, msg
    assert hint in msg, msg


def test_unsolved_exercises_fail_with_the_not_done_message():
    def todo(*a):
        raise NotImplementedError()
    for check in (l03.check_choose_scale, l03.check_scaled_step):
        with pytest.raises(CheckFailed, match="not done yet"):
            check(todo)
