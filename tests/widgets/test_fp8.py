"""Lesson 10's fp8 scaling explorer, driven headless."""

import pytest

from amp_edu.widgets.fp8 import Fp8ScalingExplorer, errors_figure, scaling_errors


def test_errors_grow_with_the_outlier_only_where_it_shares_a_scale():
    small, big = scaling_errors(0), scaling_errors(6, block=32)
    assert set(big) == {"per-tensor", "row-wise", "1x32 tile", "32x32 block", "MX-32 (e8m0)"}
    assert big["per-tensor"]["error"] > 10 * small["per-tensor"]["error"]
    assert big["per-tensor"]["zeros"] > 0.5                  # most values flush to zero
    assert big["MX-32 (e8m0)"]["error"] < 2 * small["MX-32 (e8m0)"]["error"]
    assert big["per-tensor"]["error"] > big["32x32 block"]["error"] > big["1x32 tile"]["error"]


def test_e5m2_has_range_e4m3_lacks():
    e4, e5 = scaling_errors(5, fmt="fp8_e4m3"), scaling_errors(5, fmt="fp8_e5m2")
    assert e5["per-tensor"]["zeros"] < e4["per-tensor"]["zeros"]


def test_bad_input():
    with pytest.raises(ValueError, match="block must be one of"):
        scaling_errors(2, block=48)
    with pytest.raises(ValueError, match="0..12"):
        scaling_errors(20)
    with pytest.raises(ValueError, match="outlier_log10"):
        scaling_errors(-1)
    for bad in ("3", True, None):
        with pytest.raises(TypeError, match="outlier_log10"):
            scaling_errors(bad)
    with pytest.raises(ValueError, match="fmt"):
        scaling_errors(2, fmt="fp16")
    with pytest.raises(TypeError):
        errors_figure({})


def test_explorer_updates_on_controls():
    w = Fp8ScalingExplorer(outlier_log10=1)
    assert "per-tensor: error" in w.text.value and len(w.plot.outputs) == 1
    w.block.value = 128
    assert "1x128 tile" in w.text.value
    w.outlier.value = 7
    assert "Outlier 1e7" in w.text.value
    w.fmt.value = "fp8_e5m2"
    assert "fp8_e5m2" in w.text.value and len(w.plot.outputs) == 1
