"""The mode's hot path (autocast/_fastpath.py) makes the general path's decisions, tensor by tensor.

For every combination of the properties the two paths read (dtype, device, requires_grad, leaf,
view, torch's cached-tensor registry, tensor subclass, nesting, the target dtype, the cache switch,
grad mode), both paths run on fresh caches and must return the same dtypes and values, hand out the
same cached copy for the same weight, and leave the same cache behind.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from amp_edu.autocast import _fastpath as fastpath
from amp_edu.autocast import autocast, policy
from amp_edu.autocast.cache import WeightCache

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64


class _Sub(torch.Tensor):
    pass


_REGISTERED: list = []


@pytest.fixture(autouse=True)
def _cached_tensor_registry():
    """torch's cached-tensor registry (CUDA graphs' pool tensors), switched on and emptied again."""
    torch._C._set_cached_tensors_enabled(True)
    try:
        yield
    finally:
        while _REGISTERED:
            torch._C._remove_cached_tensor(_REGISTERED.pop())
        torch._C._set_cached_tensors_enabled(False)


def _tensors():
    """name -> a fresh tensor of each kind the paths tell apart."""
    base = torch.randn(4, 4)
    leaf = torch.nn.Parameter(torch.randn(4, 4))
    with torch.no_grad():
        view_leaf = leaf[:2].detach().requires_grad_()     # a view, though a leaf that requires grad
    cached = torch.nn.Parameter(torch.randn(4, 4))
    torch._C._add_cached_tensor(cached)
    _REGISTERED.append(cached)
    return {
        "act f32": base.clone(),
        "act bf16": base.to(BF16),
        "act f16": base.to(F16),
        "f64": base.double(),
        "int": torch.arange(4),
        "bool": torch.ones(4, dtype=torch.bool),
        "param f32": leaf,
        "param bf16": torch.nn.Parameter(torch.randn(4, 4, dtype=BF16)),
        "grad non-leaf": leaf * 2,
        "plain leaf requires_grad": torch.randn(4, 4, requires_grad=True),
        "view leaf": view_leaf,
        "cached tensor": cached,
        "meta": torch.empty(4, 4, device="meta"),
        "scalar": 3.0,
        "none": None,
    }


def _general(cache, args, to, low, on):
    return policy.cast_arguments(args, {}, to, "cpu", cache.caster(low, to, on))[0]


def _fast(cache, args, to, low, on):
    return fastpath.cast_positional(cache, args, to, low, on)


def _summary(out):
    return [(type(a).__name__, getattr(a, "dtype", a) if not isinstance(a, torch.Tensor) or a.device.type == "meta"
             else (a.dtype, a.device.type, a.requires_grad)) for a in out]


CASES = [(to, low, on, grad) for to, low in [(BF16, BF16), (F16, F16), (F32, BF16), (F32, None)]
         for on in (True, False) for grad in (True, False) if not (low is None and on)]


@pytest.mark.parametrize("to,low,on,grad", CASES)
def test_same_casts_and_cache_on_every_kind_of_argument(to, low, on, grad):
    names = list(_tensors())
    for pair in itertools.combinations(names, 2):
        results = []
        for path in (_general, _fast):
            ts = _tensors()
            args = tuple(ts[n] for n in pair) * 2        # each argument twice: the second may hit
            cache = WeightCache()
            with torch.set_grad_enabled(grad):
                out = path(cache, args, to, low or BF16, on)
            ids = {id(a): n for n, a in ts.items() if isinstance(a, torch.Tensor)}
            stored = sorted(ids[k] for s in cache._stores.values() for k in s)
            results.append((_summary(out), stored, cache.hits,
                            [o is out[i + len(pair)] for i, o in enumerate(out[:len(pair)])],
                            [o.grad_fn is not None for o in out if isinstance(o, torch.Tensor)]))
        assert results[0] == results[1], pair


def test_values_are_the_general_paths_bit_for_bit():
    ts = _tensors()
    args = (ts["act f32"], ts["param f32"], ts["act f16"])
    a = _general(WeightCache(), args, BF16, BF16, True)
    b = _fast(WeightCache(), args, BF16, BF16, True)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and torch.equal(x.view(torch.int16), y.view(torch.int16))


@pytest.mark.parametrize("arg", [[torch.randn(2)], (torch.randn(2),), _Sub(torch.randn(2))],
                         ids=["list", "tuple", "subclass"])
def test_what_the_hot_path_does_not_handle_goes_to_the_general_path(arg):
    assert fastpath.cast_positional(WeightCache(), (torch.randn(2), arg), BF16, BF16, True) is None


def test_the_region_takes_the_hot_path_for_a_linear_layer(monkeypatch):
    calls = []
    real = fastpath.cast_positional

    def spy(*a, **k):
        out = real(*a, **k)
        calls.append(out is not None)
        return out

    monkeypatch.setattr("amp_edu.autocast._fastpath.cast_positional", spy)
    lin = torch.nn.Linear(4, 4)
    with autocast("cpu"):
        y = lin(torch.randn(2, 4))
        loss = torch.nn.functional.cross_entropy(y, torch.tensor([0, 1]))
    assert calls == [True, True], "linear and cross_entropy should both take the hot path"
    assert y.dtype == BF16 and loss.dtype == F32
    with torch.autocast("cpu"):
        y_ref = lin(torch.randn(2, 4))
    assert y_ref.dtype == y.dtype


def _step(model, x, y):
    with autocast("cpu"):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    return out, loss, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
def test_a_model_step_is_the_same_on_the_readable_path_alone(dtype, monkeypatch):
    """Forward, loss and every gradient, bit for bit, with and without the hot path (the readable
    ``_AutocastMode.general`` taking every call)."""
    def run():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                    torch.nn.Linear(16, 4))
        x, y = torch.randn(5, 8), torch.tensor([0, 1, 2, 3, 0])
        with autocast("cpu", dtype=dtype):
            out = model(x)
            again = model(x)                       # the second forward reads the weight cache
            loss = torch.nn.functional.cross_entropy(out + again, y)
        loss.backward()
        return [out, again, loss] + [p.grad for p in model.parameters()]
    fast = run()
    monkeypatch.setattr("amp_edu.autocast._fastpath.lower_or_fp32_on_cpu", lambda *a, **k: fastpath.MISS)
    readable = run()
    for a, b in zip(fast, readable):
        assert a.dtype == b.dtype and torch.equal(a, b)
