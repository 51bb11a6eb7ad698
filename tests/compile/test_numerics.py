"""amp_edu.compile.numerics: ulps counted as steps between neighbouring floats (torch.nextafter),
in every dtype it takes, and the report's histogram and sentence."""

import math

import pytest
import torch

from amp_edu.compile.numerics import UlpReport, compare_bits, ulp_distance


def _step(t, k, towards):
    """``t`` moved ``k`` representable numbers towards ``towards``, one torch.nextafter at a time."""
    for _ in range(k):
        t = torch.nextafter(t, torch.full_like(t, towards))
    return t


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_k_nextafter_steps_are_k_ulps_across_binades_and_zero(dtype):
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(200, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-30, 30, (200,), generator=g)
         ).to(dtype)
    a[:4] = torch.tensor([1.0, 2.0, -0.0, 4.0 * torch.finfo(dtype).tiny], dtype=dtype)   # binade edges, zero
    for k in (1, 2, 7):
        assert torch.equal(ulp_distance(a, _step(a, k, math.inf)), torch.full((200,), k))
        assert torch.equal(ulp_distance(_step(a, k, -math.inf), a), torch.full((200,), k))
    tiny = torch.tensor([torch.finfo(dtype).tiny], dtype=dtype)
    assert ulp_distance(tiny, _step(tiny, 3, -math.inf)).item() == 3     # down into the subnormals
    smallest = _step(torch.zeros(1, dtype=dtype), 1, math.inf)
    assert ulp_distance(smallest * 3, -smallest * 2).item() == 5         # across zero


def test_the_report_counts_each_distance():
    a = torch.zeros(10, dtype=torch.bfloat16) + 1
    b = a.clone()
    for i, k in enumerate((1, 2, 3, 4, 5, 5)):
        b[i] = (b[i].view(torch.int16) + k).view(torch.bfloat16)
    r = compare_bits(a, b)
    assert isinstance(r, UlpReport)
    assert (r.n, r.differ, r.max_ulps, r.worst_index) == (10, 6, 5, (4,))
    assert r.histogram == {0: 4, 1: 1, 2: 1, 3: 1, 4: 1, 5: 2} and r.fraction == 0.6
    s = r.sentence("logits")
    assert s.startswith("6 of 10 logits (60.0%) differ, by at most 5 ulp (at index (4,))")
    assert "1 ulp: 1, 2 ulp: 1, 3 ulp: 1, 4 ulp: 1, … (1 more distances)" in s
    assert compare_bits(torch.ones(()), torch.ones(())).worst_index == ()
