"""Graders for exercise 12 (the two ways bf16 weights keep updates smaller than half an ulp).

* :data:`check_stochastic_round` grades ``stochastic_round(x, generator) -> bf16``: draw 16 random
  bits per element, ``torch.randint(0, 1 << 16, x.shape, generator=generator, dtype=torch.int32)``,
  and round ``x`` (float32) away from zero when they are below its lower 16 bits, else toward zero.
  It only reads ``x``: a changed ``x`` fails.
* :data:`check_kahan` grades ``init_compensation(params) -> list`` (one zero buffer per weight, in
  the weight's dtype) and ``kahan_update_(p, comp, update)`` (``p += update`` in bf16 with the
  compensation fed back and refreshed, both in place; ``update`` is only read).

The expected answers are :func:`amp_edu.optim.stochastic_round` (bit-identical to torchao's
``_fp32_to_bf16_sr`` on the same stream, ``tests/test_optim.py``) and
:func:`amp_edu.optim.kahan_add_`. Each wrong answer a learner is likely to write fails with its
own hint: rounding to nearest, truncating, biased random bits (too few, ``<=``, a shifted range),
another random stream; a compensation that is never fed back, one never refreshed, and a
compensation kept in fp32 for some parameters only.

The learner's functions run in the kernel (:mod:`amp_edu.plans.l12`), which hands back what they
returned and their arguments after each call; the generators' seeds, the random inputs and the
weights and updates are drawn from the check's seed, and the references are computed here.
"""

from __future__ import annotations

import math
import random

import torch

from ..device import num_threads
from ..optim import kahan_add_, stochastic_round as _reference_sr
from ..plans.byvalue import Foreign
from ..plans.l12 import kahan_plan, stochastic_round_plan
from .core import Check, bits, fail, returned, same_bits
from .rules import Rule

# "Use plain tensor operations (not amp_edu.optim)": the library versions are what the checks compare with.
RULES = (Rule("amp_edu.optim", (), "plain tensor operations, not amp_edu.optim"),
         Rule("torchao", (), "plain tensor operations, not torchao"))

__all__ = ["check_stochastic_round", "check_kahan"]

ULP1 = 2.0 ** -7          # bf16's spacing in [1, 2)
_UNREADABLE = "the grader could not read what your function did (was the check cell changed?)"


def _readable(name: str, ok: bool, got) -> None:
    if not ok:
        raise fail(name, expected="what the check's plan returns", got=got, hint=_UNREADABLE)


def _what(got) -> str:
    if type(got) is torch.Tensor:
        return f"{got.dtype} tensor of shape {tuple(got.shape)}"
    return repr(got) if type(got) is Foreign else type(got).__name__


# --- stochastic rounding ----------------------------------------------------------------------------
_N_ULP = 200_000
_M_STREAM = 1 << 20       # an off-by-one in the draw changes about one element in 65536: look at a million


def _sr_cases(seed: int) -> list[dict]:
    """The calls, in order: exact bf16 values (named, then drawn), four values 1/8 .. 3/4 of an ulp
    past ±1 (two generators each), a million random float32 values (two generators), ±float32's
    largest. The generators' seeds and the random values are drawn from ``seed``."""
    rng = random.Random(seed)
    s = rng.sample(range(1 << 31), 6)
    g = torch.Generator().manual_seed(seed)
    named = torch.tensor([1.0, -1.5, 0.0, -0.0, 2.0 ** -100, 3.0e38, -7.25]).bfloat16().float().repeat(20000)
    drawn = (torch.randn(10000, generator=g) * torch.exp2(torch.empty(10000).uniform_(-120, 120, generator=g)))
    exact = torch.cat([named, drawn.bfloat16().float()])
    cases = [{"part": "exact", "x": exact, "seeds": [s[0]]}]
    for base, frac in ((1.0, 0.125), (-1.0, 0.125), (1.0, 0.5), (1.0, 0.75)):
        cases.append({"part": "ulp", "base": base, "frac": frac,
                      "x": torch.full((_N_ULP,), base * (1.0 + frac * ULP1)), "seeds": [s[1], s[2]]})
    x = torch.randn(_M_STREAM, generator=g) * torch.logspace(-20, 20, _M_STREAM)
    cases.append({"part": "stream", "x": x, "seeds": [s[3], s[4]]})
    top = torch.tensor([3.4028234663852886e38, -3.4028234663852886e38]).repeat(512)
    cases.append({"part": "top", "x": top, "seeds": [s[5]]})
    return cases


def _check_type(name, x, got):
    if type(got) is not torch.Tensor or got.dtype != torch.bfloat16 or got.shape != x.shape:
        raise fail(name, input=x, expected=f"a torch.bfloat16 tensor of shape {tuple(x.shape)}", got=_what(got),
                   hint="return the rounded value as bf16: build the fp32 bit pattern, then .view(torch.float32)"
                        ".bfloat16() (exact, since its lower 16 bits are 0)")


def _rounded(name: str, case: dict, out: dict) -> list[torch.Tensor]:
    """The learner's results for one case (type-checked), after checking that x was left alone."""
    x = case["x"]
    got = [returned(name, o, input=x, expected="a bfloat16 tensor of x's shape") for o in out["rounded"]]
    for g in got:
        _check_type(name, x, g)
    after = out["x"]
    if not same_bits(after, x):
        changed = int((bits(after) != bits(x)).sum()) if type(after) is torch.Tensor and after.dtype == x.dtype \
            and after.shape == x.shape else None
        raise fail(name, input=x, expected="x as it was passed in (stochastic_round only reads it)",
                   got=f"x changed in {changed} of {x.numel()} elements" if changed is not None else _what(after),
                   hint="stochastic_round must not change its input x: x.view(torch.int32) shares x's memory, "
                        "so an in-place op on it (&=, +=, .add_(), .copy_()) writes into the caller's tensor. "
                        "Build new tensors instead (bits & -65536, torch.where(...))")
    return got


def _judge_stochastic_round(cases: list[dict], result) -> str:
    with num_threads(1):
        return _judge_sr(cases, result)


def _judge_sr(cases: list[dict], result) -> str:
    name = "stochastic_round"
    _readable(name, type(result) is list and len(result) == len(cases) and all(
        type(r) is dict and type(r.get("rounded")) is list and len(r["rounded"]) == len(c["seeds"])
        for r, c in zip(result, cases)), result)
    parts = {}
    for case, out in zip(cases, result):
        parts.setdefault(case["part"], []).append((case, out))
    # 1. exact bf16 values (and signed zeros) never move
    [(case, out)] = parts["exact"]
    exact = case["x"]
    [got] = _rounded(name, case, out)
    if not same_bits(got, exact.bfloat16()):
        bad = int((got.float() != exact).sum())
        raise fail(name, input="values that bf16 holds exactly (1.0, -1.5, 0.0, ...), 20000 draws each, and 10000 "
                               "drawn ones",
                   expected="the same values, every draw", got=f"{bad} of {exact.numel()} draws moved",
                   hint="a value whose lower 16 bits are 0 must never round up: round away from zero only when "
                        "rand < (bits & 0xFFFF), strictly less (with <=, rand = 0 moves it once in 65536 draws)")
    # 2. values 1/8, 1/2, 3/4 of an ulp past ±1, many draws, two generators
    ulp = [(case, _rounded(name, case, out)) for case, out in parts["ulp"]]
    shown = "200000 copies each of 1 + 1/8 ulp, -(1 + 1/8 ulp), 1 + 1/2 ulp, 1 + 3/4 ulp (ulp = 2**-7)"
    if all(same_bits(a, b) for _, (a, b) in ulp):
        nearest = all(same_bits(a, c["x"].bfloat16()) for c, (a, _) in ulp)
        trunc = all(same_bits(a, (c["x"].view(torch.int32) & -65536).view(torch.float32).bfloat16())
                    for c, (a, _) in ulp)
        got = ", ".join(f"{float(a[0])!r}" for _, (a, _) in ulp)
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
    for case, (a, _) in ulp:
        base, frac, x, n = case["base"], case["frac"], case["x"], case["x"].numel()
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
    [(case, out)] = parts["stream"]
    x = case["x"]
    for seed, got in zip(case["seeds"], _rounded(name, case, out)):
        want = _reference_sr(x, generator=torch.Generator().manual_seed(seed))
        if not same_bits(got, want):
            raise fail(name, input=f"{x.numel()} random float32 values (generator seed {seed})", expected=want,
                       got=got,
                       hint="unbiased, but not the course's (and torchao's) random stream: draw exactly "
                            "torch.randint(0, 1 << 16, x.shape, generator=generator, dtype=torch.int32), once, "
                            "and round away from zero where it is < (x.view(torch.int32) & 0xFFFF)")
    # 4. the top of the range: rounding up the largest float32 carries into the exponent (inf), never a NaN
    [(case, out)] = parts["top"]
    [got] = _rounded(name, case, out)
    if bool(got.isnan().any()):
        raise fail(name, input="±3.4028235e38 (float32's largest), 512 draws each",
                   expected="bf16's largest (±3.3895e38) or ±inf, never NaN", got=f"{int(got.isnan().sum())} NaN",
                   hint="clear all 16 low bits before rounding up (bits & -65536, i.e. 0xFFFF0000) and add exactly "
                        "0x10000: a leftover low bit on 0x7F7F0000 + 0x10000 makes 0x7F800001, a NaN, not inf")
    return ("exact values kept, unbiased at 1/8, 1/2, 3/4 ulp (both signs), bit-identical on the "
            "stream, no NaN at the top of the range")


check_stochastic_round = Check("stochastic_round", cases=_sr_cases, plan=stochastic_round_plan,
                               judge=_judge_stochastic_round, echo=True, rules=RULES)
"""Grade ``stochastic_round(x, generator) -> bf16`` (see the module docstring)."""


# --- Kahan ------------------------------------------------------------------------------------------
_STEPS = 60


def _params(g: torch.Generator | None = None) -> list[torch.Tensor]:
    """Four bf16 weights drawn from ``g`` (default: seed 7, the self-check seed's)."""
    g = torch.Generator().manual_seed(7) if g is None else g
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


def _updates(params, steps, g: torch.Generator | None = None):
    """``steps`` updates below half an ulp of each weight, drawn from ``g`` (default: seed 8)."""
    g = torch.Generator().manual_seed(8) if g is None else g
    return [[p.float().abs() * 2.0 ** -11 * (1 + torch.rand(p.shape, generator=g)) * torch.sign(
        torch.randn(p.shape, generator=g) + 0.3) for p in params] for _ in range(steps)]


def _kahan_cases(seed: int) -> dict:
    """Four bf16 weights and 60 steps of updates below half an ulp, drawn from ``seed`` (seed 0
    gives the weights and updates this check has always used); zero buffers to start the updates
    from; and the float32/float64 tie of :func:`_rounded_twice`."""
    params = _params(torch.Generator().manual_seed(7 + 2 * seed))
    p, c, u = _rounded_twice()
    return {"params": params, "comps": [torch.zeros_like(q) for q in params],
            "updates": _updates(params, _STEPS, torch.Generator().manual_seed(8 + 2 * seed)),
            "tie": {"p": p, "comp": c, "update": u}}


def _fmt(t: torch.Tensor) -> str:
    if type(t) is not torch.Tensor:
        return _what(t)
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


_UPDATE_HINT = ("kahan_update_ changed `update`, the caller's step: it only reads it. Form y = comp.float() + "
                "update as a new tensor (`update += comp` or update.add_(...) writes into the caller's tensor)")


def _after_update(where: str, out: dict, u: torch.Tensor) -> tuple:
    """The learner's p and comp after one call (dtype-checked), after checking ``update`` was left alone."""
    returned("kahan_update_", out["call"], input=where, expected="p and comp updated in place")
    p, c = out["p"], out["comp"]
    if type(p) is not torch.Tensor or type(c) is not torch.Tensor or p.dtype != torch.bfloat16 \
            or c.dtype != torch.bfloat16:
        dt = lambda t: t.dtype if type(t) is torch.Tensor else _what(t)  # noqa: E731
        raise fail("kahan_update_", input=where, expected="p and comp still bf16", got=f"p {dt(p)}, comp {dt(c)}",
                   hint="update in place with p.copy_(...) and comp.copy_(...): both stay bf16")
    if not same_bits(out["update"], u):
        raise fail("kahan_update_", input=where, expected="update as it was passed in",
                   got=f"update changed to {_fmt(out['update'])} (was {_fmt(u)})", hint=_UPDATE_HINT)
    return p, c


def _judge_kahan(cases: dict, result) -> str:
    with num_threads(1):
        return _judge_k(cases, result)


def _judge_k(cases: dict, result) -> str:
    params = cases["params"]
    n = len(params)
    step_ok = lambda s: type(s) is dict and {"call", "p", "comp", "update"} <= s.keys()  # noqa: E731
    _readable("kahan", type(result) is dict and type(result.get("steps")) is list
              and len(result["steps"]) == len(cases["updates"])
              and all(type(row) is list and len(row) == n and all(step_ok(s) for s in row) for row in result["steps"])
              and step_ok(result.get("tie")), result if type(result) is not dict else sorted(result))
    comps = returned("init_compensation", result.get("init"), input=f"{n} bf16 weights (48×32, 32, 16×8, 64)",
                     expected=f"a list of {n} zero buffers")
    if type(comps) not in (list, tuple) or len(comps) != n:
        raise fail("init_compensation", input=f"{n} bf16 weights", expected=f"a list of {n} tensors",
                   got=comps, hint="return one compensation buffer per parameter, in order")
    for i, (p, c) in enumerate(zip(params, comps)):
        if type(c) is not torch.Tensor or c.shape != p.shape:
            raise fail("init_compensation", input=f"weight {i}: shape {tuple(p.shape)}",
                       expected=f"a tensor of shape {tuple(p.shape)}", got=c, hint="torch.zeros_like(p)")
        if c.dtype != p.dtype:
            odd = [j for j, cc in enumerate(comps) if type(cc) is torch.Tensor and cc.dtype != params[j].dtype]
            raise fail("init_compensation", input=f"weight {i}: {p.dtype}, shape {tuple(p.shape)}",
                       expected=f"a {p.dtype} buffer for every weight", got=f"{c.dtype} for weights {odd}",
                       hint="the compensation is kept in the weight's own dtype (bf16) for every parameter: "
                            "torch.zeros_like(p). An fp32 buffer for some of them costs 4 bytes where Kahan's "
                            "recipe pays 2, and their rounding then differs from the recipe's")
        if bool((c != 0).any()):
            raise fail("init_compensation", input=f"weight {i}", expected="zeros", got=c,
                       hint="nothing has been lost yet: the buffers start at 0")
    # the reference runs beside the learner's updates, bit for bit after every step; on the first
    # difference, tell which wrong update the learner's one step matches (from the same state)
    ref_p = [p.clone() for p in params]
    ref_c = [c.clone() for c in cases["comps"]]
    near = [p.clone() for p in params]
    for k, (ups, row) in enumerate(zip(cases["updates"], result["steps"])):
        for i, (u, out) in enumerate(zip(ups, row)):
            where = f"step {k + 1}, weight {i}"
            mine_p, mine_c = _after_update(where, out, u)
            near[i] = (near[i].float() + u).bfloat16()
            p0, c0 = ref_p[i], ref_c[i]
            want_p, want_c = p0.clone(), c0.clone()
            kahan_add_(want_p, want_c, u)
            if same_bits(mine_p, want_p) and same_bits(mine_c, want_c):
                ref_p[i], ref_c[i] = want_p, want_c
                continue
            raise fail("kahan_update_", input=f"{where} (updates below half an ulp)",
                       expected=f"p {_fmt(want_p)}, comp {_fmt(want_c)}",
                       got=f"p {_fmt(mine_p)}, comp {_fmt(mine_c)}", hint=_kahan_hint(p0, c0, u, mine_p, mine_c))
    tie = cases["tie"]
    p0, c0, u = tie["p"], tie["comp"], tie["update"]
    shown = "p = [1, -1] (bf16), comp = [2^-8, -2^-8] (bf16), update = ±(2^-24 + 2^-40) (fp32)"
    mine_p, mine_c = _after_update(shown, result["tie"], u)
    want_p, want_c = p0.clone(), c0.clone()
    kahan_add_(want_p, want_c, u)
    if not (same_bits(mine_p, want_p) and same_bits(mine_c, want_c)):
        raise fail("kahan_update_", input=shown,
                   expected=f"p {_fmt(want_p)}, comp {_fmt(want_c)}", got=f"p {_fmt(mine_p)}, comp {_fmt(mine_c)}",
                   hint="form the sums in float32 (p.float(), comp.float(), as the update is): comp + update is "
                        "2^-8 + 2^-24 in float32 and p + y the bf16 tie 1 + 2^-8 (rounded to even: 1.0), while "
                        "float64 sums lie above the tie and round up. Kahan's recipe rounds through float32")
    kept = sum(float((m.double() - p.double()).abs().sum()) for m, p in zip(ref_p, params))
    return (f"{n} bf16 weights, {_STEPS} updates below half an ulp, bit-identical "
            f"(round-to-nearest would have moved {sum(int((m != p).sum()) for m, p in zip(near, params))} "
            f"weights; Kahan moved them by {kept:.3g} in all)")


check_kahan = Check("kahan", cases=_kahan_cases, plan=kahan_plan, judge=_judge_kahan, echo=True, rules=RULES)
"""Grade ``init_compensation(params)`` and ``kahan_update_(p, comp, update)`` (see the module docstring)."""
