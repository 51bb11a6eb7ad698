"""amp_edu.validate: one wording for "an int, not a bool" and "a finite number"."""

import math

import numpy as np
import pytest
import torch

from amp_edu.validate import check_bool, check_int, check_number


def test_check_int_accepts_ints_and_numpy_ints():
    assert check_int(3, "n") == 3 and type(check_int(np.int64(3), "n")) is int
    assert check_int(0, "n", min=0) == 0 and check_int(256, "n", min=1, max=256) == 256


@pytest.mark.parametrize("bad", [True, False, 2.0, "3", None, torch.tensor(3)])
def test_check_int_rejects_bools_and_non_ints(bad):
    with pytest.raises(TypeError, match=r"batch must be an int >= 1 \(a positive int\), got"):
        check_int(bad, "batch", min=1)


@pytest.mark.parametrize("v, kw, text", [(0, dict(min=1), ">= 1"), (-1, dict(min=0), ">= 0"),
                                         (300, dict(min=1, max=256), "in 1..256")])
def test_check_int_range(v, kw, text):
    with pytest.raises(ValueError, match=text):
        check_int(v, "n", **kw)


def test_check_number():
    assert check_number(2, "lr") == 2.0 and check_number(np.float32(0.5), "lr", positive=True) == 0.5
    assert check_number(math.inf, "x", finite=False) == math.inf
    for bad, err in [(True, TypeError), ("1", TypeError), (math.nan, ValueError), (math.inf, ValueError),
                     (0.0, ValueError)]:
        with pytest.raises(err, match="lr must be"):
            check_number(bad, "lr", positive=True)
    with pytest.raises(ValueError, match="in 0..1"):
        check_number(1.5, "p", min=0.0, max=1.0)


def test_check_bool():
    assert check_bool(False, "flag") is False
    for bad in (0, 1, None, "yes"):
        with pytest.raises(TypeError, match="flag must be True or False"):
            check_bool(bad, "flag")
