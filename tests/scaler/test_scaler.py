"""amp_edu.scaler.GradScaler against torch.amp.GradScaler, side by side.

Every test runs the same script on both scalers and demands the same observable result: bit-equal
scales, growth trackers, skipped steps and parameters (``torch.equal``), the same return values,
state dicts and warnings, and the same exception types and messages.
"""

from __future__ import annotations

import math
import pickle
import warnings

import pytest
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_edu import scaler as S
from amp_edu.scaler import _fast as Fast
from amp_edu.scaler.contract import (UNSCALABLE, check_unscale_scalars, check_update_args, check_update_tensors,
                                     first_bad_grad)
from amp_edu.scaler.grad_scaler import GradScaler, OptState

TorchScaler = torch.amp.GradScaler
BOTH = [TorchScaler, GradScaler]
INF, NAN = math.inf, math.nan
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The parity runs are tiny: one thread avoids waking the thread pool for every small op,
    which costs milliseconds per op when the machine is busy."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def outcome(fn):
    """``("ok", result)`` or ``(exception type, message)``."""
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - we compare whatever happens
        return type(exc), str(exc)


def assert_same_failure(script):
    """``script(cls)`` raises the same exception type and message for torch's scaler and ours."""
    theirs, ours = outcome(lambda: script(TorchScaler)), outcome(lambda: script(GradScaler))
    assert theirs[0] != "ok", f"torch's scaler did not raise: {theirs}"
    assert ours == theirs


def bits(t: torch.Tensor, *, any_nan: bool = False) -> torch.Tensor:
    """A float tensor's bit pattern, so that NaN == NaN and -0.0 != 0.0. ``any_nan``: every NaN
    counts as the same NaN (its payload bits, which no parameter ever sees, may differ)."""
    t = t.detach()
    if any_nan:
        t = torch.where(t.isnan(), torch.full_like(t, NAN), t)
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


# ---------------------------------------------------------------------------------------------
# The two numerical pieces against torch's private kernels
# ---------------------------------------------------------------------------------------------

def _update_cases():
    big = 2.0 ** 127
    for scale in (1.0, 65536.0, 3.0, 0.1, big, 3.4028234663852886e38, 2.0 ** -149, 0.0, INF, NAN, -8.0):
        for tracker in (0, 1, 5, 6, 7, 100):
            for found in (0.0, 1.0, 2.0, NAN, -1.0):
                for gf, bf, gi in ((2.0, 0.5, 7), (1.7, 0.3, 6), (3.0, 0.123456789, 1), (2.0, 0.5, 2000)):
                    yield scale, tracker, found, gf, bf, gi


@pytest.mark.parametrize("impl", [S.update_scale_, Fast.update_scale_, Fast._update_scale_on_device_],
                         ids=["readable", "fast", "fast-on-device"])
def test_update_rule_matches_torch_kernel(impl):
    n = 0
    for scale, tracker, found, gf, bf, gi in _update_cases():
        st, tt = torch.tensor(scale), torch.tensor(tracker, dtype=torch.int32)
        so, to = st.clone(), tt.clone()
        f = torch.tensor(found)
        torch._amp_update_scale_(st, tt, f, gf, bf, gi)
        impl(so, to, f.clone(), gf, bf, gi)
        case = (scale, tracker, found, gf, bf, gi)
        assert torch.equal(bits(so), bits(st)), case
        assert torch.equal(to, tt), case
        n += 1
    assert n > 1000


def test_update_rule_on_plain_numbers():
    assert S.update_rule(65536.0, 3, 1.0, 2.0, 0.5, 2000) == (32768.0, 0)
    assert S.update_rule(65536.0, 1998, 0.0, 2.0, 0.5, 2000) == (65536.0, 1999)
    assert S.update_rule(65536.0, 1999, 0.0, 2.0, 0.5, 2000) == (131072.0, 0)   # exactly at the interval
    assert S.update_rule(2.0 ** 127, 0, 0.0, 2.0, 0.5, 1) == (2.0 ** 127, 0)     # never grows to inf
    assert S.update_rule(8.0, 2500, 0.0, 2.0, 0.5, 2000) == (8.0, 2501)          # past the interval: never
    assert S.update_rule(8.0, 3, NAN, 2.0, 0.5, 2000) == (4.0, 0)                # NaN counts as found
    assert S.update_rule(1.0, 0, 1.0, 2.0, 0.3, 2000)[0] == torch.tensor(0.3).item()  # rounded to float32


def test_update_argument_checks_match_torch():
    import decimal
    import fractions

    import numpy as np
    values = [True, np.bool_(True), torch.tensor(True), torch.tensor(2, dtype=torch.uint8), torch.tensor([2.0]),
              fractions.Fraction(2), decimal.Decimal(2), np.int32(2), 2.0, 3, None, "x", np.float32(2.0),
              np.float64(3.0), torch.tensor(4), torch.tensor(4.0), 2 ** 40, torch.tensor(2.0, requires_grad=True)]
    for v in values:
        for k in range(3):
            args = [2.0, 0.5, 3]
            args[k] = v

            def call(fn):
                return fn(torch.tensor(1.0), torch.tensor(0, dtype=torch.int32), torch.tensor(0.0), *args)
            theirs = outcome(lambda: call(torch._amp_update_scale_))
            for impl in (S.update_scale_, Fast.update_scale_):
                ours = outcome(lambda: call(impl))
                assert (ours[0], ours[1] if ours[0] != "ok" else None) == \
                    (theirs[0], theirs[1] if theirs[0] != "ok" else None), (k, v, impl)


def _grad_lists():
    g = torch.Generator().manual_seed(0)
    yield "small", [torch.randn(64, 64, generator=g) for _ in range(12)] + [torch.randn(64, generator=g) for _ in range(12)]
    yield "large", [torch.randn(300, 300, generator=g), torch.randn(40000, generator=g), torch.randn(5, generator=g)]
    yield "odd", [torch.randn(0, 3), torch.randn(()), torch.randn(7, 3, generator=g).t(), torch.randn(2, 3, 4, generator=g)[:, 1]]
    yield "tiny-and-huge", [torch.tensor([3.0e38, -3.0e38, 1e-45, -0.0]), torch.tensor([65504.0, 1e-8])]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("impl", ["readable", "fast-cpu-stacked-sums", "fast-gpu-foreach-norm"])
def test_check_and_unscale_matches_torch_kernel(dtype, impl, monkeypatch):
    if impl == "fast-gpu-foreach-norm":   # exercise the GPU strategy (nothing read back) on the CPU
        monkeypatch.setattr(Fast, "_reads_are_free", lambda device: False)
    ours_fn = S.non_finite_check_and_unscale_ if impl == "readable" else Fast.non_finite_check_and_unscale_
    for name, base in _grad_lists():
        base = [t.to(dtype) for t in base]
        first = 1 if name == "odd" else 0                  # element 0 of "odd" is empty
        for poison, where in ((None, 0), (INF, first), (-INF, -1), (NAN, -1), (NAN, first), (-INF, first)):
            for inv in (2.0 ** -16, 1.0, 1.0 / 3.0, 4.0) + ((0.0,) if poison is None else ()):
                theirs = [t.clone() for t in base]
                ours = [t.clone() for t in base]
                if poison is not None:
                    for grads in (theirs, ours):
                        grads[where].view(-1)[-1] = poison
                ft, fo = torch.zeros(()), torch.zeros(())
                iv = torch.tensor(inv)
                torch._amp_foreach_non_finite_check_and_unscale_(theirs, ft, iv)
                ours_fn(ours, fo, iv)
                case = (name, dtype, poison, where, inv)
                assert torch.equal(fo, ft), case
                for a, b in zip(ours, theirs):
                    assert torch.equal(bits(a, any_nan=True), bits(b, any_nan=True)), case


def test_check_is_exact_at_the_chunk_boundaries(monkeypatch):
    monkeypatch.setattr(Fast, "_CPU_CHUNK", 10)
    assert Fast._cpu_has_non_finite({(3,): [torch.tensor([3e38, 3e38, 1.0])]}) is False   # the sum overflows, the values don't
    for n in (1, 3, 9, 10, 11, 25):
        for k in range(n):
            grads = [torch.ones(3, 3) for _ in range(n)]   # 9 elements: one, then several per stack
            grads[k][2, 1] = -INF
            found = torch.zeros(())
            Fast.non_finite_check_and_unscale_(grads, found, torch.tensor(0.5))
            assert found.item() == 1.0, (n, k)
    found = torch.zeros(())
    Fast.non_finite_check_and_unscale_([torch.ones(3, 3)] * 4, found, torch.tensor(1.0))
    assert found.item() == 0.0


@pytest.mark.parametrize("impl", [S.non_finite_check_and_unscale_, Fast.non_finite_check_and_unscale_],
                         ids=["readable", "fast"])
def test_found_inf_is_never_cleared(impl):
    found = torch.ones(())
    impl([torch.ones(3)], found, torch.tensor(1.0))
    assert found.item() == 1.0
    impl([], found, torch.tensor(1.0))
    assert found.item() == 1.0


def test_inverse_scale_is_float64_then_float32():
    scales = torch.tensor([1.0, 3.0, 65536.0, 1000.0, 2.0 ** 127, 1.7e38, 2.0 ** -126, 0.3, 0.0, INF])
    for s in scales:
        assert torch.equal(bits(S.inverse_scale(s)), bits(s.double().reciprocal().float()))
        assert S.inverse_scale(s).dtype == torch.float32


# ---------------------------------------------------------------------------------------------
# Long training runs side by side
# ---------------------------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self, d_in=6, d_out=4, sparse=False, dtype=torch.float32):
        super().__init__()
        self.emb = nn.Embedding(10, d_in, sparse=sparse, dtype=dtype)
        self.fc1 = nn.Linear(d_in, 16, dtype=dtype)
        self.fc2 = nn.Linear(16, d_out, dtype=dtype)
        self.gain = nn.Parameter(torch.ones((), dtype=dtype))

    def forward(self, x, idx):
        h = torch.tanh(self.fc1(x + self.emb(idx)))
        return self.fc2(h) * self.gain


LOSSES = {
    "mse": lambda out, y: F.mse_loss(out, y),
    "cross_entropy": lambda out, y: F.cross_entropy(out, y.argmax(1)),
    "huber": lambda out, y: F.smooth_l1_loss(out, y, beta=0.5),
}

OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "sgd_foreach": lambda p: torch.optim.SGD(p, lr=0.05, weight_decay=1e-3, foreach=True),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adamw_amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True),
    "adam_fused": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),   # _step_supports_amp_scaling
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-3),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=1e-2),
}


def poison_grads(model, kind):
    """Make one gradient inf, -inf or NaN, as an fp16 overflow would."""
    g = model.fc1.weight.grad
    g.view(-1)[3] = {"inf": INF, "-inf": -INF, "nan": NAN}[kind]


def run(cls, *, steps=80, optimizer="adam", loss="mse", scaler_kw=None, events=None, clip=None,
        accumulate=1, unscale_every=0, resume_at=None, resume_with=None, autocast_fp16=False,
        sparse=False, dtype=torch.float32, two_optimizers=False, device="cpu"):
    """Train a small Net with scaler class ``cls``; return the per-step trace.

    ``events[it]`` poisons the gradients ("inf", "-inf", "nan") or the loss ("huge": x 1e38) at
    iteration ``it``. ``resume_at``: after that step, save everything and continue in fresh objects
    (the scaler rebuilt with ``resume_with`` if given: a torch state dict loaded into ours, ...).
    """
    events = events or {}
    torch.manual_seed(0)
    model = Net(sparse=sparse, dtype=dtype).to(device)
    if two_optimizers:
        opts = [OPTIMIZERS[optimizer](list(model.fc1.parameters()) + [model.gain]),
                torch.optim.SGD(list(model.fc2.parameters()) + list(model.emb.parameters()), lr=0.05)]
    elif sparse:
        opts = [torch.optim.SGD(model.parameters(), lr=0.05)]
    else:
        opts = [OPTIMIZERS[optimizer](model.parameters())]
    kw = dict(init_scale=2.0 ** 16, growth_interval=5)
    kw.update(scaler_kw or {})
    scaler = cls(device, **kw)
    gen = torch.Generator().manual_seed(1)
    trace = []
    for it in range(steps):
        x = torch.randn(8, 6, generator=gen).to(device, dtype)
        idx = torch.randint(0, 10, (8,), generator=gen).to(device)
        y = torch.randn(8, 4, generator=gen).to(device, dtype)
        ctx = torch.autocast(device, dtype=torch.float16) if autocast_fp16 else torch.autocast(device, enabled=False)
        with ctx:
            out = model(x * (8.0 if autocast_fp16 else 1.0), idx)
        value = LOSSES[loss](out.float(), y.float())
        if events.get(it) == "huge":
            value = value * 1e38
        scaler.scale(value / accumulate).backward()
        if events.get(it) in ("inf", "-inf", "nan"):
            poison_grads(model, events[it])
        if (it + 1) % accumulate:
            continue                                    # accumulate: no unscale/step/update yet
        if clip is not None or (unscale_every and it % unscale_every == 0):
            for opt in opts:
                scaler.unscale_(opt)
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        returned = [scaler.step(opt) for opt in opts]
        skipped = [bool(sum(v.item() for v in scaler._found_inf_per_device(opt).values())) for opt in opts]
        scaler.update()
        trace.append(dict(scale=scaler._scale.clone(), tracker=scaler._growth_tracker.clone(),
                          skipped=skipped, returned=returned,
                          params=[p.detach().clone() for p in model.parameters()]))
        for opt in opts:
            opt.zero_grad()
        if resume_at is not None and it == resume_at:
            saved = {"model": model.state_dict(), "opts": [o.state_dict() for o in opts],
                     "scaler": scaler.state_dict()}
            model = Net(sparse=sparse, dtype=dtype).to(device)
            model.load_state_dict(saved["model"])
            if two_optimizers:
                fresh = [OPTIMIZERS[optimizer](list(model.fc1.parameters()) + [model.gain]),
                         torch.optim.SGD(list(model.fc2.parameters()) + list(model.emb.parameters()), lr=0.05)]
            else:
                fresh = [OPTIMIZERS[optimizer](model.parameters())]
            for o, sd in zip(fresh, saved["opts"]):
                o.load_state_dict(sd)
            opts = fresh
            scaler = (resume_with or cls)(device)        # defaults: everything comes from the state dict
            scaler.load_state_dict(saved["scaler"])
    return trace


def assert_same_trace(theirs, ours):
    assert len(theirs) == len(ours)
    for i, (a, b) in enumerate(zip(theirs, ours)):
        assert torch.equal(bits(b["scale"]), bits(a["scale"])), f"step {i}: scale {b['scale']} != {a['scale']}"
        assert torch.equal(b["tracker"], a["tracker"]), f"step {i}: tracker"
        assert b["skipped"] == a["skipped"], f"step {i}: skipped"
        assert b["returned"] == a["returned"], f"step {i}: step() returned"
        for k, (pa, pb) in enumerate(zip(a["params"], b["params"])):
            assert torch.equal(bits(pb), bits(pa)), f"step {i}: parameter {k} differs"


EVENTS = {3: "inf", 4: "inf", 11: "-inf", 17: "nan", 30: "huge", 31: "nan", 32: "-inf", 50: "inf", 51: "inf",
          52: "inf", 53: "inf", 70: "nan"}

CASES = {
    "adam-mse": dict(optimizer="adam", loss="mse", events=EVENTS),
    "sgd-momentum-ce-clip": dict(optimizer="sgd_momentum", loss="cross_entropy", events=EVENTS, clip=0.5),
    "adamw-huber-accumulate": dict(optimizer="adamw_amsgrad", loss="huber", events=EVENTS, accumulate=3),
    "rmsprop-odd-factors": dict(optimizer="rmsprop", events=EVENTS,
                                scaler_kw=dict(init_scale=1000.0, growth_factor=1.7, backoff_factor=0.3,
                                               growth_interval=4)),
    "adagrad-unscale-sometimes": dict(optimizer="adagrad", events=EVENTS, unscale_every=3),
    "sgd-foreach-two-optimizers": dict(optimizer="sgd_foreach", events=EVENTS, two_optimizers=True),
    "adam-fused-amp-aware": dict(optimizer="adam_fused", events=EVENTS),
    "adam-fused-unscaled-first": dict(optimizer="adam_fused", events=EVENTS, unscale_every=2, clip=1.0),
    "autocast-fp16-overflows": dict(optimizer="adam", autocast_fp16=True, steps=100,
                                    scaler_kw=dict(init_scale=2.0 ** 24, growth_interval=10)),
    "sparse-embedding": dict(sparse=True, events=EVENTS),
    "bf16-params": dict(optimizer="sgd_momentum", dtype=torch.bfloat16, events=EVENTS),
    "float64-params": dict(optimizer="adam", dtype=torch.float64, events=EVENTS),
    "grows-to-float32-max": dict(optimizer="sgd_momentum", steps=60,
                                 scaler_kw=dict(init_scale=2.0 ** 120, growth_interval=1, growth_factor=4.0)),
    "scale-falls-below-one": dict(optimizer="adam", steps=60, events={i: "nan" for i in range(0, 60, 2)},
                                  scaler_kw=dict(init_scale=4.0, growth_interval=1000)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_training_runs_are_bit_identical(case, device):
    kw = CASES[case]
    theirs, ours = run(TorchScaler, device=device, **kw), run(GradScaler, device=device, **kw)
    assert_same_trace(theirs, ours)
    assert any(any(t["skipped"]) for t in theirs) or case == "grows-to-float32-max"


def test_the_fp16_run_really_overflows_and_grows():
    trace = run(GradScaler, **CASES["autocast-fp16-overflows"])
    skipped = [t["skipped"][0] for t in trace]
    scales = [t["scale"].item() for t in trace]
    assert skipped[0] and not all(skipped), "2^24 should overflow fp16 at first, then fit"
    assert max(scales[len(scales) // 2:]) > min(scales), "the scale should grow again"


@pytest.mark.parametrize("saved_by, loaded_by", [(TorchScaler, GradScaler), (GradScaler, TorchScaler),
                                                 (GradScaler, GradScaler)])
def test_checkpoint_and_resume_across_implementations(saved_by, loaded_by):
    uninterrupted = run(TorchScaler, events=EVENTS, steps=80)
    resumed = run(saved_by, events=EVENTS, steps=80, resume_at=33, resume_with=loaded_by)
    assert_same_trace(uninterrupted, resumed)


# ---------------------------------------------------------------------------------------------
# The API, one behaviour at a time
# ---------------------------------------------------------------------------------------------

def test_constructor_defaults_and_getters():
    import inspect
    assert str(inspect.signature(GradScaler.__init__)) == str(inspect.signature(TorchScaler.__init__))
    for cls in BOTH:
        s = cls("cpu")
        assert (s.get_scale(), s.get_growth_factor(), s.get_backoff_factor(), s.get_growth_interval(),
                s._get_growth_tracker(), s.is_enabled()) == (65536.0, 2.0, 0.5, 2000, 0, True)
    ours, theirs = GradScaler("cpu"), TorchScaler("cpu")
    for s in (ours, theirs):
        s.set_growth_factor(3.0)
        s.set_backoff_factor(0.25)
        s.set_growth_interval(17)
    assert ours.state_dict() == theirs.state_dict()


@pytest.mark.parametrize("kw", [dict(growth_factor=1.0), dict(growth_factor=0.5), dict(backoff_factor=1.0),
                                dict(backoff_factor=2.0), dict(growth_factor=1.0, backoff_factor=1.0)])
def test_constructor_validation(kw):
    assert_same_failure(lambda cls: cls("cpu", **kw))
    for cls in BOTH:                       # a disabled scaler checks nothing
        assert not cls("cpu", enabled=False, **kw).is_enabled()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_warns_and_disables():
    caught = []
    for cls in BOTH:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            s = cls()                      # device="cuda" by default
        caught.append([(x.category, str(x.message)) for x in w])
        assert not s.is_enabled() and s.state_dict() == {}
    assert caught[0] == caught[1] and caught[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GradScaler("cuda", enabled=False)


def test_lazy_init_on_first_scale():
    for cls in BOTH:
        s = cls("cpu", init_scale=123.0)
        assert s._scale is None and s._growth_tracker is None
        assert s.get_scale() == 123.0 and s.state_dict()["scale"] == 123.0
        out = s.scale(torch.tensor(2.0))
        assert s._scale.dtype == torch.float32 and s._growth_tracker.dtype == torch.int32
        assert out.item() == 246.0


def _nested():
    a, b = torch.tensor(1.5), torch.tensor([2.0, -3.0], dtype=torch.float16)
    return [a, (b, [a * 2, (b,)]), ()]


def test_scale_returns_the_same_structures_and_values():
    t_out = TorchScaler("cpu", init_scale=3.0).scale(_nested())
    o_out = GradScaler("cpu", init_scale=3.0).scale(_nested())

    def flat(x):
        if isinstance(x, torch.Tensor):
            return [("T", x.dtype, x.tolist())]
        return [type(x).__name__] + [v for item in x for v in flat(item)]
    assert flat(o_out) == flat(t_out)
    for cls in BOTH:                      # 0-dim fp16 loss x float32 scale -> float32 (promotion)
        assert cls("cpu").scale(torch.tensor(1.0, dtype=torch.float16)).dtype == torch.float32
        assert cls("cpu").scale(torch.ones(2, dtype=torch.float16)).dtype == torch.float16
    gen_t = TorchScaler("cpu", init_scale=4.0).scale(x for x in [torch.tensor(1.0), torch.tensor(2.0)])
    gen_o = GradScaler("cpu", init_scale=4.0).scale(x for x in [torch.tensor(1.0), torch.tensor(2.0)])
    assert type(gen_o) is type(gen_t) is map
    assert [v.item() for v in gen_o] == [v.item() for v in gen_t] == [4.0, 8.0]


@pytest.mark.parametrize("bad", [3, 2.5, None, [torch.tensor(1.0), [None]], (torch.tensor(1.0), 7)])
def test_scale_rejects_non_tensors_like_torch(bad):
    assert_same_failure(lambda cls: cls("cpu").scale(bad))


def test_disabled_scaler_is_a_no_op():
    for cls in BOTH:
        s = cls("cpu", enabled=False)
        p = nn.Parameter(torch.ones(2))
        p.grad = torch.full((2,), INF)
        opt = torch.optim.SGD([p], lr=1.0)
        loss = torch.tensor(5.0)
        assert s.scale(loss) is loss
        assert s.unscale_(opt) is None and torch.isinf(p.grad).all()
        assert s.step(opt) is None and torch.isinf(p).all()       # steps even on inf: no scaler
        assert s.update() is None and s.update(8.0) is None
        assert s.state_dict() == {} and s.get_scale() == 1.0 and s._get_growth_tracker() == 0
        assert s.load_state_dict({}) is None and not s.is_enabled()
    assert_same_failure(lambda cls: cls("cpu", enabled=False).get_growth_factor())


class Recorder(torch.optim.SGD):
    """Returns what it was called with, to check forwarding and the return value."""

    def step(self, *args, **kwargs):
        super().step()
        return ("stepped", args, tuple(sorted(kwargs)))


def _one_param_setup(cls, grad=1.0, **kw):
    s = cls("cpu", init_scale=4.0, **kw)
    p = nn.Parameter(torch.ones(3))
    opt = Recorder([p], lr=0.5)
    (s.scale(p.sum()) * grad).backward()
    return s, p, opt


def test_step_forwards_arguments_and_returns_their_value():
    for grad, expect_skip in ((1.0, False), (INF, True)):
        results = []
        for cls in BOTH:
            s, p, opt = _one_param_setup(cls, grad)
            r = s.step(opt, "a", 2, k=3)
            s.update()
            results.append((r, p.detach().clone(), s.get_scale()))
        assert results[0][0] == results[1][0]
        assert (results[0][0] is None) == expect_skip
        assert torch.equal(results[0][1], results[1][1]) and results[0][2] == results[1][2]


def test_positional_closure_passes_but_keyword_closure_is_refused():
    assert_same_failure(lambda cls: _one_param_setup(cls)[0].step(_one_param_setup(cls)[2], closure=lambda: 0))
    for cls in BOTH:
        s, p, opt = _one_param_setup(cls)
        assert s.step(opt, lambda: 0)[1][0]() == 0


def _unscale_twice(cls):
    s, p, opt = _one_param_setup(cls)
    s.unscale_(opt)
    s.unscale_(opt)


def _unscale_after_step(cls):
    s, p, opt = _one_param_setup(cls)
    s.step(opt)
    s.unscale_(opt)


def _step_twice(cls):
    s, p, opt = _one_param_setup(cls)
    s.step(opt)
    s.step(opt)


def _no_grads(cls):
    s = cls("cpu")
    p = nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1)
    s.scale(torch.tensor(1.0))
    s.step(opt)


def _update_without_step(cls):
    s = cls("cpu")
    s.scale(torch.tensor(1.0))
    s.update()


def _fp16_params(cls):
    s = cls("cpu")
    p = nn.Parameter(torch.ones(3, dtype=torch.float16))
    opt = torch.optim.SGD([p], lr=0.1)
    s.scale(p.sum()).backward()
    s.step(opt)


def _fp16_sparse(cls):
    s = cls("cpu")
    emb = nn.Embedding(4, 2, sparse=True).half()
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    s.scale(emb(torch.tensor([1, 1])).float().sum()).backward()
    s.unscale_(opt)


def _before_scale(method):
    def script(cls):
        s = cls("cpu")
        opt = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)
        return {"step": lambda: s.step(opt), "unscale_": lambda: s.unscale_(opt), "update": s.update}[method]()
    return script


def _pickle_mid_iteration(cls):
    s, p, opt = _one_param_setup(cls)
    s.unscale_(opt)
    pickle.dumps(s)


def _bad_new_scale(value):
    def script(cls):
        s, p, opt = _one_param_setup(cls)
        s.step(opt)
        s.update(value)
    return script


ERRORS = {
    "unscale twice": _unscale_twice,
    "unscale after step": _unscale_after_step,
    "step twice": _step_twice,
    "no inf checks recorded": _no_grads,
    "update without step": _update_without_step,
    "fp16 gradients": _fp16_params,
    "fp16 sparse gradients": _fp16_sparse,
    "step before scale": _before_scale("step"),
    "unscale_ before scale": _before_scale("unscale_"),
    "update before scale": _before_scale("update"),
    "pickle mid-iteration": _pickle_mid_iteration,
    "new_scale int": _bad_new_scale(1024),
    "new_scale two elements": _bad_new_scale(torch.ones(2)),
    "new_scale requires grad": _bad_new_scale(torch.ones((), requires_grad=True)),
    "new_scale on another device": _bad_new_scale(torch.ones((), device="meta")),
    "growth interval float": lambda cls: (lambda s: (s.set_growth_interval(1e3), _step_update(s)))(cls("cpu")),
    "load empty state dict": lambda cls: cls("cpu").load_state_dict({}),
    "load state dict missing key": lambda cls: cls("cpu").load_state_dict({"scale": 2.0}),
}


def _step_update(s):
    p = nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([p], lr=0.1)
    s.scale(p.sum()).backward()
    s.step(opt)
    s.update()


@pytest.mark.parametrize("name", list(ERRORS), ids=list(ERRORS))
def test_error_paths_raise_like_torch(name):
    assert_same_failure(ERRORS[name])


def test_update_with_new_scale():
    for value in (1024.0, torch.tensor(3.0), torch.tensor([0.5]), torch.tensor(2, dtype=torch.int64)):
        results = []
        for cls in BOTH:
            s, p, opt = _one_param_setup(cls)
            s.step(opt)
            got = outcome(lambda: s.update(value))
            results.append((got, s._scale.clone(), s._get_growth_tracker(), len(s._per_optimizer_states)))
        assert results[0][0] == results[1][0], value
        assert torch.equal(bits(results[0][1]), bits(results[1][1])) and results[0][2:] == results[1][2:]
    t = torch.tensor(5.0)                       # copied: a later change to t does not leak in
    s, p, opt = _one_param_setup(GradScaler)
    s.step(opt)
    s.update(t)
    t.fill_(7.0)
    assert s.get_scale() == 5.0


def test_state_dict_keys_values_and_cross_loading():
    dicts = []
    for cls in BOTH:
        s, p, opt = _one_param_setup(cls, INF)
        s.step(opt)
        s.update()
        dicts.append(s.state_dict())
    assert dicts[0] == dicts[1]
    assert list(dicts[1]) == ["scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"]
    for src, dst in ((TorchScaler, GradScaler), (GradScaler, TorchScaler)):
        a = src("cpu", init_scale=8.0, growth_interval=3)
        a.scale(torch.tensor(1.0))
        b = dst("cpu")
        b.load_state_dict(a.state_dict())              # before b's first scale(): lazily used
        assert b.state_dict() == a.state_dict()
        b.scale(torch.tensor(1.0))
        b.load_state_dict(dict(a.state_dict(), scale=2.0, _growth_tracker=2))   # after: filled in place
        assert b.get_scale() == 2.0 and b._get_growth_tracker() == 2


def test_pickling_round_trip_like_torch():
    blobs = []
    for cls in BOTH:
        s, p, opt = _one_param_setup(cls)
        s.step(opt)
        s.update()
        clone = pickle.loads(pickle.dumps(s))
        assert clone._scale is None and clone._growth_tracker is None   # re-created lazily
        blobs.append((clone.state_dict(), sorted(vars(clone))))
        assert clone.get_scale() == s.get_scale()
    assert blobs[0][0] == blobs[1][0]
    disabled = pickle.loads(pickle.dumps(GradScaler("cpu", enabled=False)))
    assert not disabled.is_enabled()


def test_per_optimizer_state_machine():
    s, p, opt = _one_param_setup(GradScaler)
    stages = [s._per_optimizer_states[id(opt)]["stage"]]
    s.unscale_(opt)
    stages.append(s._per_optimizer_states[id(opt)]["stage"])
    s.step(opt)
    stages.append(s._per_optimizer_states[id(opt)]["stage"])
    s.update()
    stages.append(s._per_optimizer_states[id(opt)]["stage"])
    assert [st.name for st in stages] == ["READY", "UNSCALED", "STEPPED", "READY"]


def test_found_inf_values_match_torch_per_device():
    found = []
    for cls in BOTH:
        s, p, opt = _one_param_setup(cls, INF)
        s.unscale_(opt)
        found.append({d: v.clone() for d, v in s._found_inf_per_device(opt).items()})
    assert found[0].keys() == found[1].keys() == {torch.device("cpu")}
    assert torch.equal(found[0][torch.device("cpu")], found[1][torch.device("cpu")])


class OldStyle(torch.optim.SGD):
    """An optimizer that asks for the scaler itself (the deprecated ``grad_scaler=`` protocol)."""

    _step_supports_amp_scaling = True

    def step(self, closure=None, grad_scaler=None):
        found = grad_scaler._check_inf_per_device(self)
        if not sum(v.item() for v in found.values()):
            inv = 1.0 / grad_scaler._get_scale_async().item()   # how such optimizers ask for S
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad.mul_(inv)
            super().step()
        return "custom"


def test_old_style_amp_aware_optimizer_gets_the_scaler():
    results = []
    for cls in BOTH:
        for grad in (1.0, INF):
            s = cls("cpu", init_scale=4.0)
            p = nn.Parameter(torch.ones(3))
            opt = OldStyle([p], lr=0.5)
            (s.scale(p.sum()) * grad).backward()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                r = s.step(opt)
            s.update()
            results.append((r, p.detach().clone(), s.get_scale(), [(x.category, str(x.message)) for x in w]))
    for a, b in zip(results[:2], results[2:]):
        assert a[0] == b[0] and torch.equal(a[1], b[1]) and a[2] == b[2] and a[3] == b[3]


def test_model_parallel_gradients_on_two_devices_are_grouped_by_device():
    # 'meta' cannot hold values, so use two CPU dtypes instead: one found_inf per device, shared
    results = []
    for cls in BOTH:
        s = cls("cpu", init_scale=2.0)
        a, b = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2, dtype=torch.float64))
        opt = torch.optim.SGD([a, b], lr=0.1)
        (s.scale(a.sum()) + s.scale(b.sum()).float()).backward()
        b.grad[0] = NAN
        s.step(opt)
        results.append((a.detach().clone(), b.detach().clone(), s._found_inf_per_device(opt)[torch.device("cpu")].item()))
        s.update()
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(bits(results[0][1]), bits(results[1][1]))
    assert results[0][2] == results[1][2] == 1.0


# ---------------------------------------------------------------------------------------------
# Edge cases found by a systematic side-by-side search (issue 15), each compared at test time
# ---------------------------------------------------------------------------------------------

def _grad_step(cls, dtype, *, sparse=False, unscale=False, fused=False):
    """One scaled step of a 3-element parameter of ``dtype`` whose gradient holds an inf."""
    p = nn.Parameter(torch.ones(3, dtype=dtype))
    opt = torch.optim.Adam([p], lr=0.1, fused=True) if fused else torch.optim.SGD([p], lr=0.1)
    s = cls("cpu", init_scale=4.0)
    s.scale(torch.ones(()))
    g = torch.tensor([1.0, INF, 2.0]).to(dtype)
    p.grad = torch.sparse_coo_tensor(torch.tensor([[0, 2, 1]]), g, (3,)) if sparse else g
    if unscale:
        s.unscale_(opt)
    s.step(opt)
    s.update()
    return s.get_scale(), p.detach().clone(), p.grad.to_dense() if p.grad.is_sparse else p.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.complex64,
                                   torch.complex128, torch.int64], ids=str)
@pytest.mark.parametrize("how", ["dense", "sparse", "unscale_", "fused"])
def test_gradient_dtypes_and_layouts_behave_like_torch(dtype, how):
    """Complex and integer gradients are refused with torch's NotImplementedError and message;
    fp16 ones with its ValueError (unless the fused optimizer only checks); the rest match bitwise."""
    if how == "sparse" and dtype == torch.int64:
        pytest.skip("torch.sparse_coo_tensor of int64 values with an inf cannot be built")
    kw = dict(sparse=how == "sparse", unscale=how == "unscale_", fused=how == "fused")
    theirs, ours = outcome(lambda: _grad_step(TorchScaler, dtype, **kw)), outcome(lambda: _grad_step(GradScaler, dtype, **kw))
    assert ours[0] == theirs[0]
    if theirs[0] == "ok":
        assert ours[1][0] == theirs[1][0]
        for a, b in zip(ours[1][1:], theirs[1][1:]):
            assert torch.equal(bits(a, any_nan=True), bits(b, any_nan=True))
    else:
        assert ours[1] == theirs[1]


def test_list_scale_survives_load_state_dict_before_backward():
    """``scale([a, b])`` hands out copies of the scale: a later in-place write to the scaler's
    own tensor (load_state_dict, update(new_scale)) must not break the pending backward."""
    for reset in (lambda s: s.load_state_dict(s.state_dict()), lambda s: s.update(8.0)):
        grads = []
        for cls in BOTH:
            s = cls("cpu")
            a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
            l1, l2 = s.scale([a.sum(), b.sum()])
            reset(s)
            (l1 + l2).backward()
            grads.append((a.grad, b.grad))
        assert all(torch.equal(x, y) for x, y in zip(*grads))


def _raw_unscale(impl, grads, found, inv):
    """Outcome of one raw unscale call: ``("ok", [*grads, found_inf])`` or the error, where a
    dispatcher error is cut to its first sentence (the rest lists torch's registered backends)."""
    kind, value = outcome(lambda: impl(grads, found, inv))
    if kind == "ok":
        return kind, [g.clone() for g in grads] + [found.clone()]
    return kind, value.split(" This could be because")[0]


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (2,)], ids=str)
@pytest.mark.parametrize("scalar_dtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_raw_kernels_accept_and_refuse_scalars_like_torch(shape, scalar_dtype):
    """torch's kernels take the scale, inv_scale and found_inf as any 1-element float32 tensor
    (shape () or (1,)) and refuse others with their own messages."""
    def unscale(impl):
        grads = [torch.full((4,), 4.0), torch.full((2, 2), INF)]
        return _raw_unscale(impl, grads, torch.zeros(shape, dtype=scalar_dtype),
                            torch.full(shape, 0.25, dtype=scalar_dtype))

    def update(impl):
        scale, tracker = torch.full(shape, 4.0, dtype=scalar_dtype), torch.zeros(shape, dtype=torch.int32)
        kind, value = outcome(lambda: impl(scale, tracker, torch.zeros(shape, dtype=scalar_dtype), 2.0, 0.5, 1))
        return (kind, [scale, tracker]) if kind == "ok" else (kind, value)

    for script, (theirs_fn, ours_fn) in ((unscale, (torch._amp_foreach_non_finite_check_and_unscale_,
                                                    S.non_finite_check_and_unscale_)),
                                         (update, (torch._amp_update_scale_, S.update_scale_))):
        theirs, ours = script(theirs_fn), script(ours_fn)
        assert ours[0] == theirs[0]
        if theirs[0] == "ok":
            assert all(torch.equal(a, b) for a, b in zip(ours[1], theirs[1], strict=True))
        else:
            assert ours[1] == theirs[1]


@pytest.mark.parametrize("grads", [
    lambda: [torch.full((4,), 4.0), torch.full((4,), 4.0, dtype=torch.half), torch.full((4,), 4.0, dtype=torch.bfloat16)],
    lambda: [torch.full((4,), 4.0), torch.ones(4, dtype=torch.int64), torch.full((4,), 4.0)],
    lambda: [torch.full((4,), 4.0), torch.ones(4, dtype=torch.complex64)],
    lambda: [torch.full((4,), 4.0), torch.ones(4).to_sparse()],
    lambda: [],
], ids=["mixed-float-dtypes", "int-in-the-middle", "complex", "sparse", "empty"])
def test_raw_unscale_on_odd_lists_like_torch(grads):
    """Mixed dtypes in one call are fine; a refused tensor raises torch's error *after* the
    tensors before it were unscaled, as torch's kernel walks the list in order."""
    theirs = _raw_unscale(torch._amp_foreach_non_finite_check_and_unscale_, grads(), torch.zeros(1), torch.full((1,), 0.25))
    ours = _raw_unscale(S.non_finite_check_and_unscale_, grads(), torch.zeros(1), torch.full((1,), 0.25))
    assert ours[0] == theirs[0]
    if theirs[0] == "ok":
        assert all(torch.equal(a, b) for a, b in zip(ours[1], theirs[1], strict=True))
    else:
        assert ours[1] == theirs[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
                                   torch.int64, torch.uint8, torch.bool, torch.complex64], ids=str)
def test_the_contract_takes_the_dtypes_torchs_kernel_takes_and_refuses_the_others_in_its_words(dtype):
    grads = [torch.ones(2), torch.ones(2, dtype=dtype), torch.ones(2)]
    theirs = outcome(lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, torch.zeros(1), torch.ones(1)))
    index, err = first_bad_grad(grads, "cpu")
    assert (theirs[0] == "ok") == (dtype in UNSCALABLE) == (err is None)
    assert index == (3 if err is None else 1)                    # the gradients before it get unscaled
    if err is not None:
        assert (type(err), str(err)) == theirs
    assert first_bad_grad(grads, "cpu", uniform=True) == (3, None)      # grouped: the first speaks for all


def test_the_contracts_scalar_and_argument_checks_raise_what_torchs_kernels_raise():
    sparse = [torch.ones(2), torch.ones(2).to_sparse()]
    theirs = outcome(lambda: torch._amp_foreach_non_finite_check_and_unscale_(sparse, torch.zeros(1), torch.ones(1)))
    index, err = first_bad_grad(sparse, "cpu")
    assert index == 0 and (type(err), str(err)) == (theirs[0], theirs[1].split(" This could be because")[0])
    grads = [torch.ones(2)]
    for found, inv in ((torch.zeros(1), torch.ones(1, dtype=torch.float64)), (torch.zeros(2), torch.ones(1)),
                       (torch.zeros((), dtype=torch.float16), torch.ones(()))):
        theirs = outcome(lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv))
        assert theirs[0] is RuntimeError and outcome(lambda: check_unscale_scalars(found, inv, "cpu")) == theirs
    i32 = torch.tensor(0, dtype=torch.int32)
    for scale, tracker, found in ((torch.tensor(1.0), torch.tensor(0), torch.tensor(0.0)),
                                  (torch.tensor([1.0, 2.0]), i32, torch.tensor(0.0)),
                                  (torch.tensor(1.0, dtype=torch.float64), i32, torch.tensor(0.0)),
                                  (torch.tensor(1.0), i32, torch.zeros(3, dtype=torch.int32))):
        theirs = outcome(lambda: torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3))
        assert theirs[0] is RuntimeError and outcome(lambda: check_update_tensors(scale, tracker, found)) == theirs
    for args in ((2.0, 0.5, 1e3), (2.0, 0.5, True), ("2", 0.5, 3), (2.0, None, 3)):
        theirs = outcome(lambda: torch._amp_update_scale_(torch.tensor(1.0), i32.clone(), torch.tensor(0.0), *args))
        assert theirs[0] is TypeError and outcome(lambda: check_update_args(*args)) == theirs
    assert check_update_args(2, np.float32(0.5), np.int64(3)) is None


def test_partial_unscale_before_a_refused_gradient_matches_torch():
    """The tensors before a refused one are already unscaled when the error is raised."""
    def run(impl):
        grads = [torch.full((4,), 4.0), torch.ones(4, dtype=torch.int64)]
        try:
            impl(grads, torch.zeros(1), torch.full((1,), 0.25))
        except NotImplementedError:
            pass
        return grads[0]
    assert torch.equal(run(S.non_finite_check_and_unscale_), run(torch._amp_foreach_non_finite_check_and_unscale_))
    assert run(S.non_finite_check_and_unscale_).eq(1.0).all()


def test_per_optimizer_stage_is_torchs_enum():
    """Stages are torch's ``OptState`` members, so code that inspects ``_per_optimizer_states``
    (torch's tests, FSDP's ShardedGradScaler) sees the same values as with torch's scaler."""
    assert OptState is torch.amp.grad_scaler.OptState
    assert GradScaler("cpu")._per_optimizer_states["x"] == torch.amp.grad_scaler._refresh_per_optimizer_state()


@pytest.mark.parametrize("value", [torch.tensor(3.0), torch.tensor([3.0]), np.float32(3.0), np.float64(3.0), np.int64(3),
                                   True, 3, 3.0, "3", None, torch.tensor(3), np.array(3.0)], ids=repr)
@pytest.mark.parametrize("setter", ["set_growth_factor", "set_backoff_factor", "set_growth_interval", "init_scale",
                                    "growth_factor", "backoff_factor", "growth_interval", "enabled"])
def test_setters_and_constructor_arguments_of_every_type_like_torch(setter, value):
    """Tensor, NumPy, bool, int, float, str and None arguments: the same result or the same error
    (many are accepted by both and only fail, with torch's argument-parser message, at update)."""
    def script(cls):
        kw = {} if setter.startswith("set_") else {setter: value}
        s = cls("cpu", **({"growth_interval": 1} | kw))
        if setter.startswith("set_"):
            getattr(s, setter)(value)
        p = nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([p], lr=0.1)
        for _ in range(2):
            s.scale(p.sum()).backward()
            s.step(opt)
            s.update()
        return s.get_scale(), s._get_growth_tracker(), p.tolist(), repr(s.state_dict())
    assert outcome(lambda: script(GradScaler)) == outcome(lambda: script(TorchScaler))


def _structure(x):
    """A comparable picture of what scale() returned: types, dtypes, shapes, values."""
    if isinstance(x, torch.Tensor):
        return ("T", x.dtype, tuple(x.shape), x.to_dense().tolist() if x.is_sparse else x.tolist())
    if isinstance(x, (list, tuple, map)):
        return (type(x).__name__, [_structure(y) for y in x])
    if isinstance(x, dict):
        return ("dict", {k: _structure(v) for k, v in x.items()})
    return (type(x).__name__, repr(x))


_NT = __import__("collections").namedtuple("Pair", "a b")
_OUTPUTS = {
    "generator": lambda: (t for t in [torch.full((2,), 3.0), torch.full((2,), 4.0)]),
    "dict": lambda: {"a": torch.full((2,), 3.0)},
    "dict values": lambda: {"a": torch.full((2,), 3.0)}.values(),
    "set of ints": lambda: {1},
    "str": lambda: "ab",
    "bytes": lambda: b"ab",
    "range": lambda: range(2),
    "nested with empties": lambda: [torch.full((2,), 3.0), (torch.ones(1), [torch.ones(1)]), [], ()],
    "namedtuple": lambda: _NT(torch.ones(1), torch.ones(1)),
    "ndarray": lambda: np.ones(2),
    "list of ndarray": lambda: [np.ones(2)],
    "int tensor": lambda: torch.ones(2, dtype=torch.int64),
    "bool tensor": lambda: torch.ones(2, dtype=torch.bool),
    "half list": lambda: [torch.ones(2, dtype=torch.half)],
    "complex": lambda: torch.ones(2, dtype=torch.complex64),
    "sparse list": lambda: [torch.ones(2).to_sparse()],
    "None": lambda: None,
}


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("name", list(_OUTPUTS), ids=list(_OUTPUTS))
def test_scale_of_any_structure_like_torch(name, enabled):
    """Generators and dict views come back as lazy maps, dicts are iterated by key (and refused),
    strings and ints refused with torch's ValueError; a disabled scaler hands anything back."""
    def script(cls):
        return _structure(cls("cpu", enabled=enabled).scale(_OUTPUTS[name]()))
    assert outcome(lambda: script(GradScaler)) == outcome(lambda: script(TorchScaler))


@pytest.mark.parametrize("lazy", [False, True], ids=["before-scale", "after-scale"])
@pytest.mark.parametrize("values", [
    dict(scale=torch.tensor(4.0), growth_factor=2.0, backoff_factor=0.5, growth_interval=3, _growth_tracker=1),
    dict(scale=np.float32(4.0), growth_factor=np.float64(2.0), backoff_factor=0.5, growth_interval=np.int64(3),
         _growth_tracker=np.int32(1)),
    dict(scale=4, growth_factor=2, backoff_factor=0.5, growth_interval=3, _growth_tracker=1),
    dict(scale="4", growth_factor=2.0, backoff_factor=0.5, growth_interval=3, _growth_tracker=1),
    dict(scale=4.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3, _growth_tracker=1.5),
    dict(scale=INF, growth_factor=2.0, backoff_factor=0.5, growth_interval=3, _growth_tracker=True),
], ids=["tensor", "numpy", "ints", "str-scale", "float-tracker", "inf-scale"])
def test_load_state_dict_with_values_of_every_type_like_torch(values, lazy):
    def script(cls):
        s = cls("cpu")
        if lazy:
            s.scale(torch.ones(()))
        s.load_state_dict(dict(values))
        p = nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([p], lr=0.1)
        s.scale(p.sum()).backward()
        s.step(opt)
        s.update()
        return repr(s.state_dict()), s._init_scale, s._init_growth_tracker, p.tolist()
    assert outcome(lambda: script(GradScaler)) == outcome(lambda: script(TorchScaler))


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
@pytest.mark.parametrize("lazy", [False, True], ids=["before-scale", "after-scale"])
def test_copies_of_a_scaler_like_torch(how, lazy):
    import copy
    clone = {"pickle": lambda s: pickle.loads(pickle.dumps(s)), "deepcopy": copy.deepcopy, "copy": copy.copy}[how]

    def script(cls):
        s = cls("cpu", init_scale=3.0)
        if lazy:
            s.scale(torch.ones(()))
        b = clone(s)
        return sorted(b.__dict__), repr(b.state_dict()), b._scale is None, b._per_optimizer_states["x"]
    assert outcome(lambda: script(GradScaler)) == outcome(lambda: script(TorchScaler))


def test_a_parameter_that_is_not_a_tensor_is_refused_naming_the_first_one():
    # the check asks the few distinct types, but the error must still name the first bad entry
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)

    class Opt:
        param_groups = [{"params": [p, "not a tensor", 3]}]

    s = GradScaler("cpu")
    s.scale(torch.ones((), requires_grad=True))
    with pytest.raises(AssertionError, match="got str"):
        s.unscale_(Opt())
    assert torch.equal(p.grad, torch.ones(2)), "no gradient may be unscaled before the refusal"


def test_errors_come_in_torchs_order_when_a_fp16_gradient_precedes_a_non_tensor():
    # torch checks each parameter in turn: the fp16 gradient is refused before the non-tensor
    p = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
    p.grad = torch.ones(2, dtype=torch.float16)

    class Opt:
        param_groups = [{"params": [p, "not a tensor"]}]

    for cls in (torch.amp.GradScaler, GradScaler):
        s = cls("cpu")
        s.scale(torch.ones((), requires_grad=True))
        with pytest.raises(ValueError, match="FP16"):
            s.unscale_(Opt())


@pytest.mark.parametrize("setter", ["set_growth_factor", "set_backoff_factor", "set_growth_interval"])
@pytest.mark.parametrize("value", [3.0, 4, np.float32(0.25), torch.tensor(0.25), torch.tensor(3.0, requires_grad=True),
                                   torch.tensor([0.25]), "2", None, True, 1e3, torch.tensor(7)],
                         ids=lambda v: f"{type(v).__name__}:{v!r}"[:40])
def test_every_setter_then_an_update_behaves_as_torch(setter, value):
    """torch's setters store anything; its update() then refuses what _amp_update_scale_'s argument
    parser refuses (a tensor that requires grad is a TypeError). Ours does the same, in the same words."""
    def script(cls):
        torch.manual_seed(0)
        model = nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = cls("cpu", growth_interval=1)
        getattr(scaler, setter)(value)
        scaler.scale(model(torch.randn(4, 3)).sum()).backward()
        scaler.step(opt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")            # torch warns on float(requires-grad tensor) too
            scaler.update()
        return scaler.get_scale(), scaler._get_growth_tracker()
    assert outcome(lambda: script(GradScaler)) == outcome(lambda: script(TorchScaler))
