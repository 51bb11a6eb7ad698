"""The overhead benchmark runs and reports (its numbers are measured, never asserted)."""

import pytest
import torch

from amp_edu.bench import autocast_overhead as bench


def test_run_reports_both_models_and_a_prediction():
    results = bench.run(width=16, batch=4, quick=True, device="cpu")
    assert [r.model for r in results] == ["matmul-bound", "overhead-bound"]
    assert all(r.torch_s > 0 and r.ours_s > 0 and r.ratio == r.ours_s / r.torch_s for r in results)
    text = bench.table(results)
    assert "matmul-bound" in text and "predicted" in text
    assert bench.predicted_ratio(results) >= 1.0


def test_mlp_shape_and_bad_sizes():
    assert bench.mlp(8)(torch.randn(3, 8)).shape == (3, 10)
    with pytest.raises(ValueError, match="positive"):
        bench.run(width=0)
