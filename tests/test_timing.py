import time

import pytest

from amp_edu.bench.timing import Timing, compare, measure


def test_measure_agrees_with_a_sleep():
    t = measure(lambda: time.sleep(0.002), repeats=5, min_time_s=0.05, warmup=1)
    assert 0.0018 < t.median_s < 0.02
    assert t.iqr_s >= 0 and t.n >= 5


def test_compare_orders_two_workloads():
    res = compare({"short": lambda: time.sleep(0.001), "long": lambda: time.sleep(0.004)},
                  rounds=2, repeats=3, min_time_s=0.02, warmup=1)
    assert res["long"].median_s > 2 * res["short"].median_s


def test_timing_stats():
    t = Timing.from_times([1.0, 2.0, 3.0, 4.0, 100.0])
    assert t.median_s == 3.0 and t.iqr_s > 0
    with pytest.raises(ValueError):
        Timing.from_times([])


def test_bad_input():
    with pytest.raises(TypeError, match="callable"):
        measure(42)
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        measure(lambda: None, device="meta")
    with pytest.raises(ValueError):
        measure(lambda: None, repeats=0)
    with pytest.raises(ValueError):
        compare({})
