"""Graders for exercise 12: lesson 12's two tricks carried where the lesson did not take them.

* :data:`check_stochastic_round` grades ``stochastic_round_fp16(x, generator) -> fp16``: stochastic
  rounding fp32 → **fp16** for zeros and values in fp16's normal range (2^-14 to 65504). fp16
  keeps 10 of fp32's 23 mantissa bits, so 13 bits are dropped: draw 13 random bits per element,
  ``torch.randint(0, 1 << 13, x.shape, generator=generator, dtype=torch.int32)``, and round ``x``
  away from zero (``+ 0x2000`` on the truncated int32 bits) when they are below its lower 13 bits,
  else toward zero (``bits & -8192``). It only reads ``x``: a changed ``x`` fails.
* :data:`check_kahan` grades ``init_compensation(params, dtype=None) -> list`` (one zero buffer per
  weight, in ``dtype``, or the weight's own dtype when ``dtype`` is None) and ``kahan_update_(p,
  comp, update)``: ``p += update`` for a **bf16 or fp16** weight (rounded once to ``p``'s dtype),
  with the compensation fed back and refreshed in **its own dtype** (the weight's, or fp32), both in
  place; ``update`` is only read.

The lesson builds both for bf16 only (its stochastic rounding drops 16 bits, its Kahan update
rounds with ``.bfloat16()`` and keeps the buffer in bf16), so copying its cells fails here, each
with a hint that says what differs. The references are :func:`sr_fp16_reference` and
:func:`kahan_reference` below. Other wrong answers a learner is likely to write fail with their own
hint: rounding to nearest, truncating, biased random bits (16 of them, ``<=``), another random
stream; a compensation never fed back, never refreshed, rebound, of the wrong sign, formed in
float64, rounded to the weight's dtype when it is kept in fp32; buffers that ignore ``dtype``.

The learner's functions run in the kernel (:mod:`amp_edu.plans.l12`), which hands back what they
returned and their arguments after each call; the generators' seeds, the random inputs and the
weights and updates are drawn from the check's seed, and the references are computed here.
"""

from __future__ import annotations

import math
import random

import torch

from ..device import num_threads
from ..plans.byvalue import Foreign
from ..plans.l12 import kahan_plan, stochastic_round_plan
from .core import Check, bits, fail, returned, same_bits
from .rules import Rule

# "Use plain tensor operations (not amp_edu.optim)": the library is what the lesson uses.
RULES = (Rule("amp_edu.optim", (), "plain tensor operations, not amp_edu.optim"),
         Rule("torchao", (), "plain tensor operations, not torchao"))

__all__ = ["check_stochastic_round", "check_kahan"]

ULP1 = 2.0 ** -10         # fp16's spacing in [1, 2)
FP16_MAX = 65504.0
_UNREADABLE = "the grader could not read what your function did (was the check cell changed?)"


def sr_fp16_reference(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """fp32 → fp16 stochastically (zeros and fp16's normal range): away from zero with probability
    (lower 13 bits) / 2^13, from ``torch.randint(0, 1 << 13, ...)``."""
    b = x.view(torch.int32)
    trunc = b & -8192
    rand = torch.randint(0, 1 << 13, x.shape, generator=generator, dtype=torch.int32)
    return torch.where(rand < (b & 0x1FFF), trunc + 0x2000, trunc).view(torch.float32).half()


def kahan_reference(p: torch.Tensor, comp: torch.Tensor, update: torch.Tensor) -> None:
    """``p += update`` in ``p``'s dtype with compensation ``comp`` kept in its own dtype (in place)."""
    w = p.float()
    y = comp.float() + update
    new = (w + y).to(p.dtype)
    comp.copy_(y - (new.float() - w))
    p.copy_(new)


def _readable(name: str, ok: bool, got) -> None:
    if not ok:
        raise fail(name, expected="what the check's plan returns", got=got, hint=_UNREADABLE)


def _what(got) -> str:
    if type(got) is torch.Tensor:
        return f"{got.dtype} tensor of shape {tuple(got.shape)}"
    return repr(got) if type(got) is Foreign else type(got).__name__


# --- stochastic rounding to fp16 ----------------------------------------------------------------------
_N_ULP = 200_000
_M_STREAM = 1 << 20       # an off-by-one in the draw changes about one element in 8192: look at a million
NAME = "stochastic_round_fp16"


def _normal_range(n: int, g: torch.Generator) -> torch.Tensor:
    """``n`` float32 values, both signs, magnitudes log-uniform over fp16's normal range."""
    mag = torch.exp2(torch.empty(n).uniform_(-14, math.log2(FP16_MAX), generator=g)).clamp(2.0 ** -14, FP16_MAX)
    return mag * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)


def _sr_cases(seed: int) -> list[dict]:
    """The calls, in order: exact fp16 values (named, then drawn), four values 1/8 .. 3/4 of an ulp
    past ±1 (two generators each), a million random float32 values in fp16's normal range with
    both ends of it (two generators). The generators' seeds and the random values come from ``seed``."""
    rng = random.Random(seed)
    s = rng.sample(range(1 << 31), 5)
    g = torch.Generator().manual_seed(seed)
    named = torch.tensor([1.0, -1.5, 0.0, -0.0, 2.0 ** -14, FP16_MAX, -7.25, 1.0 + 2.0 ** -10, -(3.0 + 2.0 ** -9),
                          1000.5]).repeat(20000)
    exact = torch.cat([named, _normal_range(10000, g).half().float()])
    cases = [{"part": "exact", "x": exact, "seeds": [s[0]]}]
    for base, frac in ((1.0, 0.125), (-1.0, 0.125), (1.0, 0.5), (1.0, 0.75)):
        cases.append({"part": "ulp", "base": base, "frac": frac,
                      "x": torch.full((_N_ULP,), base * (1.0 + frac * ULP1)), "seeds": [s[1], s[2]]})
    edges = torch.cat([torch.linspace(65472.0, FP16_MAX, 4096), torch.linspace(2.0 ** -14, 2.0 ** -14 * 1.001, 4096)])
    x = torch.cat([_normal_range(_M_STREAM - edges.numel(), g), edges])
    cases.append({"part": "stream", "x": x, "seeds": [s[3], s[4]]})
    return cases


def _check_type(x, got):
    if type(got) is not torch.Tensor or got.dtype != torch.float16 or got.shape != x.shape:
        hint = ("return the rounded value as fp16: build the fp32 bit pattern, then .view(torch.float32).half() "
                "(exact, since its lower 13 bits are 0)")
        if type(got) is torch.Tensor and got.dtype == torch.bfloat16:
            hint = "this returns bf16, as the lesson's sr_bf16 does; the target here is fp16 (.half())"
        raise fail(NAME, input=x, expected=f"a torch.float16 tensor of shape {tuple(x.shape)}", got=_what(got),
                   hint=hint)


def _rounded(case: dict, out: dict) -> list[torch.Tensor]:
    """The learner's results for one case (type-checked), after checking that x was left alone."""
    x = case["x"]
    got = [returned(NAME, o, input=x, expected="a float16 tensor of x's shape") for o in out["rounded"]]
    for g in got:
        _check_type(x, g)
    after = out["x"]
    if not same_bits(after, x):
        changed = int((bits(after) != bits(x)).sum()) if type(after) is torch.Tensor and after.dtype == x.dtype \
            and after.shape == x.shape else None
        raise fail(NAME, input=x, expected=f"x as it was passed in ({NAME} only reads it)",
                   got=f"x changed in {changed} of {x.numel()} elements" if changed is not None else _what(after),
                   hint=f"{NAME} must not change its input x: x.view(torch.int32) shares x's memory, "
                        "so an in-place op on it (&=, +=, .add_(), .copy_()) writes into the caller's tensor. "
                        "Build new tensors instead (bits & -8192, torch.where(...))")
    return got


def _on_bf16_grid(t: torch.Tensor) -> bool:
    f = t.float()
    return bool((f.bfloat16().float() == f).all())


_BF16_BITS = ("the results lie on bf16's grid: this drops 16 bits, as the lesson's bf16 rounding does. fp16 keeps 10 "
              "mantissa bits, so drop 13: truncate with bits & -8192 (0xFFFFE000), add one fp16 ulp as 0x2000, and "
              "compare bits & 0x1FFF with 13 random bits, torch.randint(0, 1 << 13, ...)")


def _judge_stochastic_round(cases: list[dict], result) -> str:
    with num_threads(1):
        return _judge_sr(cases, result)


def _judge_sr(cases: list[dict], result) -> str:
    _readable(NAME, type(result) is list and len(result) == len(cases) and all(
        type(r) is dict and type(r.get("rounded")) is list and len(r["rounded"]) == len(c["seeds"])
        for r, c in zip(result, cases)), result)
    parts = {}
    for case, out in zip(cases, result):
        parts.setdefault(case["part"], []).append((case, out))
    # 1. exact fp16 values (and signed zeros) never move
    [(case, out)] = parts["exact"]
    exact = case["x"]
    [got] = _rounded(case, out)
    if not same_bits(got, exact.half()):
        moved = got.float() != exact
        bad = int(moved.sum())
        hint = ("a value whose lower 13 bits are 0 must never round up: round away from zero only when "
                "rand < (bits & 0x1FFF), strictly less (with <=, rand = 0 moves it once in 8192 draws)")
        finite = got[moved][got[moved].isfinite()]
        if finite.numel() and _on_bf16_grid(finite):
            hint = _BF16_BITS
        raise fail(NAME, input="values that fp16 holds exactly (1.0, -1.5, 0.0, 1 + 2^-10, 65504, ...), 20000 draws "
                               "each, and 10000 drawn ones",
                   expected="the same values, every draw", got=f"{bad} of {exact.numel()} draws moved", hint=hint)
    # 2. values 1/8, 1/2, 3/4 of an ulp past ±1, many draws, two generators
    ulp = [(case, _rounded(case, out)) for case, out in parts["ulp"]]
    shown = "200000 copies each of 1 + 1/8 ulp, -(1 + 1/8 ulp), 1 + 1/2 ulp, 1 + 3/4 ulp (ulp = 2**-10)"
    if all(same_bits(a, b) for _, (a, b) in ulp):
        nearest = all(same_bits(a, c["x"].half()) for c, (a, _) in ulp)
        trunc = all(same_bits(a, (c["x"].view(torch.int32) & -8192).view(torch.float32).half()) for c, (a, _) in ulp)
        got = ", ".join(f"{float(a[0])!r}" for _, (a, _) in ulp)
        if nearest:
            hint = ("that is rounding to nearest (x.half()): an update below half an ulp is lost every time. "
                    "Round away from zero with probability (lower 13 bits) / 2**13, using the random bits from "
                    "the generator")
        elif trunc:
            hint = ("that is truncation (bits & -8192 only): always toward zero, so biased. Add one fp16 "
                    "ulp (0x2000 on the int32 bits) when rand < (bits & 0x1FFF)")
        else:
            hint = ("the result does not depend on the generator: draw the random bits from it, "
                    "torch.randint(0, 1 << 13, x.shape, generator=generator, dtype=torch.int32)")
        raise fail(NAME, input=shown, expected="a mix of the two fp16 neighbours, different for each generator",
                   got=f"every copy rounded the same way, whatever the generator: {got}", hint=hint)
    for case, (a, _) in ulp:
        base, frac, x, n = case["base"], case["frac"], case["x"], case["x"].numel()
        if _on_bf16_grid(a):
            raise fail(NAME, input=f"{n} copies of {float(x[0])!r} ({frac} fp16 ulp past {base})",
                       expected=f"{base} or {base * (1 + ULP1)!r}", got=f"values such as {float(a.max())!r}",
                       hint=_BF16_BITS)
        up = (a.float().abs() > 1.0).double().mean().item()
        se = math.sqrt(frac * (1 - frac) / n)
        if abs(up - frac) > 6 * se:
            raise fail(NAME, input=f"{n} copies of {float(x[0])!r} ({frac} ulp past {base})",
                       expected=f"{frac:.4f} of them rounded away from zero (± {6 * se:.4f})", got=f"{up:.4f}",
                       hint="the random bits are biased: draw 13 of them, uniform in [0, 2**13) "
                            "(torch.randint(0, 1 << 13, ...)), and compare with the lower 13 bits of x (x.view("
                            "torch.int32) & 0x1FFF); 16 bits (bf16's), a shifted range or a float threshold round "
                            "up with the wrong probability, so the rounding is no longer unbiased")
    # 3. bit for bit on the shared stream, both ends of the range included
    [(case, out)] = parts["stream"]
    x = case["x"]
    for seed, got in zip(case["seeds"], _rounded(case, out)):
        want = sr_fp16_reference(x, torch.Generator().manual_seed(seed))
        if not same_bits(got, want):
            hint = ("unbiased, but not the reference's random stream: draw exactly torch.randint(0, 1 << 13, x.shape, "
                    "generator=generator, dtype=torch.int32), once, and round away from zero where it is "
                    "< (x.view(torch.int32) & 0x1FFF)")
            if not bool(got.isfinite().all()):
                hint = ("values up to 65504 (fp16's largest) must stay finite: truncate to 13 dropped bits and add "
                        "exactly 0x2000, so 65472 + one ulp is 65504, never inf")
            raise fail(NAME, input=f"{x.numel()} random float32 values in fp16's normal range, and its two ends "
                                   f"(generator seed {seed})", expected=want, got=got, hint=hint)
    return ("exact fp16 values kept, unbiased at 1/8, 1/2, 3/4 ulp (both signs), bit-identical on the "
            "stream and at both ends of fp16's normal range")


check_stochastic_round = Check("stochastic_round", cases=_sr_cases, plan=stochastic_round_plan,
                               judge=_judge_stochastic_round, echo=True, rules=RULES)
"""Grade ``stochastic_round_fp16(x, generator) -> fp16`` (see the module docstring)."""


# --- Kahan, for bf16 and fp16 weights, the compensation in a dtype of its own ------------------------------
_STEPS = 40
_DTYPES = (torch.bfloat16, torch.float16, torch.float16, torch.bfloat16)
_SHAPES = ((48, 32), (32,), (16, 8), (64,))
_WHAT = "4 weights: bf16 48×32, fp16 32, fp16 16×8 (≈0.01), bf16 64 (≈1e-6)"


def _params(g: torch.Generator | None = None) -> list[torch.Tensor]:
    """Four weights drawn from ``g`` (default: seed 7, the self-check seed's): bf16 and fp16."""
    g = torch.Generator().manual_seed(7) if g is None else g
    scale = (1.0, 1.0, 0.01, 1e-6)
    return [(torch.randn(s, generator=g) * k).to(dt) for s, k, dt in zip(_SHAPES, scale, _DTYPES)]


def _updates(params, steps, g: torch.Generator | None = None):
    """``steps`` updates below half an ulp of each weight (2^-11 of a bf16 weight, 2^-14 of an fp16 one,
    times 1 to 2), drawn from ``g`` (default: seed 8)."""
    g = torch.Generator().manual_seed(8) if g is None else g
    rel = [2.0 ** -11 if p.dtype == torch.bfloat16 else 2.0 ** -14 for p in params]
    return [[p.float().abs() * r * (1 + torch.rand(p.shape, generator=g)) * torch.sign(
        torch.randn(p.shape, generator=g) + 0.3) for p, r in zip(params, rel)] for _ in range(steps)]


def _rounded_twice():
    """(p, comp, update) where float32 and float64 sums round to different bf16 weights: with p = 1,
    comp = 2^-8 and update = 2^-24 + 2^-40, y = comp + update is 2^-8 + 2^-24 in float32, so
    p + y is the bf16 tie 1 + 2^-8 (rounded to even: 1.0); exactly, p + y lies above the tie and
    rounds up to 1 + 2^-7. The recipe forms its sums in float32."""
    u = torch.tensor([2.0 ** -24 + 2.0 ** -40, -(2.0 ** -24 + 2.0 ** -40)])
    return (torch.tensor([1.0, -1.0]).bfloat16(), torch.tensor([2.0 ** -8, -2.0 ** -8]).bfloat16(), u)


_RUNS = ("their own dtype", "float32")


def _kahan_cases(seed: int) -> dict:
    """The weights; two runs of updates below half an ulp (compensation in the weights' own dtype,
    then in fp32), each from zero buffers; the dtype ``init_compensation`` is asked for; and the
    float32/float64 tie of :func:`_rounded_twice`. Weights and updates are drawn from ``seed``."""
    params = _params(torch.Generator().manual_seed(7 + 2 * seed))
    runs = []
    for k, how in enumerate(_RUNS):
        comps = [torch.zeros_like(q) if how != "float32" else torch.zeros_like(q, dtype=torch.float32) for q in params]
        runs.append({"comp_dtype": how, "params": [q.clone() for q in params], "comps": comps,
                     "updates": _updates(params, _STEPS, torch.Generator().manual_seed(8 + 2 * seed + 1000 * k))})
    p, c, u = _rounded_twice()
    return {"params": params, "init_dtypes": ["float32"], "runs": runs, "tie": {"p": p, "comp": c, "update": u}}


def _fmt(t: torch.Tensor) -> str:
    if type(t) is not torch.Tensor:
        return _what(t)
    v = t.flatten()[:4].float().tolist()
    return "[" + ", ".join(f"{x:.6g}" for x in v) + ", ...]"


def _kahan_hint(p0, c0, u, p, c) -> str:
    """Which plausible wrong update, applied to (p0, c0), gives the learner's (p, c)?"""
    y = c0.float() + u
    nearest = (p0.float() + u).to(p0.dtype)
    if p0.dtype != torch.bfloat16:
        via_bf16 = (p0.float() + y).bfloat16().to(p0.dtype)
        if same_bits(p, via_bf16) and not same_bits(via_bf16, (p0.float() + y).to(p0.dtype)):
            return ("this fp16 weight was rounded to bf16 (the lesson's .bfloat16()): round the sum once to the "
                    "weight's own dtype, (p.float() + y).to(p.dtype)")
    want = (p0.float() + y).to(p0.dtype)
    y64 = c0.double() + u.double()
    new64 = (p0.double() + y64).to(p0.dtype)
    if same_bits(p, new64) and same_bits(c, (y64 - (new64.double() - p0.double())).to(c0.dtype)):
        return ("these sums were formed in float64: form them in float32 (p.float(), comp.float(), as the update "
                "is), so the compensation holds exactly what the float32 rounding lost")
    if c0.dtype != p0.dtype and same_bits(p, want) and \
            same_bits(c, (y - (want.float() - p0.float())).to(p0.dtype).to(c0.dtype)):
        return ("the compensation was rounded to the weight's dtype, but it is kept in its own dtype (here "
                f"{c0.dtype}): comp.copy_(y - (new_p.float() - p.float())) rounds to comp's dtype by itself")
    if same_bits(p, nearest) and same_bits(c, c0):
        return ("the weight is rounded to nearest and the caller's compensation is left as it was (never "
                "written, or `comp = ...` inside the function, which only rebinds a local name): write what the "
                "rounding lost back into comp in place (comp.copy_(y - (new_p.float() - p.float()))), and add "
                "comp to the next update")
    if same_bits(p, nearest) and same_bits(c, (u - (nearest.float() - p0.float())).to(c0.dtype)):
        return ("the compensation is computed but never fed back: the weights move exactly as with plain "
                "round-to-nearest. Add it to the update first (y = comp.float() + update), round p + y to p's dtype, "
                "then keep what that rounding lost: comp = y - (new_p - p)")
    if same_bits(c, c0):
        return ("comp did not change: update it in place (comp.copy_(...)); `comp = ...` inside the function "
                "only rebinds the local name, so the caller's buffer never learns what was lost")
    return ("form y = comp.float() + update and the sum p.float() + y in fp32, round it once to p's dtype (new_p), "
            "then comp = y - (new_p.float() - p.float()), stored in comp's dtype; update p and comp in place")


_UPDATE_HINT = ("kahan_update_ changed `update`, the caller's step: it only reads it. Form y = comp.float() + "
                "update as a new tensor (`update += comp` or update.add_(...) writes into the caller's tensor)")


def _after_update(where: str, out: dict, u: torch.Tensor, p0: torch.Tensor, c0: torch.Tensor) -> tuple:
    """The learner's p and comp after one call (dtype-checked), after checking ``update`` was left alone."""
    returned("kahan_update_", out["call"], input=where, expected="p and comp updated in place")
    p, c = out["p"], out["comp"]
    if type(p) is not torch.Tensor or type(c) is not torch.Tensor or p.dtype != p0.dtype or c.dtype != c0.dtype:
        dt = lambda t: t.dtype if type(t) is torch.Tensor else _what(t)  # noqa: E731
        raise fail("kahan_update_", input=where, expected=f"p still {p0.dtype}, comp still {c0.dtype}",
                   got=f"p {dt(p)}, comp {dt(c)}",
                   hint="update in place with p.copy_(...) and comp.copy_(...): each keeps its own dtype")
    if not same_bits(out["update"], u):
        raise fail("kahan_update_", input=where, expected="update as it was passed in",
                   got=f"update changed to {_fmt(out['update'])} (was {_fmt(u)})", hint=_UPDATE_HINT)
    return p, c


def _judge_kahan(cases: dict, result) -> str:
    with num_threads(1):
        return _judge_k(cases, result)


def _check_init(params, comps, dtype, asked: str) -> None:
    n = len(params)
    if type(comps) not in (list, tuple) or len(comps) != n:
        raise fail("init_compensation", input=f"{n} weights, {asked}", expected=f"a list of {n} tensors",
                   got=comps, hint="return one compensation buffer per parameter, in order")
    for i, (p, c) in enumerate(zip(params, comps)):
        want = p.dtype if dtype is None else dtype
        if type(c) is not torch.Tensor or c.shape != p.shape:
            raise fail("init_compensation", input=f"weight {i}: shape {tuple(p.shape)}, {asked}",
                       expected=f"a tensor of shape {tuple(p.shape)}", got=c, hint="torch.zeros_like(p, dtype=...)")
        if c.dtype != want:
            hint = ("with dtype=None each buffer takes its weight's own dtype (bf16 or fp16): "
                    "torch.zeros_like(p, dtype=dtype), which keeps p's dtype when dtype is None"
                    if dtype is None else
                    f"the caller asked for {dtype} buffers: pass dtype on, torch.zeros_like(p, dtype=dtype)")
            raise fail("init_compensation", input=f"weight {i}: {p.dtype}, shape {tuple(p.shape)}, {asked}",
                       expected=f"a {want} buffer", got=f"{c.dtype}", hint=hint)
        if bool((c != 0).any()):
            raise fail("init_compensation", input=f"weight {i}, {asked}", expected="zeros", got=c,
                       hint="nothing has been lost yet: the buffers start at 0")


def _judge_k(cases: dict, result) -> str:
    params = cases["params"]
    n = len(params)
    step_ok = lambda s: type(s) is dict and {"call", "p", "comp", "update"} <= s.keys()  # noqa: E731
    _readable("kahan", type(result) is dict and type(result.get("runs")) is list
              and len(result["runs"]) == len(cases["runs"])
              and all(type(steps) is list and len(steps) == len(run["updates"])
                      and all(type(row) is list and len(row) == n and all(step_ok(s) for s in row) for row in steps)
                      for steps, run in zip(result["runs"], cases["runs"]))
              and type(result.get("init_as")) is dict and step_ok(result.get("tie")),
              result if type(result) is not dict else sorted(result))
    comps = returned("init_compensation", result.get("init"), input=f"{_WHAT}, no dtype",
                     expected=f"a list of {n} zero buffers")
    _check_init(params, comps, None, "no dtype")
    for name in cases["init_dtypes"]:
        got = returned("init_compensation", result["init_as"].get(name), input=f"{_WHAT}, dtype=torch.{name}",
                       expected=f"a list of {n} zero torch.{name} buffers")
        _check_init(params, got, getattr(torch, name), f"dtype=torch.{name}")
    # the reference runs beside the learner's updates, bit for bit after every step; on the first
    # difference, tell which wrong update the learner's one step matches (from the same state)
    moved_near = moved = 0
    for run, steps in zip(cases["runs"], result["runs"]):
        ref_p = [p.clone() for p in run["params"]]
        ref_c = [c.clone() for c in run["comps"]]
        near = [p.clone() for p in run["params"]]
        for k, (ups, row) in enumerate(zip(run["updates"], steps)):
            for i, (u, out) in enumerate(zip(ups, row)):
                p0, c0 = ref_p[i], ref_c[i]
                where = f"compensation in {run['comp_dtype']}: step {k + 1}, weight {i} ({p0.dtype}, comp {c0.dtype})"
                mine_p, mine_c = _after_update(where, out, u, p0, c0)
                near[i] = (near[i].float() + u).to(p0.dtype)
                want_p, want_c = p0.clone(), c0.clone()
                kahan_reference(want_p, want_c, u)
                if same_bits(mine_p, want_p) and same_bits(mine_c, want_c):
                    ref_p[i], ref_c[i] = want_p, want_c
                    continue
                raise fail("kahan_update_", input=f"{where} (updates below half an ulp)",
                           expected=f"p {_fmt(want_p)}, comp {_fmt(want_c)}",
                           got=f"p {_fmt(mine_p)}, comp {_fmt(mine_c)}", hint=_kahan_hint(p0, c0, u, mine_p, mine_c))
        moved_near += sum(int((m != p).sum()) for m, p in zip(near, run["params"]))
        moved += sum(int((m != p).sum()) for m, p in zip(ref_p, run["params"]))
    tie = cases["tie"]
    p0, c0, u = tie["p"], tie["comp"], tie["update"]
    shown = "p = [1, -1] (bf16), comp = [2^-8, -2^-8] (bf16), update = ±(2^-24 + 2^-40) (fp32)"
    mine_p, mine_c = _after_update(shown, result["tie"], u, p0, c0)
    want_p, want_c = p0.clone(), c0.clone()
    kahan_reference(want_p, want_c, u)
    if not (same_bits(mine_p, want_p) and same_bits(mine_c, want_c)):
        raise fail("kahan_update_", input=shown,
                   expected=f"p {_fmt(want_p)}, comp {_fmt(want_c)}", got=f"p {_fmt(mine_p)}, comp {_fmt(mine_c)}",
                   hint="form the sums in float32 (p.float(), comp.float(), as the update is): comp + update is "
                        "2^-8 + 2^-24 in float32 and p + y the bf16 tie 1 + 2^-8 (rounded to even: 1.0), while "
                        "float64 sums lie above the tie and round up. Kahan's recipe rounds through float32")
    return (f"{n} bf16 and fp16 weights, compensation in their own dtype and in fp32, {_STEPS} updates below half "
            f"an ulp each run, bit-identical (round-to-nearest would have moved {moved_near} weight values; Kahan "
            f"moved {moved})")


check_kahan = Check("kahan", cases=_kahan_cases, plan=kahan_plan, judge=_judge_kahan, echo=True, rules=RULES)
"""Grade ``init_compensation(params, dtype=None)`` and ``kahan_update_(p, comp, update)`` (see the module
docstring)."""
