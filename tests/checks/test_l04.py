"""Exercise 04's graders, both ways: the reference passes, plausible wrong answers fail usefully."""

import math

import pytest
import torch

from amp_edu.checks import l04
from amp_edu.checks.core import CheckFailed


# --- part A: unscale with the inf/NaN check ---------------------------------------------------
def make_unscale(*, check="isfinite", when="before", inverse="float64", skip_bad=False, in_place=True,
                 returns="tensor", flag=True):
    """A learner's unscale_and_check_ with one mistake switched in."""
    def unscale_and_check_(grads, scale):
        if inverse == "float64":
            inv = scale.double().reciprocal().float()
        elif inverse == "python":
            inv = 1.0 / scale.item()                            # a double, never rounded to float32
        elif inverse == "float64_tensor":
            inv = scale.double().reciprocal()                   # float64, never rounded to float32
        else:
            inv = 1.0 / scale                                   # float32 division
        bad = {"isfinite": lambda g: not torch.isfinite(g).all(),
               "isinf": lambda g: bool(torch.isinf(g).any()),
               "isnan": lambda g: bool(torch.isnan(g).any()),
               "max": lambda g: g.numel() > 0 and (g.max() == math.inf or torch.isnan(g.max())),
               "sum": lambda g: not torch.isfinite(g.float().sum())}[check]
        found = torch.zeros(())
        out = []
        for g in grads:
            if when == "before" and bad(g):
                found.fill_(1.0) if flag else found.add_(1.0)
            if not (skip_bad and bad(g)):
                if inverse == "divide":
                    g.div_(scale)
                elif in_place:
                    g.mul_(inv)
                else:
                    g = g * inv
            out.append(g)
            if when == "after" and bad(g):
                found.fill_(1.0)
        return {"tensor": found, "bool": bool(found), "float": found.item()}[returns]
    return unscale_and_check_


def test_reference_unscale_passes(capsys):
    l04.check_unscale(make_unscale())
    assert capsys.readouterr().out.startswith("PASS unscale_and_check_: 19 cases")


@pytest.mark.parametrize("wrong, where, hint", [
    (make_unscale(check="isinf"), "a NaN", "NaN counts too"),
    (make_unscale(check="isnan"), "an inf", "found_inf is 1.0 if any element"),
    (make_unscale(check="max"), "a -inf", "-inf counts too"),
    (make_unscale(check="sum"), "large but finite", "not a sum"),
    (make_unscale(when="after"), "scale below 1", "check *before* multiplying"),
    (make_unscale(skip_bad=True), "an inf", "unscale every gradient even when"),
    (make_unscale(flag=False), "not a count", "a flag, not a count"),
    (make_unscale(inverse="float32"), "clean gradients", "float64"),
    (make_unscale(inverse="divide"), "clean gradients", "float64"),
    (make_unscale(inverse="python"), "float64 gradients, scale 3", "STORED as float32"),
    (make_unscale(inverse="float64_tensor"), "float64 gradients, scale 3", "STORED as float32"),
    (make_unscale(in_place=False), "clean gradients", "in place"),
    (make_unscale(returns="bool"), "clean gradients", "0-dim float32 tensor"),
    (make_unscale(returns="float"), "clean gradients", "0-dim float32 tensor"),
])
def test_plausible_wrong_unscale_fails_with_a_hint(wrong, where, hint):
    with pytest.raises(CheckFailed) as e:
        l04.check_unscale(wrong)
    msg = str(e.value)
    assert msg.startswith("FAIL unscale_and_check_") and where in msg and hint in msg, msg
    assert "expected:" in msg and "got:" in msg


def make_update(*, compare="==", count_first=True, reset_on_overflow=True, reset_after_growth=True,
                finite="float32", factors="float64", found_test="nonzero", floor=None, in_place=True):
    """A learner's update_scale_ with one mistake switched in."""
    def f32(x):
        return torch.tensor(x, dtype=torch.float64).float()

    def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
        s, t, f = scale.item(), growth_tracker.item(), found_inf.item()
        found = {"nonzero": bool(f), "one": f == 1.0}[found_test]
        if found:
            new = f32(s * backoff_factor) if factors == "float64" else scale.clone().mul_(backoff_factor)
            if floor is not None:
                new = torch.clamp(new, min=floor)
            new_t = 0 if reset_on_overflow else t
        else:
            counted = t + 1 if count_first else t
            due = counted == growth_interval if compare == "==" else counted >= growth_interval
            if due:
                if finite == "float32":
                    grown = f32(s * growth_factor) if factors == "float64" else scale.clone().mul_(growth_factor)
                    new = grown if torch.isfinite(grown) else scale.clone()
                elif finite == "float64":
                    new = torch.tensor(s * growth_factor) if math.isfinite(s * growth_factor) else scale.clone()
                    if not math.isfinite(new.item()) or abs(s * growth_factor) > 3.4028234663852886e38:
                        scale.fill_(s * growth_factor)            # raises: does not fit in float32
                else:
                    new = scale.clone().mul_(growth_factor)        # no check at all
                new_t = 0 if reset_after_growth else counted
            else:
                new, new_t = scale.clone(), (t + 1)
        if in_place:
            scale.copy_(new)
            growth_tracker.fill_(new_t)
    return update_scale_


def test_reference_update_passes(capsys):
    l04.check_update(make_update())
    assert capsys.readouterr().out.startswith("PASS update_scale_: 21 cases")


@pytest.mark.parametrize("wrong, where, hint", [
    (make_update(count_first=False), "growth exactly at growth_interval", "count this step first"),
    (make_update(compare=">="), "tracker already past the interval", "compare with ==, not >="),
    (make_update(reset_on_overflow=False), "overflow: back off", "tracker goes back to 0"),
    (make_update(reset_after_growth=False), "growth exactly at growth_interval", "after growing"),
    (make_update(finite="none"), "growth would overflow float32", "never grow the scale to inf"),
    (make_update(finite="float64"), "growth would overflow float32", "2^128"),
    (make_update(factors="float32"), "backoff 0.3", "product taken in float64"),
    (make_update(found_test="one"), "NaN in found_inf", "any non-zero found_inf"),
    (make_update(floor=1.0), "no floor", "no floor"),
    (make_update(in_place=False), "no overflow", "in place"),
])
def test_plausible_wrong_update_fails_with_a_hint(wrong, where, hint):
    with pytest.raises(CheckFailed) as e:
        l04.check_update(wrong)
    msg = str(e.value)
    assert msg.startswith("FAIL update_scale_") and where in msg and hint in msg, msg


def test_grown_scale_rounded_through_fp16_fails():
    """The scale is a float32: a grown scale rounded through fp16 is inf above 65504 (no growth)."""
    def via_fp16(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
        s = scale.item()
        if found_inf.item():
            scale.fill_(torch.tensor(s * backoff_factor, dtype=torch.float64).float())
            growth_tracker.fill_(0)
        elif growth_tracker.item() + 1 == growth_interval:
            grown = torch.tensor(s * growth_factor, dtype=torch.float16).float()
            if torch.isfinite(grown):
                scale.fill_(grown)
            growth_tracker.fill_(0)
        else:
            growth_tracker.add_(1)

    with pytest.raises(CheckFailed) as err:
        l04.check_update(via_fp16)
    assert "growth past fp16's max" in str(err.value) and "scale=131072.0" in str(err.value)
