"""amp_edu.measure.load: the load average and other processes' share, as context for a result."""

import pytest

from amp_edu.measure.load import Load, machine_load, others_busy

QUIET = Load(0.5, 4, 4)


def test_busy_and_oversubscribed_caveats():
    busy = Load(7.9, 2, 2)
    assert busy.busy and not busy.oversubscribed
    assert "load average 7.9 on 2 cores" in busy.caveat
    over = Load(0.1, 2, 8)
    assert over.oversubscribed and "8 threads on 2 cores" in over.caveat
    assert QUIET.caveat is None
    assert Load(None, 2, 2).caveat is None          # no load average (Windows): no claim


def test_readings():
    assert isinstance(machine_load(), Load)
    assert machine_load(threads=3).threads == 3
    share = others_busy(0.01)
    assert share is None or 0.0 <= share <= 1.0


def test_bad_arguments():
    with pytest.raises(ValueError):
        machine_load(threads=0)
    for bad in (True, 2.0):
        with pytest.raises(TypeError, match="threads"):
            machine_load(threads=bad)
    with pytest.raises(ValueError, match="window_s"):
        others_busy(0)
