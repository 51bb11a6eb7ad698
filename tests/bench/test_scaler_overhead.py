"""The scaler-overhead benchmark's method: both scalers timed side by side on the same gradients,
the figures derived from those timings (speed itself is not asserted: that is a benchmark's job)."""

import pytest
import torch

from amp_edu.bench import scaler_overhead
from amp_edu.measure.timing import Timing


def _fixed(seconds):
    return Timing.from_times([seconds] * 4)


def test_both_scalers_are_timed_in_one_side_by_side_call_and_the_figures_follow(monkeypatch):
    calls, used = [], []

    class Spy(scaler_overhead.GradScaler):
        def update(self, *a, **k):
            used.append("ours")
            return super().update(*a, **k)

    def fake_compare(fns, **kw):
        calls.append(sorted(fns))
        for fn in fns.values():
            fn()                                   # the ops really run: each scaler steps once
        return {"torch": _fixed(1e-3), "ours": _fixed(1.5e-3)}

    monkeypatch.setattr(scaler_overhead, "GradScaler", Spy)
    monkeypatch.setattr(scaler_overhead, "compare", fake_compare)
    monkeypatch.setattr(scaler_overhead, "measure", lambda fn, **kw: (fn(), _fixed(10e-3))[1])
    r = scaler_overhead.run(quick=True, device="cpu", width=8, depth=50)
    assert calls == [["ours", "torch"]] and used == ["ours"]          # one interleaved call, ours once
    assert r.n_tensors == 100 and r.n_elements == 50 * (8 * 8 + 8)
    assert r.ratio == pytest.approx(1.5) and r.extra_share == pytest.approx(0.05)
    text = scaler_overhead.describe(r)
    assert "100 parameter tensors" in text and "1.50x" in text and "+5.0% of a step" in text
    assert "slower" in text                                           # 50% beyond a zero spread


def test_a_difference_inside_the_spread_is_called_noise():
    overlapping = {"torch": Timing.from_times([1.00e-3, 1.02e-3, 1.04e-3, 1.06e-3]),
                   "ours": Timing.from_times([1.01e-3, 1.03e-3, 1.05e-3, 1.07e-3])}
    r = scaler_overhead.Result("cpu", 100, 1000, overlapping, _fixed(10e-3), None)
    assert "within noise" in scaler_overhead.describe(r)


def test_a_busy_machine_gets_no_verdict_and_no_share_of_a_step():
    stalled = {"torch": Timing.from_times([0.8e-3, 1.0e-3, 1.2e-3, 1.4e-3]),       # repeats spread 45%
               "ours": Timing.from_times([1.5e-3, 1.5e-3, 1.5e-3, 1.5e-3])}
    r = scaler_overhead.Result("cpu", 100, 1000, stalled, _fixed(10e-3), 0.9)
    text = scaler_overhead.describe(r)
    assert "no verdict" in text and "the repeats of torch's spread by" in text
    assert "slower" not in text and "% of a step" not in text and "90%" in text


def test_the_timed_scaler_ops_leave_gradients_unchanged():
    model = scaler_overhead.tall_mlp(4, 3)
    model(torch.randn(2, 4)).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    ops = scaler_overhead._scaler_ops(scaler_overhead.GradScaler("cpu", init_scale=1.0),
                                      scaler_overhead._NoStep(list(model.parameters())), torch.ones(()))
    for _ in range(3):
        ops()
    assert all(torch.equal(a, p.grad) for a, p in zip(before, model.parameters()))


def test_bad_input():
    with pytest.raises(ValueError):
        scaler_overhead.run(device="meta")
    with pytest.raises(ValueError, match="width"):
        scaler_overhead.run(quick=True, device="cpu", width=-1)
    with pytest.raises(ValueError, match="depth"):
        scaler_overhead.run(quick=True, device="cpu", depth=-2)
    for kw in (dict(width=True), dict(width=16.0), dict(depth="4")):
        with pytest.raises(TypeError, match=next(iter(kw))):
            scaler_overhead.run(quick=True, device="cpu", **kw)
