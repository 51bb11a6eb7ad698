"""Lessons 06-07 widgets, driven headless: set a control's value, read what the widget shows."""

import pytest
import torch

from amp_edu.bench.roofline import ridge_point
from amp_edu.widgets.bench import THIS_MACHINE, device_roofs, roofline_explorer, roofline_summary
from amp_edu.widgets.memory import memory_explorer, memory_summary
from widgetcheck import redraws  # noqa: E402


def test_roofline_summary_and_devices():
    s = roofline_summary(16, 8192, 8192, "bf16", 989.0, 3350.0)
    assert s["bound"] == "memory" and s["attainable_tflops"] < 989.0
    assert s["ridge"] == pytest.approx(ridge_point(989.0, 3350.0))
    assert roofline_summary(8192, 8192, 8192, "bf16", 989.0, 3350.0)["bound"] == "compute"
    roofs = device_roofs({"results": [{"kind": "matmul", "dtype": "float32", "tflops": 0.1}],
                          "bandwidth": {"gb_per_s": 10.0}})
    assert roofs[THIS_MACHINE] == {"peaks": {"float32": 0.1}, "bandwidth_gbs": 10.0}
    assert "tf32" not in roofs["T4"]["peaks"]


def test_roofline_explorer_reacts_to_its_controls():
    w = roofline_explorer(m=16, k=8192, n=8192, dtype="bf16", device="H100 SXM")
    assert "memory-bound" in w.text.value
    redraws(w.plot, lambda: setattr(w.m, "value", 8192))
    assert "compute-bound" in w.text.value
    redraws(w.plot, lambda: setattr(w.device, "value", "T4"))                         # no bf16 on a T4: the dtype list follows the device
    assert "bf16" not in w.dtype.options and w.dtype.value in w.dtype.options
    assert w.dtype.value == "fp32" and "of 8.1 TFLOP/s" in w.text.value


def test_memory_summary_and_explorer():
    s = memory_summary([16, 32, 8], 4, "bf16", 10_000)
    f = memory_summary([16, 32, 8], 4, "fp32", 10_000)
    assert s["total"] == 4 * (16 + 32) * 2 + 32 * 8 * 2
    assert s["total_fp32"] == f["total"] == 4 * (16 + 32) * 4
    assert s["largest_batch"] == (10_000 - 32 * 8 * 2) // ((16 + 32) * 2)
    with pytest.raises(ValueError):
        memory_summary([16, 32, 8], 0, "bf16", 1e9)
    with pytest.raises(ValueError):
        memory_summary([16, 32, 8], 4, "fp64", 1e9)
    w = memory_explorer(widths=(16, 32, 8), batch=4, dtype="bf16", budget_gib=1.0)
    assert "saved at batch 4" in w.text.value
    w.batch.value = 8
    assert "saved at batch 8" in w.text.value
    w.widths.value = "16,x"
    assert "comma-separated" in w.text.value
