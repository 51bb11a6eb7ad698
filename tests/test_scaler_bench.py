"""The scaler-overhead benchmark runs and reports both scalers (speed itself is not asserted)."""

import pytest
import torch

from amp_edu.bench import scaler_overhead


def test_quick_run_reports_both_scalers_side_by_side():
    r = scaler_overhead.run(quick=True, device="cpu", width=8, depth=50)
    assert r.n_tensors == 100 and r.device == "cpu"
    assert set(r.scaler_ops) == {"torch", "ours"}
    assert all(t.median_s > 0 and t.n >= 3 for t in r.scaler_ops.values()) and r.train_step.median_s > 0
    assert r.ratio == r.scaler_ops["ours"].median_s / r.scaler_ops["torch"].median_s
    text = scaler_overhead.describe(r)
    assert "100 parameter tensors" in text and f"{r.ratio:.2f}x" in text and "of a step" in text


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
    with pytest.raises(ValueError):
        scaler_overhead.run(quick=True, device="cpu", width=-1)
