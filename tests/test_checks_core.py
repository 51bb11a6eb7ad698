"""checks.core.call_learner: the one way every grader calls the learner's code."""

import pytest
import torch

from amp_edu.checks.core import NOT_DONE_HINT, CheckFailed, call_learner


def _not_done(*a, **k):
    raise NotImplementedError()


def test_returns_the_answer_and_passes_kwargs():
    assert call_learner("f", lambda x, *, k: x + k, (1,), {"k": 2}) == 3


def test_not_done_yet():
    with pytest.raises(CheckFailed) as e:
        call_learner("f", _not_done, (1,), input="x=1", expected=2)
    msg = str(e.value)
    assert "got:      'NotImplementedError'" in msg and NOT_DONE_HINT in msg and "x=1" in msg


def test_not_done_is_never_returned_even_when_runtime_errors_are():
    with pytest.raises(CheckFailed, match="not done yet"):
        call_learner("f", _not_done, returns=(RuntimeError,))
    exc = call_learner("f", lambda: (_ for _ in ()).throw(RuntimeError("banned")), returns=(RuntimeError,))
    assert isinstance(exc, RuntimeError)


def test_crash_names_the_exception_and_hint():
    def boom():
        raise KeyError("w")
    with pytest.raises(CheckFailed) as e:
        call_learner("f", boom, hint=lambda exc: f"saw {type(exc).__name__}")
    assert "KeyError: 'w'" in str(e.value) and "saw KeyError" in str(e.value)
    with pytest.raises(CheckFailed, match="your function raised on this input"):
        call_learner("f", boom)


def test_same_bits_tells_signed_zeros_and_last_bits_apart_but_not_nan_payloads():
    from amp_edu.checks.core import same, same_bits
    z, nz = torch.tensor([0.0]), torch.tensor([-0.0])
    assert same(z, nz) and not same_bits(z, nz)
    one = torch.tensor([1.0])
    assert not same_bits(one, torch.nextafter(one, torch.tensor([2.0])))
    other_nan = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert same_bits(torch.tensor([float("nan")]), other_nan)
    assert not same_bits(one.double(), one) and not same_bits([1.0], one)
