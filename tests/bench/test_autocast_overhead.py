"""The overhead benchmark: its prediction model, its verdicts, and that it measures what it says
(a known extra cost injected into the region shows up in the ratio, on the right side)."""

import time

import pytest
import torch

from amp_edu.bench import autocast_overhead as bench


def _r(model, torch_s, ours_s, *, device="cpu", host=None, iqr=0.0):
    return bench.Result(model, 8, 8, torch_s, ours_s, iqr, iqr, torch_s, ours_s, device,
                        torch_s if host is None else host)


def test_predicted_ratio_cpu_adds_the_extra_python():
    # 0.1 ms extra per step on a 10 ms step -> 1.01
    res = [_r("matmul-bound", 10e-3, 10.4e-3), _r("overhead-bound", 1.0e-3, 1.1e-3)]
    assert bench.predicted_ratio(res) == pytest.approx(1.01)
    # ours faster on the small model: no negative overhead is predicted
    res[1] = _r("overhead-bound", 1.0e-3, 0.9e-3)
    assert bench.predicted_ratio(res) == 1.0


def test_predicted_ratio_gpu_hides_the_extra_python_behind_the_kernels():
    # GPU-bound step: 10 ms of kernels, issued in 2 ms; 1 ms of extra Python is hidden
    gpu = [_r("matmul-bound", 10e-3, 10e-3, device="cuda", host=2e-3), _r("overhead-bound", 1e-3, 2e-3, device="cuda")]
    assert bench.predicted_ratio(gpu) == 1.0
    # ... until the host becomes the bottleneck: 2 + 9 ms of host time for 10 ms of kernels
    gpu[1] = _r("overhead-bound", 1e-3, 10e-3, device="cuda")
    assert bench.predicted_ratio(gpu) == pytest.approx(1.1)
    # the same numbers on a CPU add up
    cpu = [_r("matmul-bound", 10e-3, 10e-3), _r("overhead-bound", 1e-3, 10e-3)]
    assert bench.predicted_ratio(cpu) == pytest.approx(1.9)


def test_predicted_ratio_needs_both_models():
    with pytest.raises(ValueError, match="one result for each"):
        bench.predicted_ratio([_r("overhead-bound", 1e-3, 1e-3)])


def test_verdict_is_noise_aware_and_refuses_on_a_busy_machine():
    assert _r("m", 1.0e-3, 1.05e-3, iqr=0.1e-3).verdict.word == "within noise"
    assert _r("m", 1.0e-3, 1.5e-3, iqr=0.1e-3).verdict.word == "slower"      # ours took longer
    assert _r("m", 1.5e-3, 1.0e-3, iqr=0.1e-3).verdict.word == "faster"
    busy = _r("m", 1.0e-3, 1.5e-3, iqr=0.5e-3)                                 # torch's repeats spread 50%
    assert busy.verdict.word == "no verdict"
    text = bench.table([busy])
    assert "no verdict" in text and "m: amp_edu.autocast against torch.autocast: no verdict" in text
    assert "slower" not in text


class _Slow:
    """torch.autocast plus a fixed busy wait: a region whose extra cost is known."""

    def __init__(self, device_type, dtype=None, wait_s=3e-3):
        self.region = torch.autocast(device_type, dtype=dtype)
        self.wait_s = wait_s

    def __enter__(self):
        end = time.perf_counter() + self.wait_s
        while time.perf_counter() < end:
            pass
        return self.region.__enter__()

    def __exit__(self, *exc):
        return self.region.__exit__(*exc)


def test_the_benchmark_sees_a_known_extra_cost_on_the_right_side():
    (r,) = bench.run(quick=True, device="cpu", models=("overhead-bound",), ours=_Slow)
    assert r.model == "overhead-bound" and r.device == "cpu"
    # 3 ms of busy wait on a step under 1 ms (fastest repeats: noise only ever adds time, and a
    # busy wait cannot run faster than its clock), so at least 2x; a benchmark that swapped the two
    # regions, or timed the wrong one, reads below 1
    assert r.best_ratio > 2.0, bench.table([r])
    text = bench.table([r])
    assert "overhead-bound" in text and "predicted" not in text


def test_run_reports_both_models_and_a_prediction():
    results = bench.run(width=16, batch=4, quick=True, device="cpu")
    assert [r.model for r in results] == ["matmul-bound", "overhead-bound"]
    assert [r.width for r in results] == [16, 32]
    text = bench.table(results)
    assert "predicted matmul-bound ratio" in text and "CPU: adds to the step" in text


def test_mlp_shape_and_bad_arguments():
    assert bench.mlp(8)(torch.randn(3, 8)).shape == (3, 10)
    with pytest.raises(ValueError, match="positive"):
        bench.run(width=0)
    with pytest.raises(ValueError, match="batch"):
        bench.run(batch=-1)
    for kw in (dict(width=True), dict(width=64.0), dict(batch="8"), dict(batch=None)):
        with pytest.raises(TypeError, match=next(iter(kw))):
            bench.run(**kw)
    with pytest.raises(ValueError, match="models"):
        bench.run(models=("tiny",))
