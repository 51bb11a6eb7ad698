"""Graders for exercise 12 (the two ways bf16 weights keep updates smaller than half an ulp).

* :func:`check_stochastic_round` grades ``stochastic_round(x, generator) -> bf16``: draw 16 random
  bits per element, ``torch.randint(0, 1 << 16, x.shape, generator=generator, dtype=torch.int32)``,
  and round ``x`` (float32) away from zero when they are below its lower 16 bits, else toward zero.
* :func:`check_kahan` grades ``init_compensation(params) -> list`` (one zero buffer per weight, in
  the weight's dtype) and ``kahan_update_(p, comp, update)`` (``p += update`` in bf16 with the
  compensation fed back and refreshed, both in place).

The expected answers are :func:`amp_edu.optim.stochastic_round` (bit-identical to torchao's
``_fp32_to_bf16_sr`` on the same stream, ``tests/test_optim.py``) and
:func:`amp_edu.optim.kahan_add_`. Each wrong answer a learner is likely to write fails with its
own hint: rounding to nearest, truncating, biased random bits (too few, ``<=``, a shifted range),
another random stream; a compensation that is never fed back, one never refreshed, and a
compensation kept in fp32 for some parameters only.
"""

from __future__ import annotations

import math

import torch

from ..device import num_threads
from ..optim import kahan_add_, stochastic_round as _reference_sr
from .core import call_learner, fail, passed, require_callable, same_bits

__all__ = ["check_stochastic_round", "check_kahan"]

ULP1 = 2.0 ** -7          # bf16's spacing in [1, 2)


def _sr(fn, x, seed, name="stochastic_round"):
    g = torch.Generator().manual_seed(seed)
    return call_learner(name, fn, (x, g), input=x, expected="a bfloat16 tensor of x's shape")


def _check_type(name, x, got):
    if not isinstance(got, torch.Tensor) or got.dtype != torch.bfloat16 or got.shape != x.shape:
        what = f"{got.dtype} tensor of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else type(got).__name__
        raise fail(name, input=x, expected=f"a torch.bfloat16 tensor of shape {tuple(x.shape)}", got=what,
                   hint="return the rounded value as bf16: build the fp32 bit pattern, then .view(torch.float32)"
                        ".bfloat16() (exact, since its lower 16 bits are 0)")


def check_stochastic_round(fn) -> str:
    with num_threads(1):           # elementwise work on a few million values: one thread, no pool to spin
        return _check_stochastic_round(fn)


def _check_stochastic_round(fn) -> str:
    name = "stochastic_round"
    require_callable(name, fn)
    # 1. exact bf16 values (and signed zeros) never move
    exact = torch.tensor([1.0, -1.5, 0.0, -0.0, 2.0 ** -100, 3.0e38, -7.25]).bfloat16().float().repeat(20000)
    got = _sr(fn, exact, 0)
    _check_type(name, exact, got)
    if not same_bits(got, exact.bfloat16()):
        bad = int((got.float() != exact).sum())
        raise fail(name, input="values that bf16 holds exactly (1.0, -1.5, 0.0, ...), 20000 draws each",
                   expected="the same values, every draw", got=f"{bad} of {exact.numel()} draws moved",
                   hint="a value whose lower 16 bits are 0 must never round up: round away from zero only when "
                        "rand < (bits & 0xFFFF), strictly less (with <=, rand = 0 moves it once in 65536 draws)")
    # 2. values 1/8, 1/2, 3/4 of an ulp past ±1, many draws, two generators
    n = 200_000
    cases = [(base, frac, torch.full((n,), base * (1.0 + frac * ULP1)))
             for base, frac in ((1.0, 0.125), (-1.0, 0.125), (1.0, 0.5), (1.0, 0.75))]
    draws = [(_sr(fn, x, 1), _sr(fn, x, 2)) for _, _, x in cases]
    for (_, _, x), (a, _) in zip(cases, draws):
        _check_type(name, x, a)
    shown = "200000 copies each of 1 + 1/8 ulp, -(1 + 1/8 ulp), 1 + 1/2 ulp, 1 + 3/4 ulp (ulp = 2**-7)"
    if all(same_bits(a, b) for a, b in draws):
        nearest = all(same_bits(a, x.bfloat16()) for (_, _, x), (a, _) in zip(cases, draws))
        trunc = all(same_bits(a, (x.view(torch.int32) & -65536).view(torch.float32).bfloat16())
                    for (_, _, x), (a, _) in zip(cases, draws))
        got = ", ".join(f"{float(a[0])!r}" for a, _ in draws)
        if nearest:
            hint = ("that is rounding to nearest (x.bfloat16()): an update below half an ulp is lost every time. "
                    "Round away from zero with probability (lower 16 bits) / 2**16, using the random bits from "
                    "the generator")
        elif trunc:
            hint = ("that is truncation (bits & 0xFFFF0000 only): always toward zero, so biased. Add one bf16 "
                    "ulp (0x10000 on the int32 bits) when rand < (bits & 0xFFFF)")
        else:
            hint = ("the result does not depend on the generator: draw the random bits from it, "
                    "torch.randint(0, 1 << 16, x.shape, generator=generator, dtype=torch.int32)")
        raise fail(name, input=shown, expected="a mix of the two bf16 neighbours, different for each generator",
                   got=f"every copy rounded the same way, whatever the generator: {got}", hint=hint)
    for (base, frac, x), (a, _) in zip(cases, draws):
        up = (a.float().abs() > 1.0).double().mean().item()
        se = math.sqrt(frac * (1 - frac) / n)
        if abs(up - frac) > 6 * se:
            raise fail(name, input=f"{n} copies of {float(x[0])!r} ({frac} ulp past {base})",
                       expected=f"{frac:.4f} of them rounded away from zero (± {6 * se:.4f})", got=f"{up:.4f}",
                       hint="the random bits are biased: draw 16 of them, uniform in [0, 2**16) "
                            "(torch.randint(0, 1 << 16, ...)), and compare with the lower 16 bits of x (x.view("
                            "torch.int32) & 0xFFFF); fewer bits, a shifted range or a float threshold round up "
                            "with the wrong probability, so the rounding is no longer unbiased")
    # 3. bit for bit on the shared stream
    g = torch.Generator().manual_seed(3)
    m = 1 << 20               # an off-by-one in the draw changes about one element in 65536: look at a million
    x = torch.randn(m, generator=g) * torch.logspace(-20, 20, m)
    for seed in (4, 5):
        got = _sr(fn, x, seed)
        want = _reference_sr(x, generator=torch.Generator().manual_seed(seed))
        if not same_bits(got, want):
            raise fail(name, input=f"{m} random float32 values (generator seed {seed})", expected=want, got=got,
                       hint="unbiased, but not the course's (and torchao's) random stream: draw exactly "
                            "torch.randint(0, 1 << 16, x.shape, generator=generator, dtype=torch.int32), once, "
                            "and round away from zero where it is < (x.view(torch.int32) & 0xFFFF)")
    # 4. the top of the range: rounding up the largest float32 carries into the exponent (inf), never a NaN
    top = torch.tensor([3.4028234663852886e38, -3.4028234663852886e38]).repeat(512)
    got = _sr(fn, top, 6)
    _check_type(name, top, got)
    if bool(got.isnan().any()):
        raise fail(name, input="±3.4028235e38 (float32's largest), 512 draws each",
                   expected="bf16's largest (±3.3895e38) or ±inf, never NaN", got=f"{int(got.isnan().sum())} NaN",
                   hint="clear all 16 low bits before rounding up (bits & -65536, i.e. 0xFFFF0000) and add exactly "
                        "0x10000: a leftover low bit on 0x7F7F0000 + 0x10000 makes 0x7F800001, a NaN, not inf")
    return passed(name, "exact values kept, unbiased at 1/8, 1/2, 3/4 ulp (both signs), bit-identical on the "
                        "stream, no NaN at the top of the range")


# --- Kahan ------------------------------------------------------------------------------------------
def _params():
    g = torch.Generator().manual_seed(7)
    return [torch.randn(48, 32, generator=g).bfloat16(), torch.randn(32, generator=g).bfloat16(),
            (torch.randn(16, 8, generator=g) * 0.01).bfloat16(),
            # tiny weights (1e-6): below fp16's normal range, where a detour through fp16 is not exact
            (torch.randn(64, generator=g) * 1e-6).bfloat16()]


def _rounded_twice():
    """(p, comp, update) where float32 and float64 sums round to different bf16 weights: with p = 1,
    comp = 2^-8 and update = 2^-24 + 2^-40, y = comp + update is 2^-8 + 2^-24 in float32, so
    p + y is the bf16 tie 1 + 2^-8 (rounded to even: 1.0); exactly, p + y lies above the tie and
    rounds up to 1 + 2^-7. The recipe forms its sums in float32."""
    u = torch.tensor([2.0 ** -24 + 2.0 ** -40, -(2.0 ** -24 + 2.0 ** -40)])
    return (torch.tensor([1.0, -1.0]).bfloat16(), torch.tensor([2.0 ** -8, -2.0 ** -8]).bfloat16(), u)


def _updates(params, steps, seed=8):
    g = torch.Generator().manual_seed(seed)
    return [[p.float().abs() * 2.0 ** -11 * (1 + torch.rand(p.shape, generator=g)) * torch.sign(
        torch.randn(p.shape, generator=g) + 0.3) for p in params] for _ in range(steps)]


def _fmt(t: torch.Tensor) -> str:
    v = t.flatten()[:4].float().tolist()
    return "[" + ", ".join(f"{x:.6g}" for x in v) + ", ...]"


def _kahan_hint(p0, c0, u, p, c) -> str:
    """Which plausible wrong update, applied to (p0, c0), gives the learner's (p, c)?"""
    nearest = (p0.float() + u).bfloat16()
    if same_bits(p, nearest) and same_bits(c, c0):
        return ("the weight is rounded to nearest and the caller's compensation is left as it was (never "
                "written, or `comp = ...` inside the function, which only rebinds a local name): write what the "
                "rounding lost back into comp in place (comp.copy_(y - (new_p.float() - p.float()))), and add "
                "comp to the next update")
    if same_bits(p, nearest) and same_bits(c, (u - (nearest.float() - p0.float())).bfloat16()):
        return ("the compensation is computed but never fed back: the weights move exactly as with plain "
                "round-to-nearest. Add it to the update first (y = comp.float() + update), round p + y to bf16, "
                "then keep what that rounding lost: comp = y - (new_p - p)")
    if same_bits(c, c0):
        return ("comp did not change: update it in place (comp.copy_(...)); `comp = ...` inside the function "
                "only rebinds the local name, so the caller's buffer never learns what was lost")
    return ("form y = comp.float() + update and the sum p.float() + y in fp32, round it once to bf16 (new_p), "
            "then comp = y - (new_p.float() - p.float()) rounded to bf16; update p and comp in place")


def check_kahan(init_compensation, kahan_update_) -> str:
    with num_threads(1):
        return _check_kahan(init_compensation, kahan_update_)


def _check_kahan(init_compensation, kahan_update_) -> str:
    name = "kahan"
    require_callable("init_compensation", init_compensation)
    require_callable("kahan_update_", kahan_update_)
    params = _params()
    comps = call_learner("init_compensation", init_compensation, ([p.clone() for p in params],),
                         input=f"{len(params)} bf16 weights (48×32, 32, 16×8, 64)",
                         expected=f"a list of {len(params)} zero buffers")
    if not isinstance(comps, (list, tuple)) or len(comps) != len(params):
        raise fail("init_compensation", input=f"{len(params)} bf16 weights", expected=f"a list of {len(params)} tensors",
                   got=comps, hint="return one compensation buffer per parameter, in order")
    for i, (p, c) in enumerate(zip(params, comps)):
        if not isinstance(c, torch.Tensor) or c.shape != p.shape:
            raise fail("init_compensation", input=f"weight {i}: shape {tuple(p.shape)}",
                       expected=f"a tensor of shape {tuple(p.shape)}", got=c, hint="torch.zeros_like(p)")
        if c.dtype != p.dtype:
            odd = [j for j, cc in enumerate(comps) if isinstance(cc, torch.Tensor) and cc.dtype != params[j].dtype]
            raise fail("init_compensation", input=f"weight {i}: {p.dtype}, shape {tuple(p.shape)}",
                       expected=f"a {p.dtype} buffer for every weight", got=f"{c.dtype} for weights {odd}",
                       hint="the compensation is kept in the weight's own dtype (bf16) for every parameter: "
                            "torch.zeros_like(p). An fp32 buffer for some of them costs 4 bytes where Kahan's "
                            "recipe pays 2, and their rounding then differs from the recipe's")
        if bool((c != 0).any()):
            raise fail("init_compensation", input=f"weight {i}", expected="zeros", got=c,
                       hint="nothing has been lost yet: the buffers start at 0")
    # run the learner's update and the reference side by side, bit for bit after every step; on the
    # first difference, tell which wrong update the learner's one step matches (from the same state)
    steps = 60
    mine = [p.clone() for p in params]
    my_c = [c.clone() for c in comps]
    near = [p.clone() for p in params]
    for k, ups in enumerate(_updates(params, steps)):
        for i, u in enumerate(ups):
            p0, c0 = mine[i].clone(), my_c[i].clone()
            call_learner("kahan_update_", kahan_update_, (mine[i], my_c[i], u.clone()),
                         input=f"step {k + 1}, weight {i}", expected="p and comp updated in place")
            near[i] = (near[i].float() + u).bfloat16()
            if mine[i].dtype != torch.bfloat16 or my_c[i].dtype != torch.bfloat16:
                raise fail("kahan_update_", input=f"step {k + 1}, weight {i}", expected="p and comp still bf16",
                           got=f"p {mine[i].dtype}, comp {my_c[i].dtype}",
                           hint="update in place with p.copy_(...) and comp.copy_(...): both stay bf16")
            want_p, want_c = p0.clone(), c0.clone()
            kahan_add_(want_p, want_c, u)
            if same_bits(mine[i], want_p) and same_bits(my_c[i], want_c):
                continue
            raise fail("kahan_update_", input=f"step {k + 1}, weight {i} (updates below half an ulp)",
                       expected=f"p {_fmt(want_p)}, comp {_fmt(want_c)}",
                       got=f"p {_fmt(mine[i])}, comp {_fmt(my_c[i])}", hint=_kahan_hint(p0, c0, u, mine[i], my_c[i]))
    p0, c0, u = _rounded_twice()
    mine_p, mine_c = p0.clone(), c0.clone()
    shown = "p = [1, -1] (bf16), comp = [2^-8, -2^-8] (bf16), update = ±(2^-24 + 2^-40) (fp32)"
    call_learner("kahan_update_", kahan_update_, (mine_p, mine_c, u.clone()), input=shown,
                 expected="p and comp updated in place")
    want_p, want_c = p0.clone(), c0.clone()
    kahan_add_(want_p, want_c, u)
    if not (same_bits(mine_p, want_p) and same_bits(mine_c, want_c)):
        raise fail("kahan_update_", input=shown,
                   expected=f"p {_fmt(want_p)}, comp {_fmt(want_c)}", got=f"p {_fmt(mine_p)}, comp {_fmt(mine_c)}",
                   hint="form the sums in float32 (p.float(), comp.float(), as the update is): comp + update is "
                        "2^-8 + 2^-24 in float32 and p + y the bf16 tie 1 + 2^-8 (rounded to even: 1.0), while "
                        "float64 sums lie above the tie and round up. Kahan's recipe rounds through float32")
    kept = sum(float((m.double() - p.double()).abs().sum()) for m, p in zip(mine, params))
    return passed(name, f"{len(params)} bf16 weights, {steps} updates below half an ulp, bit-identical "
                        f"(round-to-nearest would have moved {sum(int((n != p).sum()) for n, p in zip(near, params))} "
                        f"weights; Kahan moved them by {kept:.3g} in all)")
