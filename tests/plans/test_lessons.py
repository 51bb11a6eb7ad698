"""Each lesson's plan (``amp_edu.plans.lNN``), the kernel's half of a check: its check runs it, the
registry finds it, and on a tiny case it hands back what the learner's function returned and what
it left in its arguments — fresh copies where the plan promises them, deciding nothing.

What the graders then make of those results is tested lesson by lesson in tests/checks/.
"""

import functools

import pytest
import torch
import torch.nn.functional as F

from amp_edu.checks import l02 as checks02, l03 as checks03, l04 as checks04, l08 as checks08
from amp_edu.checks import l09 as checks09, l10 as checks10, l12 as checks12
from amp_edu.plans import l02, l03, l04, l08, l09, l10, l12, registry

BF16 = torch.bfloat16


@pytest.mark.parametrize("check, plan", [
    (checks02.check_underflow_fraction, l02.each_reading), (checks02.check_lost_updates, l02.each_reading),
    (checks03.check_choose_scale, l02.each_reading), (checks03.check_scaled_step, l03.scaled_step),
    (checks04.check_unscale, l04.unscale), (checks04.check_update, l04.update),
    (checks08.check_train_amp, l08.train_amp), (checks09.check_first_nonfinite, l09.first_nonfinite),
    (checks10.check_quantize_tensorwise, l10.quantize_tensorwise_plan),
    (checks10.check_delayed_update, l10.delayed_update_plan),
    (checks12.check_stochastic_round, l12.stochastic_round_plan), (checks12.check_kahan, l12.kahan_plan),
], ids=lambda v: getattr(v, "name", None) or v.__name__)
def test_each_check_runs_its_lessons_plan_and_the_registry_finds_it(check, plan):
    assert check.plan is plan
    assert registry.plan(plan.__module__, plan.__name__) is plan


def test_l02_each_reading_hands_back_every_outcome_and_the_arguments_after_the_call():
    g = torch.ones(3)

    def writes(t, k):
        t.mul_(k)
        return float(t.sum())

    def fails(t, k):
        raise ValueError("no")

    cases = [(g.clone(), 2.0), (torch.zeros(2), 1.0)]
    got = l02.each_reading(cases, writes)
    assert got["outcomes"] == [{"ok": 6.0}, {"ok": 0.0}]
    assert torch.equal(got["after"][0][0], 2 * g) and got["after"][0][1] == 2.0      # the write is seen
    failed = l02.each_reading(cases, fails)                     # every case is called, raising or not
    assert [o["raised"]["type"] for o in failed["outcomes"]] == ["ValueError", "ValueError"]


def test_l03_scaled_step_builds_each_scenario_afresh_and_snapshots_after_every_call():
    model, master, opt = l03.setup(3, spare=True)
    assert {p.dtype for p in model.parameters()} == {torch.float16} and {t.dtype for t in master} == {torch.float32}
    assert all(torch.equal(t, p.float()) for t, p in zip(master, model.parameters()))
    assert opt.param_groups[0]["params"][0] is master[0] and opt.defaults["lr"] == l03.LR
    x, y = torch.randn(4, 4).half(), torch.randn(4, 1)
    l03.mse_loss(model(x), y).backward()
    assert next(model.parameters()).grad is None               # the spare layer comes first, unused
    fresh_model, fresh_master, _ = l03.setup(3)
    seen = []

    def moves_the_master(model, master, opt, loss_fn, x, y, scale):
        seen.append((loss_fn is l03.tilted_loss, scale))
        with torch.no_grad():
            master[0].add_(1.0)
        return scale

    sc = {"seed": 3, "spare": False, "loss": "tilted", "calls": [{"x": x, "y": y, "scale": 8.0}] * 2}
    [calls] = l03.scaled_step([sc], moves_the_master)
    assert seen == [(True, 8.0)] * 2 and [c["outcome"] for c in calls] == [{"ok": 8.0}] * 2
    assert torch.equal(calls[0]["master"][0], fresh_master[0] + 1)   # as it was after the first call ...
    assert torch.equal(calls[1]["master"][0], fresh_master[0] + 2)   # ... and after the second
    assert calls[1]["master_grads"] == [None] * len(fresh_master)
    assert all(torch.equal(a, b) for a, b in zip(calls[1]["fp16"], fresh_model.parameters()))


def test_l04_unscale_notes_each_narrow_division_and_update_reports_both_tensors():
    def cases():
        return [("plain", [torch.full((3,), 8.0)], 4.0)]

    def in_fp32(grads, scale):
        for g in grads:
            g.div_(scale)

    def in_fp64(grads, scale):
        inv = scale.double().reciprocal().float()
        for g in grads:
            g.mul_(inv)

    [a], [b] = l04.unscale(cases(), in_fp32), l04.unscale(cases(), in_fp64)
    assert a["outcome"] == b["outcome"] == {"ok": None}
    assert torch.equal(a["grads"][0], torch.full((3,), 2.0)) and torch.equal(b["grads"][0], a["grads"][0])
    assert a["narrow"] == ["div_ -> torch.float32"] and b["narrow"] == []

    def update_scale_(scale, tracker, found, growth_factor, backoff_factor, growth_interval):
        tracker += 1
        if int(tracker) == growth_interval:
            scale *= growth_factor
            tracker.zero_()

    [grown], [waiting] = (l04.update([("case", 1024.0, t, 0.0, 2.0, 0.5, 2)], update_scale_) for t in (1, 0))
    assert (grown["scale"].item(), grown["growth_tracker"].item()) == (2048.0, 0)
    assert (waiting["scale"].item(), waiting["growth_tracker"].item()) == (1024.0, 1)
    assert grown["scale"].dtype == torch.float32 and grown["growth_tracker"].dtype == torch.int32


def test_l08_train_amp_builds_each_situation_and_reports_the_state_after_the_loop():
    clean, bad = l08.batches(0, 3), l08.batches(0, 3, bad=(1,))
    assert torch.equal(bad[1][0], clean[1][0] * 1e5) and torch.equal(bad[0][0], clean[0][0])
    stale, _, scaler = l08.setup(0, 2.0 ** 10, 3, stale=True)
    assert all(p.grad is not None for p in stale.parameters()) and scaler.get_scale() == 2.0 ** 10
    assert all(p.grad is None for p in l08.setup(0, 1.0, 1)[0].parameters())

    def one_step(model, optimizer, scaler, batches, device_type, dtype):
        x, y = batches[0]
        with torch.autocast(device_type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return "not graded"

    situation = ("one step", "a single AMP step", dict(seed=0, init_scale=2.0 ** 10, growth_interval=3), clean, {})
    [r] = l08.train_amp([situation], one_step)
    before = l08.state(*l08.setup(0, 2.0 ** 10, 3)[::2])
    assert r["outcome"] == {"ok": None}                                # any return value stands for None
    assert (r["state"]["scale"], r["state"]["growth_tracker"]) == (2.0 ** 10, 1)   # one good step of three
    assert before["growth_tracker"] == 0 and set(r["state"]["params"]) == set(before["params"])
    assert not torch.equal(r["state"]["params"]["0.weight"], before["params"]["0.weight"])


def test_l09_builds_models_by_seed_and_reports_hooks_left_and_the_names_used():
    assert len(set(l09.LABELS)) == len(l09.LABELS) and {"nan_mid", "all_finite"} <= set(l09.LABELS)
    a, b = l09.build("all_finite", 3), l09.build("all_finite", 3)
    assert a is not b and all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    x = torch.randn(2, 4)

    def leaves_a_hook(model, x):
        model.head.register_forward_hook(lambda *args: None)
        return "head"

    got = l09.first_nonfinite([("all_finite", "no NaN", 3, x)], leaves_a_hook)
    [case] = got["cases"]
    assert case["outcome"] == {"ok": "head"} and case["hooks"] == ["head"] and case["x"] is x
    assert "register_forward_hook" in got["names"]
    assert l09.first_nonfinite([("nan_mid", "", 0, x)], functools.partial(leaves_a_hook))["names"] is None
    m = l09.build("nan_mid", 0)
    m.register_forward_pre_hook(lambda *args: None)
    assert l09.hooks_left(m) == ["(model)"]


def test_l10_plans_hand_each_call_a_fresh_copy_and_float32_scalars():
    x = torch.tensor([1.0, -2.0])
    scales = []

    def quantize(x, dtype, scale=None):
        scales.append(scale)
        x.mul_(2)
        return torch.zeros_like(x).to(dtype)

    out = l10.quantize_tensorwise_plan([("given", x, torch.float8_e4m3fn, 0.5), ("own", x, torch.float8_e5m2, None)],
                                       quantize)
    assert torch.equal(x, torch.tensor([1.0, -2.0]))                   # the case's tensor is never handed out
    assert all(torch.equal(o["x"], 2 * x) for o in out)                 # each call wrote into its own copy
    assert scales[0].dtype == torch.float32 and scales[0].dim() == 0 and scales[0].item() == 0.5 and scales[1] is None
    assert [o["outcome"]["ok"].dtype for o in out] == [torch.float8_e4m3fn, torch.float8_e5m2]

    def delayed_update(history, amax, scale, fp8_dtype, margin):
        history.copy_(torch.stack([amax, history[0]]))
        return scale * 2 ** margin

    hist = torch.tensor([3.0, 2.0])
    [d] = l10.delayed_update_plan([("roll", hist, 5.0, torch.tensor(1.5), torch.float8_e4m3fn, 1)], delayed_update)
    assert torch.equal(d["history"], torch.tensor([5.0, 3.0])) and torch.equal(hist, torch.tensor([3.0, 2.0]))
    assert d["outcome"]["ok"].item() == 3.0


def test_l12_plans_give_each_seed_a_fresh_generator_and_snapshot_every_kahan_call():
    x = torch.randn(8)
    [r] = l12.stochastic_round_plan([{"x": x, "seeds": [1, 1, 2]}], lambda x, g: torch.rand(x.shape, generator=g))
    first, again, other = (o["ok"] for o in r["rounded"])
    assert torch.equal(first, again) and not torch.equal(first, other) and r["x"] is x
    assert torch.equal(first, torch.rand(8, generator=torch.Generator().manual_seed(1)))

    params = [torch.ones(2, dtype=BF16)]
    cases = {"params": params, "init_dtypes": ["float32"],
             "runs": [{"params": params, "comps": [torch.zeros(2, dtype=BF16)],
                       "updates": [[torch.full((2,), 0.5)], [torch.full((2,), 0.25)]]}],
             "tie": {"p": params[0], "comp": torch.zeros(2, dtype=BF16), "update": torch.full((2,), 1.0)}}

    def init_compensation(ps, dtype=BF16):
        return [torch.zeros_like(p, dtype=dtype) for p in ps]

    def no_compensation_(p, comp, update):
        p.add_(update)

    got = l12.kahan_plan(cases, init_compensation, no_compensation_)
    assert got["init"]["ok"][0].dtype == BF16 and got["init_as"]["float32"]["ok"][0].dtype == torch.float32
    assert [step[0]["p"].tolist() for step in got["runs"][0]] == [[1.5, 1.5], [1.75, 1.75]]
    assert got["tie"]["p"].tolist() == [2.0, 2.0] and got["runs"][0][0][0]["call"] == {"ok": None}
    assert params[0].tolist() == [1.0, 1.0]                             # the case's weights were copied
