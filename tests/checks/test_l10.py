"""Grader 10 both ways: the reference answers pass; plausible wrong answers fail with a pointed hint."""

import itertools
from collections import namedtuple

import pytest
import torch

from amp_edu.checks import l10
from amp_edu.checks.core import SELF_CHECK_SEED, CheckFailed
from amp_edu.plans import byvalue
from checkhelp import verdict  # noqa: E402  (tests/ is on sys.path)

EPS = 1e-12


def fmax(dtype):
    return torch.finfo(dtype).max


# --- part A ----------------------------------------------------------------------------------------
def good_quantize(x, fp8_dtype=torch.float8_e4m3fn, scale=None):
    m = torch.finfo(fp8_dtype).max
    if scale is None:
        amax = x.abs().max().double()
        scale = (m / torch.clamp(amax, min=EPS)).float()
    return (x.float() * scale).clamp(-m, m).to(fp8_dtype), scale


def good_quantize_float32_division(x, fp8_dtype=torch.float8_e4m3fn, scale=None):
    m = torch.finfo(fp8_dtype).max
    if scale is None:
        scale = m / x.abs().max().float().clamp(min=EPS)
    return (x.float() * scale).clamp(-m, m).to(fp8_dtype), scale


def _variant(**bad):
    def f(x, fp8_dtype=torch.float8_e4m3fn, scale=None):
        dtype = torch.float8_e5m2 if bad.get("e5m2") else fp8_dtype
        m = fmax(torch.float8_e4m3fn) if bad.get("e4m3_max") else fmax(dtype)
        if scale is None:
            amax = x.max() if bad.get("signed_max") else x.abs().max()
            amax = amax if bad.get("low_precision") else amax.double()
            if not bad.get("no_eps"):
                amax = torch.clamp(amax, min=EPS)
            scale = amax / m if bad.get("inverted") else m / amax
            if not bad.get("float64"):
                scale = scale if bad.get("low_precision") else scale.float()
        if bad.get("in_place"):
            y = x.mul_(scale)
        elif bad.get("bf16_product"):
            y = x * scale.to(x.dtype)
        else:
            y = x.float() * scale
        if not bad.get("no_clamp"):
            y = y.clamp(-m, m)
        return y.to(dtype), scale
    return f


def quantize_scale_as_float(x, fp8_dtype=torch.float8_e4m3fn, scale=None):
    data, s = good_quantize(x, fp8_dtype, scale)
    return data, float(s)


def quantize_returns_dequantized(x, fp8_dtype=torch.float8_e4m3fn, scale=None):
    data, s = good_quantize(x, fp8_dtype, scale)
    return data.float() / s, s


def test_reference_passes(capsys):
    l10.check_quantize_tensorwise(good_quantize)
    assert capsys.readouterr().out.count("PASS quantize_tensorwise") == 1


def test_float32_division_fails_naming_float64():
    with pytest.raises(CheckFailed, match="in float64"):
        l10.check_quantize_tensorwise(good_quantize_float32_division)


@pytest.mark.parametrize("bad,hint", [
    (dict(inverted=True), "inverted"),
    (dict(no_clamp=True), "saturate"),
    (dict(e5m2=True), "fp8_dtype argument"),
    (dict(no_eps=True), "EPS"),
    (dict(float64=True), "float32"),
    (dict(in_place=True), "modified"),
    (dict(signed_max=True), "magnitude"),
    (dict(e4m3_max=True), "57344"),
    (dict(low_precision=True), "in float64"),
    (dict(bf16_product=True), "multiply in float32"),
])
def test_wrong_quantize_fails_with_hint(bad, hint):
    with pytest.raises(CheckFailed) as e:
        l10.check_quantize_tensorwise(_variant(**bad))
    msg = str(e.value)
    assert hint in msg, msg
    assert "input:" in msg and "expected:" in msg and "got:" in msg


@pytest.mark.parametrize("fn,hint", [
    (quantize_scale_as_float, "tensor"),
    (quantize_returns_dequantized, "must be a torch.float8"),
    (lambda x, d, s=None: good_quantize(x, d, s)[0], "pair"),
    (lambda x, d, s=None: good_quantize(x, d, None), "given scale"),
])
def test_other_wrong_quantize_shapes(fn, hint):
    with pytest.raises(CheckFailed, match=hint):
        l10.check_quantize_tensorwise(fn)


def test_not_done_and_not_callable():
    def todo(x, d, s=None):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not done yet"):
        l10.check_quantize_tensorwise(todo)
    with pytest.raises(CheckFailed, match="the function itself"):
        l10.check_delayed_update(3)


# --- part B ----------------------------------------------------------------------------------------
def good_delayed(history, amax, scale, fp8_dtype=torch.float8_e4m3fn, margin=0):
    new = torch.cat([amax.reshape(1).to(history.dtype), history[:-1]])
    a = new.max().double()
    if not (torch.isfinite(a) and a > 0):
        return new, scale
    return new, (torch.finfo(fp8_dtype).max / a / 2 ** margin).float()


def good_delayed_roll(history, amax, scale, fp8_dtype=torch.float8_e4m3fn, margin=0):
    new = torch.roll(history, 1)
    new[0] = amax
    a = new.max()
    if not (torch.isfinite(a) and a > 0):
        return new, scale
    return new, torch.finfo(fp8_dtype).max / a / 2.0 ** margin


def _dvariant(**bad):
    def f(history, amax, scale, fp8_dtype=torch.float8_e4m3fn, margin=0):
        dtype = torch.float8_e5m2 if bad.get("e5m2") else fp8_dtype
        if bad.get("not_rolled"):
            new = history.clone()
            new[0] = amax
        elif bad.get("wrong_direction"):
            new = torch.cat([history[1:], amax.reshape(1)])
        elif bad.get("in_place"):
            history[1:] = history[:-1].clone()
            history[0] = amax
            new = history
        elif bad.get("no_cast"):
            new = torch.cat([amax.reshape(1), history[:-1]])
        else:
            new = torch.cat([amax.reshape(1).to(history.dtype), history[:-1]])
        src = history if bad.get("old_max") else new
        a = src.max().double()
        if bad.get("eps"):                       # the torchao-style floor instead of TE's rule
            a = a.clamp(min=EPS)
        elif bad.get("finite_unchecked") and not a > 0:        # inf > 0: an inf amax gives scale 0
            return new, scale
        elif not bad.get("no_keep") and not bad.get("finite_unchecked") and not (torch.isfinite(a) and a > 0):
            return new, scale
        m = torch.finfo(dtype).max
        if bad.get("margin_mul"):
            s = m / a * 2 ** margin
        elif bad.get("margin_sub"):
            s = m / a - margin
        elif bad.get("no_margin"):
            s = m / a
        elif bad.get("inverted"):
            s = a / m / 2 ** margin
        else:
            s = m / a / 2 ** margin
        return new, s if bad.get("float64") else s.float()
    return f


def test_delayed_reference_passes(capsys):
    l10.check_delayed_update(good_delayed)
    assert capsys.readouterr().out.count("PASS delayed_update") == 1


def test_delayed_float32_division_fails_naming_float64():
    with pytest.raises(CheckFailed, match="in float64"):
        l10.check_delayed_update(good_delayed_roll)


@pytest.mark.parametrize("bad,hint", [
    (dict(not_rolled=True), "not rolled"),
    (dict(wrong_direction=True), "newest first"),
    (dict(in_place=True), "modified"),
    (dict(old_max=True), "*new* history"),
    (dict(margin_mul=True), "you multiplied"),
    (dict(margin_sub=True), "power of two"),
    (dict(no_margin=True), "apply the margin"),
    (dict(no_keep=True), "keep the previous"),
    (dict(eps=True), "saturates"),
    (dict(float64=True), "float32"),
    (dict(inverted=True), "inverted"),
    (dict(e5m2=True), "use the max of"),
    (dict(no_cast=True), "the history stays torch.float32"),
    (dict(finite_unchecked=True), "max is inf"),
])
def test_wrong_delayed_fails_with_hint(bad, hint):
    with pytest.raises(CheckFailed) as e:
        l10.check_delayed_update(_dvariant(**bad))
    msg = str(e.value)
    assert hint in msg, msg
    assert "input:" in msg and "history=" in msg


# --- by value, drawn cases ------------------------------------------------------------------------


@pytest.mark.parametrize("check, fn", [(l10.check_quantize_tensorwise, good_quantize),
                                       (l10.check_delayed_update, good_delayed)])
def test_drawn_cases_differ_by_seed_and_the_solution_passes_for_each(check, fn):
    assert byvalue.dumps(check.cases(1)) != byvalue.dumps(check.cases(2))
    assert byvalue.dumps(check.cases(3)) == byvalue.dumps(check.cases(3))
    for seed in (SELF_CHECK_SEED, 1, 2, 3):
        assert verdict(check, seed, fn).startswith(f"PASS {check.name}: ")


class Liar(torch.Tensor):
    """A tensor subclass that answers every comparison with True."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.Tensor.__eq__, torch.allclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_that_lies_fails():
    def liar_data(x, fp8_dtype=torch.float8_e4m3fn, scale=None):
        data, s = good_quantize(x, fp8_dtype, scale)
        return torch.zeros_like(data).as_subclass(Liar), s

    def liar_scale(x, fp8_dtype=torch.float8_e4m3fn, scale=None):
        data, s = good_quantize(x, fp8_dtype, scale)
        return data, s.as_subclass(Liar)

    with pytest.raises(CheckFailed, match="return x_fp8 as a tensor") as e:
        l10.check_quantize_tensorwise(liar_data)
    assert "subclass" in str(e.value)
    with pytest.raises(CheckFailed, match="return the scale as a tensor"):
        l10.check_quantize_tensorwise(liar_scale)

    def liar_history(history, amax, scale, fp8_dtype=torch.float8_e4m3fn, margin=0):
        new, s = good_delayed(history, amax, scale, fp8_dtype, margin)
        return new.as_subclass(Liar), s
    with pytest.raises(CheckFailed, match="return tensors"):
        l10.check_delayed_update(liar_history)


def test_a_float_that_lies_or_a_tuple_subclass_fails():
    class AlwaysEqual(float):
        def __eq__(self, other):
            return True
        __hash__ = float.__hash__

    def float_scale(history, amax, scale, fp8_dtype=torch.float8_e4m3fn, margin=0):
        new, s = good_delayed(history, amax, scale, fp8_dtype, margin)
        return new, AlwaysEqual(s.item())
    with pytest.raises(CheckFailed, match="return tensors"):
        l10.check_delayed_update(float_scale)

    Pair = namedtuple("Pair", "data scale")
    with pytest.raises(CheckFailed, match="return a pair"):
        l10.check_quantize_tensorwise(lambda x, d=torch.float8_e4m3fn, s=None: Pair(*good_quantize(x, d, s)))


@pytest.mark.parametrize("check, fn", [(l10.check_quantize_tensorwise, good_quantize),
                                       (l10.check_delayed_update, good_delayed)])
def test_answers_learned_from_the_self_check_fail_under_another_seed(check, fn):
    """A learner who replays, call by call, the right answers for the notebook's seed passes there
    and fails the grader's seed: the drawn cases are new inputs."""
    recorded = [r["outcome"]["ok"] for r in check.plan(byvalue.roundtrip(check.cases(SELF_CHECK_SEED)), fn)]

    def replay(*args):
        return recorded[next(replay.calls)]
    replay.calls = itertools.count()
    assert verdict(check, SELF_CHECK_SEED, replay).startswith("PASS")
    replay.calls = itertools.count()
    with pytest.raises(CheckFailed, match="drawn"):
        verdict(check, 7, replay)


def test_inputs_changed_in_place_are_seen_by_value():
    """The plan hands back the input after the call: writing into it fails even though the
    returned values are right."""
    def writes_x(x, fp8_dtype=torch.float8_e4m3fn, scale=None):
        out = good_quantize(x.clone(), fp8_dtype, scale)
        x.zero_()
        return out

    def writes_history(history, amax, scale, fp8_dtype=torch.float8_e4m3fn, margin=0):
        out = good_delayed(history.clone(), amax, scale, fp8_dtype, margin)
        history.fill_(1.0)
        return out
    with pytest.raises(CheckFailed, match="x was modified"):
        l10.check_quantize_tensorwise(writes_x)
    with pytest.raises(CheckFailed, match="the history passed in was modified"):
        l10.check_delayed_update(writes_history)


def test_calling_the_library_the_check_compares_with_fails():
    def uses_library(x, fp8_dtype=torch.float8_e4m3fn, scale=None):
        from amp_edu.fp8 import cast_to_float8
        t = cast_to_float8(x, fp8_dtype, scale)
        return t.data, t.scale
    with pytest.raises(CheckFailed, match="amp_edu.fp8"):
        l10.check_quantize_tensorwise(uses_library)
