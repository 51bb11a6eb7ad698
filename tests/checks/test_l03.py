"""Graders of exercise 03: the reference passes; plausible wrong answers fail with a useful hint."""

import math

import pytest
import torch

from amp_edu.checks import l03
from amp_edu.checks.core import CheckFailed
from amp_edu.plans import byvalue
from checkhelp import assert_drawn_and_passing, AlwaysEqual, LyingTensor, verdict  # noqa: E402  (tests/ is on sys.path)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The models are tiny: one thread avoids thread start-up costs (as the lesson's notebook does)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


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


def make_step(*, zero_first=True, check="grads", bad=torch.isfinite, unscale="fp32", copy_back=True,
              nones="keep", params=None):
    """The reference step (all defaults) or one plausible mistake in it."""
    def step(model, master, optimizer, loss_fn, x, y, scale):
        if zero_first:
            model.zero_grad(set_to_none=True)
        scaled = loss_fn(model(x), y) * scale
        if check == "loss" and not torch.isfinite(scaled):
            return False
        scaled.backward()
        ps = list(model.parameters())
        looked = ps if params is None else [ps[params]]
        if check == "grads" and not all(bad(p.grad).all() for p in looked if p.grad is not None):
            return False
        pairs = list(zip(master, ps))
        if nones == "filter":                     # drops the unused layer: the zip shifts by two
            pairs = list(zip(master, [p for p in ps if p.grad is not None]))
        for m, p in pairs:
            if p.grad is None and nones != "crash":
                m.grad = None
            elif unscale == "fp32":
                m.grad = p.grad.float() / scale
            elif unscale == "fp16":
                m.grad = (p.grad / scale).float()
            else:                                  # "never" or "after"
                m.grad = p.grad.float()
        optimizer.step()
        if unscale == "after":
            for m in master:
                if m.grad is not None:
                    m.grad /= scale
        if copy_back:
            with torch.no_grad():
                for p, m in zip(ps, master):
                    p.copy_(m)
        return True
    return step


def test_reference_scaled_step_passes(capsys):
    l03.check_scaled_step(make_step())
    assert capsys.readouterr().out.startswith("PASS scaled_step")
    l03.check_scaled_step(l03.reference_scaled_step)


@pytest.mark.parametrize("mistake, hint", [
    (dict(unscale="never"), "divided by scale"),
    (dict(unscale="fp16"), "unscale in float32"),
    (dict(unscale="after"), "divided by scale"),
    (dict(check="none"), "skip the step"),
    (dict(bad=lambda g: ~torch.isinf(g)), "inf and NaN"),
    (dict(check="loss"), "EVERY gradient"),
    (dict(zero_first=False), "accumulate"),
    (dict(copy_back=False), "copy every master weight back"),
    (dict(nones="filter"), "ITS OWN fp16 parameter"),
    (dict(nones="crash"), ".grad None"),
], ids=["no_unscale", "unscale_in_fp16", "unscale_after_step", "no_skip", "inf_only", "loss_check_only",
        "no_zero_grad", "no_copy_back", "filters_none_grads", "crashes_on_none_grad"])
def test_wrong_scaled_steps_fail(mistake, hint):
    with pytest.raises(CheckFailed) as e:
        l03.check_scaled_step(make_step(**mistake))
    msg = str(e.value)
    assert msg.startswith("FAIL scaled_step") and "input:" in msg, msg
    assert hint in msg, msg


def test_single_overflow_scenario_has_one_inf_in_one_parameter_and_no_nan():
    """The premise of that scenario: exactly one parameter's gradient holds inf, none holds NaN."""
    i = next(k for k, sc in enumerate(l03._SCENARIOS) if "one weight gradient overflows" in sc[0])
    (kind, scale), = l03._SCENARIOS[i][1]
    model = l03._model(i)
    x, y = l03._batch(kind, 100 * i)
    (l03._loss_fn(model(x), y) * scale).backward()
    grads = [p.grad for p in model.parameters()]
    assert not any(bool(torch.isnan(g).any()) for g in grads)
    assert sum(bool(torch.isinf(g).any()) for g in grads) == 1
    assert torch.isfinite(grads[0]).all() and torch.isfinite(grads[-1]).all()


def test_tiny_scenario_is_one_where_fp16_unscaling_loses_values():
    """The premise of the 'tiny' scenario: divided in fp16, the scaled gradients flush or round."""
    i = next(k for k, sc in enumerate(l03._SCENARIOS) if sc[1][0][0] == "tiny")
    (kind, scale), = l03._SCENARIOS[i][1]
    model = l03._model(i)
    x, y = l03._batch(kind, 100 * i, model)
    (l03._loss_fn(model(x), y) * scale).backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    assert l03._fp16_unscaled_differs(model, scale)
    flushed = sum(int(((p.grad / scale) == 0).sum() - (p.grad == 0).sum()) for p in model.parameters())
    assert flushed > 0


@pytest.mark.parametrize("wrong", [make_step(bad=lambda g: ~torch.isnan(g)), make_step(params=0),
                                   make_step(params=-1)], ids=["nan_only", "first_param_only", "last_param_only"])
def test_partial_overflow_checks_fail(wrong):
    with pytest.raises(CheckFailed) as e:
        l03.check_scaled_step(wrong)
    msg = str(e.value)
    assert "one weight gradient overflows" in msg and "EVERY gradient" in msg, msg


def scale_in_tensor_arithmetic(grads):
    """choose_scale without float(): the max stays a tensor of the gradients' dtype."""
    m = max(g.detach().abs().max() for g in grads)
    k = math.floor(math.log2(65504.0 / m))
    while m * 2.0 ** k > 65504.0:
        k -= 1
    return 2.0 ** k


def test_scale_computed_in_the_gradients_dtype_fails_on_fp16_gradients():
    with pytest.raises(CheckFailed, match="fp16/bf16 gradients") as err:
        l03.check_choose_scale(scale_in_tensor_arithmetic)
    assert "float16" in str(err.value)


def test_swapped_loss_arguments_fail_on_the_asymmetric_loss():
    step = make_step()

    def swapped(model, master, optimizer, loss_fn, x, y, scale):
        return step(model, master, optimizer, lambda out, target: loss_fn(target, out), x, y, scale)

    with pytest.raises(CheckFailed, match="not symmetric") as err:
        l03.check_scaled_step(swapped)
    assert "a loss that is not symmetric" in str(err.value)


# --- the check in three parts: drawn cases, answers by value ------------------------------------


@pytest.mark.parametrize("check, fn", [(l03.check_choose_scale, ref_scale), (l03.check_scaled_step, make_step())],
                         ids=["choose_scale", "scaled_step"])
def test_drawn_cases_differ_by_seed_and_the_reference_passes_for_each(check, fn):
    assert_drawn_and_passing(check, fn)


def test_the_pass_lines_are_returned():
    assert l03.check_choose_scale(ref_scale) == f"PASS choose_scale: {len(l03.check_choose_scale.cases(0))} cases"
    n = len(l03.check_scaled_step.cases(0))
    assert n == len(l03._SCENARIOS) + 2
    assert l03.check_scaled_step(make_step()) == f"PASS scaled_step: {n} scenarios"


def test_drawn_scale_cases_sit_on_a_boundary_every_other_time():
    drawn = l03._drawn_scale(7)
    on_edge = [max(float(g.abs().max()) for g in grads) * l03.reference_choose_scale(grads) == 65504.0
               for (grads,) in drawn]
    assert on_edge[1::2] == [True] * (len(drawn) // 2)


def test_a_lying_float_fails_even_holding_the_right_value():
    with pytest.raises(CheckFailed, match="float subclass"):
        l03.check_choose_scale(lambda gs: AlwaysEqual(ref_scale(gs)))


def test_answers_replayed_from_the_self_check_seed_fail_on_another_seed():
    answers = [ref_scale(*case) for case in l03.check_choose_scale.cases(0)]
    calls = iter(range(10 ** 6))

    def replay(grads):
        return answers[next(calls)]
    assert verdict(l03.check_choose_scale, 0, replay).startswith("PASS")
    calls = iter(range(10 ** 6))
    with pytest.raises(CheckFailed, match="FAIL choose_scale"):
        verdict(l03.check_choose_scale, 1, replay)


def test_changing_the_gradients_in_place_fails():
    def abs_in_place(grads):
        answer = ref_scale(grads)
        for g in grads:
            g.abs_()
        return answer
    with pytest.raises(CheckFailed, match="only read") as e:
        l03.check_choose_scale(abs_in_place)
    assert "`grads`" in str(e.value)


def test_a_master_weight_replaced_by_a_lying_tensor_fails():
    step = make_step()

    def lying(model, master, optimizer, loss_fn, x, y, scale):
        ok = step(model, master, optimizer, loss_fn, x, y, scale)
        master[0] = master[0].detach().as_subclass(LyingTensor)
        return ok
    with pytest.raises(CheckFailed, match="different master weights"):
        l03.check_scaled_step(lying)


def test_a_step_copying_the_reference_from_the_callers_frames_finds_nothing():
    import sys

    def snoop(model, master, optimizer, loss_fn, x, y, scale):
        frame = sys._getframe(1)
        while frame is not None:
            ref = frame.f_locals.get("ref_master")
            if ref is not None:
                with torch.no_grad():
                    for m, r in zip(master, ref):
                        m.copy_(r)
                return frame.f_locals.get("want", True)
            frame = frame.f_back
        return True                      # found nothing: steps nowhere
    with pytest.raises(CheckFailed, match="FAIL scaled_step"):
        l03.check_scaled_step(snoop)


def test_a_step_fitted_to_the_self_check_seed_fails_on_another_seed():
    """Right on the named scenarios and on seed 0's drawn ones (it recognises them by their x), it
    does nothing on any other batch: a fresh seed catches it."""
    known = {byvalue.dumps(c["x"]) for sc in l03.check_scaled_step.cases(0) for c in sc["calls"]}
    step = make_step()

    def fitted(model, master, optimizer, loss_fn, x, y, scale):
        return step(model, master, optimizer, loss_fn, x, y, scale) if byvalue.dumps(x) in known else True
    assert verdict(l03.check_scaled_step, 0, fitted).startswith("PASS")
    with pytest.raises(CheckFailed, match="a model drawn from seed"):
        verdict(l03.check_scaled_step, 1, fitted)
