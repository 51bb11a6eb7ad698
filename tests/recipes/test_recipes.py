"""amp_edu.recipes: each recipe's events, the registry, and parity with torch's own AMP loop."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from amp_edu.recipes import registry
from amp_edu.recipes.amp import Amp, AmpWithoutScaler, Master, Pure, StaticScale
from amp_edu.recipes.base import Family, Recipe, StepResult, all_finite
from amp_edu.recipes.optim import Bf16Weights, QuantizedStates, adam_settings
from amp_edu.device import num_threads
from amp_edu.optim import AdamW


@pytest.fixture(autouse=True)
def one_thread():
    with num_threads(1):           # tiny models: thread start-up dominates, and the machine is shared
        yield


def net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batches(seed, n, bad=()):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        x, y = torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)
        out.append((x * 1e5 if i in bad else x, y))
    return out


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def run(recipe, model, data, clip=None):
    recipe.before_fit(model, sgd)
    results = []
    for x, y in data:
        recipe.zero_grad()
        x = recipe.before_batch(x)
        with recipe.forward_context():
            logits = model(x)
        recipe.backward(F.cross_entropy(logits.float(), y))
        results.append(recipe.step(clip))
    return results


def test_every_registered_name_builds_its_recipe():
    assert registry.specs()[:9] == ("fp32", "amp_fp16", "amp_bf16", "amp_fp16_noscaler", "bf16_pure",
                                   "fp16_pure", "fp16_static_scale(S)", "fp16_master", "fp16_master_scale(S)")
    assert {"fp8_tensorwise", "fp8_rowwise", "fp8_delayed"} <= set(registry.specs())   # registered on import
    for spec in registry.specs():
        r = registry.parse_recipe(spec.replace("(S)", "(2**7)"))
        assert isinstance(r, Recipe)
        assert registry.parse_recipe(r.name).name == r.name        # the canonical name parses back
        assert r.name == spec.replace("(S)", "(128)")
    assert registry.parse_recipe("fp32") is not registry.parse_recipe("fp32"), "one object per run"


@pytest.mark.parametrize("clip", [None, 0.05])
def test_amp_fp16_step_is_torchs_loop_bit_for_bit(clip):
    """The recipe's events against the loop torch's AMP docs write, with an overflowing batch and
    a first scale so large that the first steps are skipped."""
    data = batches(1, 12, bad=(8,))
    ours = net()
    rec = Amp(torch.float16, scaler=lambda dt: torch.amp.GradScaler(dt, init_scale=2.0 ** 24,
                                                                          growth_interval=2))
    res = run(rec, ours, data, clip)
    ref = net()
    opt = sgd(ref.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24, growth_interval=2)
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            logits = ref(x)
        scaler.scale(F.cross_entropy(logits.float(), y)).backward()
        scaler.unscale_(opt)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        scaler.step(opt)
        scaler.update()
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), ref.parameters()))
    assert rec.scaler.state_dict() == scaler.state_dict()
    assert res[8].skipped and res[0].skipped and not all(r.skipped for r in res)


def test_amp_bf16_has_a_disabled_scaler_that_changes_nothing():
    data = batches(2, 3)
    a, b = net(), net()
    rec = registry.parse_recipe("amp_bf16")
    run(rec, a, data)
    assert not rec.scaler.is_enabled() and rec.scale == 1.0 and not rec.skips_nonfinite
    opt = sgd(b.parameters())
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = b(x)
        F.cross_entropy(logits.float(), y).backward()
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_static_scale_skips_overflow_and_unscales_the_rest():
    m = net()
    init = [p.detach().clone().half() for p in m.parameters()]
    res = run(StaticScale(2.0 ** 40), m, batches(3, 2))
    assert res == [(False, True), (False, True)]
    assert all(torch.equal(p, i) for p, i in zip(m.parameters(), init)), "skipped steps leave the weights"
    # a safe scale: the gradient the optimizer sees is the unscaled one (within fp16 rounding)
    a, b = net(), net()
    ra, rb = StaticScale(64), Pure(torch.float16)
    for r, m in ((ra, a), (rb, b)):
        r.before_fit(m, sgd)
        x, y = batches(4, 1)[0]
        r.backward(F.cross_entropy(m(r.before_batch(x)).float(), y))
        r.after_backward()
    ga = torch.cat([p.grad.flatten().float() for p in a.parameters()])
    gb = torch.cat([p.grad.flatten().float() for p in b.parameters()])
    assert torch.allclose(ga, gb, rtol=2e-2, atol=1e-4)


def test_pure_steps_on_nonfinite_gradients_and_master_keeps_fp32_weights():
    m = net()
    res = run(Pure(torch.float16), m, batches(5, 1, bad=(0,)))
    assert res == [(False, False)], "no loss scaling, no skipping: the NaN reaches the weights"
    rec, m = Master(), net()
    run(rec, m, batches(6, 2))
    assert {w.dtype for w in rec.weights} == {torch.float32} and {p.dtype for p in m.parameters()} == {torch.float16}
    assert all(torch.equal(p, w.half()) for p, w in zip(m.parameters(), rec.weights))
    assert rec.optimizer.param_groups[0]["params"][0] is rec.weights[0]


def test_all_finite_ignores_missing_gradients_and_before_step_returns_a_step_result():
    assert all_finite([]) and all_finite([None, torch.ones(2), torch.ones(2, dtype=torch.bfloat16)])
    assert not all_finite([torch.ones(2), None, torch.tensor([1.0, math.nan])])
    assert not all_finite([torch.tensor([-math.inf], dtype=torch.float16)])
    results = run(Amp(torch.float16), net(), batches(11, 2, bad=(1,)))
    assert all(type(r) is StepResult for r in results)
    assert [(r.finite, r.skipped) for r in results] == [(True, False), (False, True)]


@pytest.mark.parametrize("name, cls, states, rounding, dtype", [
    ("bf16_kahan", Bf16Weights, "param", "kahan", torch.bfloat16),
    ("states_4bit", QuantizedStates, "4bit", "nearest", torch.float32)])
def test_an_optimizer_recipe_keeps_the_runs_adam_settings_and_changes_only_the_storage(name, cls, states, rounding,
                                                                                       dtype):
    settings = dict(lr=3e-4, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
    r, m = registry.parse_recipe(name), net()
    assert type(r) is cls and r.name == name and r.family is Family.OPTIMIZER
    opt = r.before_fit(m, lambda params: torch.optim.AdamW(params, **settings))
    assert type(opt) is AdamW and (opt.states, opt.rounding, opt.decoupled) == (states, rounding, True)
    assert opt.defaults == {**settings, "amsgrad": False} and {p.dtype for p in m.parameters()} == {dtype}
    assert adam_settings(torch.optim.Adam(net().parameters(), **settings)) == {**settings, "amsgrad": False,
                                                                              "decoupled": False}
    with pytest.raises(ValueError, match="factory"):
        registry.parse_recipe(name).before_fit(net(), torch.optim.AdamW(net().parameters()))
    with pytest.raises(ValueError, match="'adam' or 'adamw'"):
        registry.parse_recipe(name).before_fit(net(), sgd)


def test_optimizer_instance_or_factory():
    m = net()
    opt = sgd(m.parameters())
    assert registry.parse_recipe("amp_fp16").before_fit(m, opt) is opt
    with pytest.raises(ValueError, match="master copy.*factory"):
        Master().before_fit(net(), sgd(net().parameters()))
    with pytest.raises(ValueError, match="model's parameters"):
        Recipe().before_fit(m, sgd(net().parameters()))
    with pytest.raises(TypeError, match="Optimizer or a factory"):
        Recipe().before_fit(m, "sgd")
    with pytest.raises(TypeError, match="nn.Module"):
        Recipe().before_fit("mlp", sgd)


@pytest.mark.parametrize("make, err", [
    (lambda: Pure(torch.float32), ValueError), (lambda: Amp(torch.float32), ValueError),
    (lambda: StaticScale(0), ValueError), (lambda: StaticScale(float("inf")), ValueError),
    (lambda: StaticScale(True), TypeError), (lambda: Master("8"), TypeError),
    (lambda: registry.register("Bad Name"), ValueError), (lambda: registry.parse_recipe("fp32(4)"), ValueError),
    (lambda: registry.parse_recipe("amp_fp8"), ValueError),
])
def test_bad_arguments(make, err):
    with pytest.raises(err):
        make()


def test_adding_a_recipe_is_one_registered_class(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @registry.register("bf16_master_scale(S)")
    class Bf16Master(Master):
        def __init__(self, scale):
            super().__init__(scale)
            Pure.__init__(self, torch.bfloat16)
            self.name = f"bf16_master_scale({self.loss_scale:g})"

    r = registry.parse_recipe("bf16_master_scale(2**3)")
    assert isinstance(r, Bf16Master) and r.name == "bf16_master_scale(8)"
    m = net()
    res = run(r, m, batches(7, 2))
    assert {p.dtype for p in m.parameters()} == {torch.bfloat16} and res[-1] == (True, False)
    assert "bf16_master_scale(S)" in registry.specs()
    from amp_edu import data, train
    h = train.train(data.get_task("blobs", device="cpu", n=64), "mlp", "bf16_master_scale(4)", steps=2,
                    batch_size=8, eval_every=0)
    assert h.recipe == "bf16_master_scale(4)" and h.steps == 2


def test_fp32_with_a_dynamic_scaler_is_torchs_scaled_fp32_loop():
    """``Recipe(scaler=...)``: fp32 weights, no autocast, a real GradScaler (what the scaler
    benchmark times as its whole training step)."""
    data = batches(8, 4, bad=(1,))
    a, b = net(), net()
    rec = Recipe(scaler=torch.amp.GradScaler("cpu", init_scale=2.0 ** 120))
    res = run(rec, a, data)
    opt, scaler = sgd(b.parameters()), torch.amp.GradScaler("cpu", init_scale=2.0 ** 120)
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        scaler.scale(F.cross_entropy(b(x), y)).backward()
        scaler.step(opt)
        scaler.update()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert rec.scaler.get_scale() == scaler.get_scale() and [r.skipped for r in res] == [False, True, False, False]


class _MinimalScaler:
    """Only the five methods a from-scratch scaler has (lesson 04): no is_enabled, no state_dict."""

    def __init__(self, device_type):
        self.inner = torch.amp.GradScaler(device_type, init_scale=2.0 ** 24, growth_interval=2)

    def scale(self, loss):
        return self.inner.scale(loss)

    def unscale_(self, opt):
        self.inner.unscale_(opt)

    def step(self, opt):
        return self.inner.step(opt)

    def update(self):
        self.inner.update()

    def get_scale(self):
        return self.inner.get_scale()


def test_a_scaler_with_only_the_five_methods_is_enough():
    from amp_edu import data, train
    task = data.get_task("blobs", device="cpu", n=64)
    kw = dict(steps=4, batch_size=8, eval_every=0)
    mini = train.train(task, "mlp", "amp_fp16", scaler_factory=_MinimalScaler, **kw)
    ref = train.train(task, "mlp", "amp_fp16", scaler_kwargs=dict(init_scale=2.0 ** 24, growth_interval=2), **kw)
    assert mini.skipped == ref.skipped and mini.scale == ref.scale and any(mini.skipped)
    assert isinstance(mini.scaler, _MinimalScaler)
    assert all(torch.equal(a, b) for a, b in zip(mini.model.parameters(), ref.model.parameters()))


def test_the_families_register_on_import_and_the_packages_below_know_nothing_of_recipes():
    import subprocess
    import sys
    code = ("import sys; import amp_edu.fp8, amp_edu.fp4, amp_edu.optim; "
            "assert not [m for m in sys.modules if m.startswith('amp_edu.recipes')], 'fp8/fp4/optim import recipes'; "
            "from amp_edu.recipes import parse_recipe; "
            "print(' '.join(parse_recipe(n).name for n in ('fp8_tensorwise', 'nvfp4_te', 'states_fp8')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "fp8_tensorwise nvfp4_te states_fp8"


class _Recorded(Amp):
    """amp_fp16 writing down each event and action the loop calls, in order."""

    def __init__(self):
        super().__init__(torch.float16)
        self.calls = []

    def _note(self, name, result):
        self.calls.append(name)
        return result

    def before_fit(self, model, optimizer):
        return self._note("before_fit", super().before_fit(model, optimizer))

    def zero_grad(self):
        return self._note("zero_grad", super().zero_grad())

    def before_batch(self, x):
        return self._note("before_batch", super().before_batch(x))

    def forward_context(self):
        return self._note("forward_context", super().forward_context())

    def before_backward(self, loss):
        return self._note("before_backward", super().before_backward(loss))

    def after_backward(self):
        return self._note("after_backward", super().after_backward())

    def before_step(self, clip_grad_norm=None):
        return self._note("before_step", super().before_step(clip_grad_norm))

    def optimizer_step(self, skip):
        return self._note("optimizer_step", super().optimizer_step(skip))

    def after_step(self, skip):
        return self._note("after_step", super().after_step(skip))


def test_train_calls_the_events_in_the_loops_order():
    from amp_edu import data, train
    rec = _Recorded()
    h = train.train(data.get_task("blobs", device="cpu", n=64), "mlp", rec, steps=2, batch_size=8, accumulate=2,
                    clip_grad_norm=1.0, eval_every=0)
    micro = ["before_batch", "forward_context", "before_backward"]
    step = ["zero_grad", *micro, *micro, "after_backward", "before_step", "optimizer_step", "after_step"]
    assert rec.calls == ["before_fit", *step, *step] and h.steps == 2


def test_the_hand_loop_shorthands_are_the_events():
    """``backward`` and ``step`` (for a loop written by hand) give the bits ``train``'s events give."""
    data = batches(9, 3, bad=(1,))
    a, b = net(), net()
    run(Amp(torch.float16), a, data, clip=1.0)
    rec = Amp(torch.float16)
    rec.before_fit(b, sgd)
    skipped = []
    for x, y in data:
        rec.zero_grad()
        with rec.forward_context():
            logits = b(rec.before_batch(x))
        rec.before_backward(F.cross_entropy(logits.float(), y)).backward()
        rec.after_backward()
        result = rec.before_step(1.0)
        rec.optimizer_step(result.skipped)
        rec.after_step(result.skipped)
        skipped.append(result.skipped)
    assert skipped == [False, True, False]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_the_sets_and_families_are_read_from_the_registry_at_call_time(monkeypatch):
    assert registry.names("everyday") == ("fp32", "amp_fp16", "amp_bf16", "fp16_pure")
    assert registry.names("precision") == ("fp32", "amp_bf16", "amp_fp16_noscaler", "bf16_pure", "fp16_pure")
    assert registry.names("timed") == ("fp32", "amp_fp16", "amp_bf16")
    assert {"fp8_tensorwise", "fp8_rowwise", "fp8_delayed"} <= set(registry.names(family=Family.FP8))
    assert registry.entry("fp16_master_scale").family is Family.MASTER
    assert registry.entry("amp_fp16_noscaler").factory is AmpWithoutScaler
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))     # registered for this test only

    @registry.register("fp16_clipped_pure", sets="precision")
    class ClippedPure(Pure):
        pass
    assert registry.names("precision")[-1] == "fp16_clipped_pure"          # a later recipe is included
    assert registry.entry("fp16_clipped_pure").family is Family.PURE   # from its class
    registry.register("bf16_noop", lambda: Pure(torch.bfloat16))
    assert registry.entry("bf16_noop").family is Family.PURE           # from what it builds


@pytest.mark.parametrize("call, exc, match", [
    (lambda: registry.register("Bad Name", Recipe), ValueError, "lower-case"),
    (lambda: registry.register("x1", Recipe, sets=("weekly",)), ValueError, "everyday"),
    (lambda: registry.register("x2", Recipe, family="fp32"), TypeError, "Family"),
    (lambda: registry.register("x3", lambda: object()), TypeError, "Family"),
    (lambda: registry.register("x4", 42), TypeError, "callable"),
    (lambda: registry.names("weekly"), ValueError, "everyday"),
    (lambda: registry.names(family="amp"), TypeError, "Family"),
    (lambda: registry.entry("nope"), ValueError, "accepted"),
])
def test_the_registry_rejects_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
