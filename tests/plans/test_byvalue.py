"""amp_edu.plans.byvalue: what leaves a learner's kernel is plain data, read without running code."""

import math

import numpy as np
import pytest
import torch

from amp_edu.plans import byvalue
from amp_edu.plans.byvalue import ByValueError, Foreign
from checkhelp import AlwaysEqual, LyingTensor  # noqa: E402  (tests/ is on sys.path)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.contiguous().view(torch.uint8).reshape(-1).equal(
        b.contiguous().view(torch.uint8).reshape(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                                   torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.uint8])
def test_tensors_keep_every_bit(dtype):
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(0, 256, (3, 5 * torch.empty((), dtype=dtype).element_size()), generator=g, dtype=torch.uint8)
    t = raw.view(dtype)                                   # every bit pattern, NaN payloads included
    back = byvalue.roundtrip(t)
    assert type(back) is torch.Tensor and bits_equal(back, t)
    assert bits_equal(byvalue.roundtrip(t.t()), t.t().contiguous())          # a non-contiguous view
    assert byvalue.roundtrip(torch.zeros(0, 3, dtype=dtype)).shape == (0, 3)
    assert byvalue.roundtrip(torch.ones((), dtype=dtype)).shape == ()


def test_plain_values_come_back_exactly():
    value = {"f": [1.5, -0.0, math.inf, -math.inf, 2.0 ** -149, 1e308], "i": 2 ** 80, "b": True, "n": None,
             "s": "é", "u": (1, "x"), "set": {3, 1}, 2: "int key", "bytes": b"\x00\xff", "dt": torch.bfloat16,
             "nested": [[(1.0,)]]}
    back = byvalue.roundtrip(value)
    assert back == value and math.copysign(1, back["f"][1]) == -1
    assert math.isnan(byvalue.roundtrip(math.nan))
    assert type(back["u"]) is tuple and type(back["set"]) is set and type(back["i"]) is int and type(back["b"]) is bool


class Meta(type):
    def __eq__(cls, other):
        return True

    __hash__ = type.__hash__


class Chameleon(metaclass=Meta):
    pass


@pytest.mark.parametrize("liar, name", [
    (AlwaysEqual(1.0), "float subclass"),
    (torch.zeros(2).as_subclass(LyingTensor), "torch.Tensor subclass"),
    (np.zeros(2), "numpy.ndarray"),
    (Chameleon(), "Chameleon"),
    (type("S", (str,), {"__eq__": lambda s, o: True})("x"), "str subclass"),
    (type("L", (list,), {})([1]), "list subclass"),
    (lambda: 1, "function"),
])
def test_objects_that_could_lie_arrive_as_named_markers(liar, name):
    back = byvalue.roundtrip({"answer": liar})["answer"]
    assert type(back) is Foreign and name in back.what
    assert back != back and back != 1.0 and not (back == liar)


def test_exact_numpy_scalars_are_numbers():
    back = byvalue.roundtrip([np.float64(1.25), np.float32(0.5), np.int64(7), np.bool_(True)])
    assert back == [1.25, 0.5, 7, True] and [type(v) for v in back] == [float, float, int, bool]


def test_deep_and_cyclic_values_do_not_hang():
    deep = []
    for _ in range(200):
        deep = [deep]
    assert "deeper" in repr(byvalue.roundtrip(deep))
    cyc = []
    cyc.append(cyc)
    byvalue.roundtrip(cyc)                                   # a marker, not a RecursionError


def frame(header: bytes, blob: bytes = b"") -> bytes:
    return byvalue.MAGIC + len(header).to_bytes(8, "little") + header + blob


@pytest.mark.parametrize("data, why", [
    (b"", "not an answer"),
    (b"garbage" * 4, "not an answer"),
    (byvalue.MAGIC + (10 ** 6).to_bytes(8, "little") + b"{}", "truncated"),
    (frame(b"[1"), "unreadable header"),
    (frame(b'["Z", 1]'), "unknown node"),
    (frame(b'["T","float32",[4],0,16]', b"\0" * 10), "do not match"),
    (frame(b'["T","float32",[4],0,12]', b"\0" * 12), "do not match"),
    (frame(b'["T","os.system",[1],0,4]', b"\0" * 4), "unknown dtype"),
    (frame(b'["T","float32",[-1],0,4]', b"\0" * 4), "malformed"),
])
def test_malformed_bytes_are_refused_by_name(data, why):
    with pytest.raises(ByValueError, match=why):
        byvalue.loads(data)


def test_pickles_are_not_read(tmp_path):
    import pickle

    path = tmp_path / "answer.bin"
    path.write_bytes(pickle.dumps({"ok": 1.0}))
    with pytest.raises(ByValueError, match="not an answer"):
        byvalue.load(path)


def test_size_limit(monkeypatch):
    monkeypatch.setattr(byvalue, "MAX_BYTES", 1000)
    with pytest.raises(ByValueError, match="MiB"):
        byvalue.loads(byvalue.dumps(torch.zeros(1000)))
