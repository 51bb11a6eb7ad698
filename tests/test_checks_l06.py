"""Lesson 06 graders: the reference passes; plausible wrong answers fail with a useful message."""

import pytest

from amp_edu.checks import l06
from amp_edu.checks.core import CheckFailed


def ai(m, k, n, dtype):
    return 2 * m * k * n / ((m * k + k * n + m * n) * dtype.itemsize)


def bound(m, k, n, dtype, peak_tflops, bandwidth_gbs):
    return "memory" if ai(m, k, n, dtype) < peak_tflops * 1e12 / (bandwidth_gbs * 1e9) else "compute"


def test_reference_passes(capsys):
    l06.check_arithmetic_intensity(ai)
    l06.check_predict_bound(bound)
    out = capsys.readouterr().out
    assert "PASS arithmetic_intensity" in out and "PASS predict_bound" in out


@pytest.mark.parametrize("wrong, hint", [
    (lambda m, k, n, dt: m * k * n / ((m * k + k * n + m * n) * dt.itemsize), "2·m·k·n"),
    (lambda m, k, n, dt: 2 * m * k * n / ((m * k + k * n) * dt.itemsize), "writes C"),
    (lambda m, k, n, dt: 2 * m * k * n / ((m * k + k * n + m * n) * 4), "bytes per element"),
    (lambda m, k, n, dt: 2 * m * k * n / ((m * k + k * n + m * n) * 2), "bytes per element"),
    (lambda m, k, n, dt: 2 * m * k * n / ((m * k + k * n + m * n) * dt.itemsize * 8), "bits"),
    (lambda m, k, n, dt: 2 * m * k * n / (3 * m * k * dt.itemsize), "intensity = FLOPs / bytes"),  # square-only formula
])
def test_wrong_intensity_fails_with_hint(wrong, hint):
    with pytest.raises(CheckFailed) as e:
        l06.check_arithmetic_intensity(wrong)
    msg = str(e.value)
    assert "FAIL arithmetic_intensity" in msg and "input:" in msg and "expected:" in msg and "got:" in msg
    assert hint in msg


@pytest.mark.parametrize("wrong", [
    lambda m, k, n, dt, p, b: "memory" if m * k * n / ((m * k + k * n + m * n) * dt.itemsize) < p * 1e12 / (b * 1e9) else "compute",
    lambda m, k, n, dt, p, b: "memory" if 2 * m * k * n / ((m * k + k * n) * dt.itemsize) < p * 1e12 / (b * 1e9) else "compute",
    lambda m, k, n, dt, p, b: "memory" if ai(m, k, n, dt) < p / b else "compute",              # TFLOP/s against GB/s
    lambda m, k, n, dt, p, b: "memory" if ai(m, k, n, dt) > p * 1e12 / (b * 1e9) else "compute",  # inverted
    lambda m, k, n, dt, p, b: "memory" if 2 * m * k * n / ((m * k + k * n + m * n) * 2) < p * 1e12 / (b * 1e9) else "compute",
    lambda m, k, n, dt, p, b: "memory-bound" if bound(m, k, n, dt, p, b) == "memory" else "compute-bound",
])
def test_wrong_bound_fails(wrong):
    with pytest.raises(CheckFailed) as e:
        l06.check_predict_bound(wrong)
    msg = str(e.value)
    assert "FAIL predict_bound" in msg and "input:" in msg and "hint:" in msg


@pytest.mark.parametrize("wrong, hint", [
    (lambda m, k, n, dt, p, b: "memory" if ai(m, k, n, dt) <= p * 1e12 / (b * 1e9) else "compute", "use <, not <="),
    (lambda m, k, n, dt, p, b: "memory" if ai(m, k, n, dt) < p * 1e12 // (b * 1e9) else "compute", "not //"),
    (lambda m, k, n, dt, p, b: "memory" if ai(m, k, n, dt) < p * (1e12 - 1) / (b * 1e9) else "compute",
     "exact powers of ten"),
])
def test_bound_wrong_at_the_ridge_itself_fails(wrong, hint):
    with pytest.raises(CheckFailed, match=hint) as e:
        l06.check_predict_bound(wrong)
    assert "300, 300, 300" in str(e.value)
