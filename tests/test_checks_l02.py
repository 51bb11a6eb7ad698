"""Graders of exercise 02: the reference passes; plausible wrong answers fail with a useful hint."""

import pytest
import torch

from amp_edu.checks import l02
from amp_edu.checks.core import CheckFailed


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
