"""The scaler's fast paths (``amp_edu.scaler._fast``) give exactly what the readable kernels
(``amp_edu.scaler.kernels``, the code lesson 04 shows) give: the same bits in every gradient, the
same ``found_inf``, the same errors after the same partial work. Random gradient lists, drawn
from a seeded generator, cover every dtype, empty and 0-dim and non-contiguous tensors, inf/NaN
anywhere, finite values whose sum overflows, and refused inputs. (Both are also compared with
torch's kernels directly in ``tests/scaler/test_scaler.py``.)"""

from __future__ import annotations

import random

import pytest
import torch

from amp_edu.scaler import _fast, kernels

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
POISON = (float("inf"), float("-inf"), float("nan"))


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = torch.where(t.isnan(), torch.full_like(t, float("nan")), t)      # any NaN is the same NaN
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _tensor(rng: random.Random, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    kind = rng.choice(["small", "small", "small", "large", "empty", "scalar", "strided", "huge"])
    if kind == "small":
        t = torch.randn(rng.choice([(3,), (8, 8), (16,), (2, 3, 4)]), generator=g)
    elif kind == "large":
        t = torch.randn(rng.choice([(40000,), (200, 200)]), generator=g)
    elif kind == "empty":
        t = torch.randn(0, 3)
    elif kind == "scalar":
        t = torch.randn((), generator=g)
    elif kind == "strided":
        t = torch.randn(7, 5, generator=g).t()
    else:                                              # finite values whose sum overflows
        t = torch.full((6,), 3.0e38 if dtype in (torch.float32, torch.bfloat16) else 6.0e4)
    t = t.to(dtype)
    if t.numel() and rng.random() < 0.25:                 # a poisoned element, strided ones too
        index = [rng.randrange(n) for n in t.shape]
        t[tuple(index)] = rng.choice(POISON)
    return t


def _case(seed: int):
    rng = random.Random(seed)
    grads = [_tensor(rng, rng.choice(DTYPES)) for _ in range(rng.randrange(0, 30))]
    inv = rng.choice([2.0 ** -16, 1.0, 1.0 / 3.0, 4.0, 0.0, 2.0 ** -126])
    return grads, torch.tensor(inv)


def _run(fn, grads, inv):
    grads = [g.clone() for g in grads]
    found = torch.zeros(())
    try:
        fn(grads, found, inv)
        error = None
    except Exception as exc:  # noqa: BLE001 - compared between the two
        error = (type(exc), str(exc))
    return [_bits(g) for g in grads], found, error


@pytest.mark.parametrize("gpu_strategy", [False, True], ids=["cpu-stacked-sums", "gpu-foreach-norm"])
def test_fast_check_and_unscale_is_the_readable_one(gpu_strategy, monkeypatch):
    if gpu_strategy:
        monkeypatch.setattr(_fast, "_reads_are_free", lambda device: False)
    for seed in range(80):
        grads, inv = _case(seed)
        want = _run(kernels.non_finite_check_and_unscale_, grads, inv)
        got = _run(_fast.non_finite_check_and_unscale_, grads, inv)
        assert got[1] == want[1] and got[2] == want[2], seed
        assert all(torch.equal(a, b) for a, b in zip(got[0], want[0])), seed


def test_the_grouped_path_the_scaler_calls_is_the_readable_one():
    for seed in range(30):
        grads, inv = _case(seed)
        for dtype in DTYPES:
            same = [g for g in grads if g.dtype == dtype]
            want = _run(kernels.non_finite_check_and_unscale_, same, inv)
            got = _run(_fast.check_and_unscale_uniform_, same, inv)
            assert got[1] == want[1] and got[2] == want[2], (seed, dtype)
            assert all(torch.equal(a, b) for a, b in zip(got[0], want[0])), (seed, dtype)


@pytest.mark.parametrize("bad", ["long", "sparse", "found_inf_dtype", "inv_scale_size"])
def test_refused_inputs_fail_alike_after_the_same_partial_work(bad):
    grads = [torch.tensor([float("inf"), 1.0]), torch.randn(3)]
    found, inv = torch.zeros(()), torch.tensor(0.5)
    if bad == "long":
        grads.insert(1, torch.ones(2, dtype=torch.long))
    elif bad == "sparse":
        grads.append(torch.ones(2).to_sparse())
    elif bad == "found_inf_dtype":
        found = torch.zeros((), dtype=torch.float64)
    else:
        inv = torch.tensor([0.5, 0.5])
    results = []
    for fn in (kernels.non_finite_check_and_unscale_, _fast.non_finite_check_and_unscale_):
        gs, f = [g.clone() for g in grads], found.clone()
        with pytest.raises((RuntimeError, NotImplementedError)) as e:
            fn(gs, f, inv)
        results.append((type(e.value), str(e.value), f.item(),
                        [g.to_dense().tolist() if g.is_sparse else g.tolist() for g in gs]))
    assert results[0] == results[1]


def test_fast_update_is_the_readable_one_on_every_path():
    rng = random.Random(0)
    for _ in range(200):
        scale = rng.choice([1.0, 65536.0, 2.0 ** 127, 3.4e38, 1e-30, 0.3])
        tracker = rng.choice([0, 1, 5, 1999, 2500])
        found = rng.choice([0.0, 1.0, 2.0, float("nan")])
        gf, bf, gi = rng.choice([2.0, 1.7, 3.0]), rng.choice([0.5, 0.3, 0.123456789]), rng.choice([1, 6, 2000])
        outs = []
        for fn in (kernels.update_scale_, _fast.update_scale_, _fast._update_scale_on_device_):
            s, t = torch.tensor(scale), torch.tensor(tracker, dtype=torch.int32)
            fn(s, t, torch.tensor(found), gf, bf, gi)
            outs.append((_bits(s).item(), t.item()))
        assert outs[0] == outs[1] == outs[2], (scale, tracker, found, gf, bf, gi)
