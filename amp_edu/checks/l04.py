"""Graders for exercise 04 (a GradScaler's two numerical pieces).

* :func:`check_unscale` grades ``unscale_and_check_(grads, scale) -> found_inf``: multiply every
  gradient in place by ``1/scale`` (computed in float64, stored as float32) and report whether any
  held an inf or NaN *before* the multiplication.
* :func:`check_update` grades ``update_scale_(scale, growth_tracker, found_inf, growth_factor,
  backoff_factor, growth_interval)``: the dynamic loss-scaling rule, in place.

The expected answers come from :mod:`amp_edu.scaler`, which ``tests/scaler/test_scaler.py`` proves equal
to torch's own kernels bit for bit. The cases are the ones nearly-right answers get wrong: NaN as
well as inf, -inf, a count instead of a flag, a sum of large finite values that overflows, a check done after unscaling,
growth one step late, a tracker that is not reset, a scale grown to inf, factors applied in
float32, a floor under the scale, an inverse computed in float32 — or computed in float64 and
never rounded to float32 (a Python float ``1.0 / scale.item()``), which float64 gradients expose.
"""

from __future__ import annotations

import math

import torch

from .. import scaler as _ref
from ..plans import l04 as plan
from .core import Check, bits, fail, returned, same_bits
from .rules import Rule

# "Use public tensor operations (no torch._amp_*)", and the check compares with amp_edu.scaler.
RULES = (Rule("torch", ("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_"),
              "public tensor operations only, no torch._amp_*"),
         Rule("amp_edu.scaler", (), "amp_edu.scaler is what the check compares with: write it yourself"))

__all__ = ["check_unscale", "check_update"]

INF, NAN = math.inf, math.nan


def _show(grads) -> str:
    parts = []
    for g in grads:
        vals = g.flatten().tolist()
        body = ", ".join(repr(v) for v in vals[:4]) + (", ..." if len(vals) > 4 else "")
        parts.append(f"[{body}] ({g.dtype}, shape {tuple(g.shape)})")
    return "[" + ", ".join(parts) + "]"


# --- part A: unscale with the inf/NaN check ------------------------------------------------------
def _unscale_cases(seed: int):
    """``(label, grads, scale)`` triples: the named situations, their random gradients drawn from
    ``seed``, then two drawn cases (random shapes, dtypes, scale and non-finite positions)."""
    return list(_named_unscale_cases(seed)) + _drawn_unscale_cases(seed)


def _drawn_unscale_cases(seed: int):
    g = torch.Generator().manual_seed(seed + 1)
    out = []
    for k in range(2):
        grads = []
        for _ in range(int(torch.randint(1, 4, (), generator=g))):
            n = int(torch.randint(1, 9, (), generator=g))
            dtype = (torch.float32, torch.float16, torch.bfloat16, torch.float64)[int(torch.randint(0, 4, (), generator=g))]
            grads.append((torch.randn(n, generator=g) * 100).to(dtype))
        if k == 1:
            grads[-1][int(torch.randint(0, grads[-1].numel(), (), generator=g))] = (INF, -INF, NAN)[seed % 3]
        scale = float(2.0 ** int(torch.randint(-2, 20, (), generator=g)) * (1.0, 3.0, 1.5)[k])
        out.append((f"drawn case {k + 1}" + (" (one non-finite value)" if k else ""), grads, scale))
    return out


def _named_unscale_cases(seed: int):
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) * 1000  # noqa: E731
    t = torch.tensor
    yield "clean gradients", [r(4, 3), r(3)], 65536.0
    yield "an inf", [r(4, 3), t([1.0, INF, 2.0])], 65536.0
    yield "a NaN (not an inf!)", [r(4, 3), t([1.0, NAN, 2.0])], 65536.0
    yield "a -inf", [t([-INF, 1.0]), r(3)], 1024.0
    yield "inf in the first tensor only", [t([INF]), r(5), r(2, 2)], 2.0
    yield "inf and NaN in two tensors: found_inf is 1.0, not a count", [t([INF, 1.0]), r(3), t([NAN, -INF])], 16.0
    yield "large but finite values (their sum overflows, they don't)", [t([3.0e38, 3.0e38, -1.0])], 1.0
    yield "scale below 1: unscaling makes inf of a finite value", [t([1.0e38, 2.0])], 0.25
    yield "a scale that is not a power of two", [r(3, 3), t([1.0, 3.0, 10.0])], 3.0
    yield "scale 1000 (1/1000 is inexact)", [r(7)], 1000.0
    yield "NaN and inf: gradients are unscaled all the same", [t([INF, 4.0, NAN, -8.0])], 4.0
    yield "bf16 gradients (multiplied in float32, rounded back)", [r(5).bfloat16(), t([1.0, INF]).bfloat16()], 3.0
    yield "no gradients at all", [], 65536.0
    yield "an empty tensor and a 0-dim one", [torch.zeros(0, 3), t(5.0)], 8.0
    yield "tiny values that unscale to subnormals", [t([2.0 ** -120, -(2.0 ** -125)])], 2.0 ** 16
    # float64 gradients (a float64 model): torch multiplies them by float32(1/S), not by the double
    # 1/S -- an inverse kept as a Python float or a float64 tensor differs here in every element
    yield "float64 gradients, scale 3 (float32(1/3) is not the double 1/3)", [r(6).double()], 3.0
    yield "float64 and float32 gradients together, scale 1000", [r(4).double(), r(4)], 1000.0


def _judge_unscale(cases, result) -> str:
    """Compare each case's found_inf and unscaled gradients with :func:`amp_edu.scaler.unscale_by_`."""
    name = "unscale_and_check_"
    if type(result) is not list or len(result) != len(cases):
        raise fail(name, expected=f"{len(cases)} answers", got=result, hint="the grader could not read the answers")
    n = 0
    for (label, grads, scale_value), step in zip(cases, result):
        scale = torch.tensor(scale_value, dtype=torch.float32)
        ours = [g.clone() for g in grads]
        expected = _ref.unscale_by_(ours, scale.clone())
        shown = f"{label}: grads={_show(grads)}, scale={scale_value!r}"
        got = returned(name, step["outcome"], input=shown, expected=expected)
        theirs = step["grads"]
        if type(theirs) is not list or len(theirs) != len(grads) or any(type(t) is not torch.Tensor for t in theirs):
            raise fail(name, input=shown, expected="the gradient tensors, unscaled in place", got=theirs,
                       hint="unscale the tensors in the list you were given, in place; do not replace them")
        if not (type(got) is torch.Tensor and got.dtype == torch.float32 and got.dim() == 0):
            raise fail(name, input=shown, expected=expected, got=got,
                       hint="return found_inf as a 0-dim float32 tensor, 1.0 or 0.0 "
                            "(torch.zeros(()) then fill_(1.0)): the scaler sums these tensors later")
        if not torch.equal(got, expected):
            if expected.item() == 1.0 and got.item() > 1.0:
                hint = ("found_inf is a flag, not a count: 1.0 if any gradient held inf/NaN, however many "
                        "did (found_inf.fill_(1.0), not found_inf += 1)")
            elif expected.item() == 0.0 and any(g.numel() and g.abs().max() > 1e37 for g in grads):
                hint = ("these values are finite: check with torch.isfinite (not a sum, which overflows), "
                        "and check *before* multiplying by 1/scale -- with a scale below 1, unscaling can "
                        "overflow a finite gradient, and that is not an inf in the scaled gradients")
            elif any(torch.isnan(g).any() for g in grads):
                hint = "NaN counts too: torch.isinf misses it; use torch.isfinite, which is False for inf, -inf and NaN"
            elif any((g == -INF).any() for g in grads):
                hint = "-inf counts too: compare with torch.isfinite, not g.max() == inf or g == inf"
            else:
                hint = "found_inf is 1.0 if any element of any gradient is inf, -inf or NaN, else 0.0"
            raise fail(name, input=shown, expected=expected, got=got, hint=hint)
        for k, (a, b) in enumerate(zip(theirs, ours)):
            if not same_bits(a, b):
                if any(not torch.isfinite(g).all() for g in grads):
                    hint = ("unscale every gradient even when you found an inf/NaN (torch does; the step "
                            "is skipped anyway, and the gradients then hold the unscaled values)")
                elif not torch.equal(a, grads[k]) and scale_value != 1.0 and torch.equal(bits(a), bits(grads[k] / scale_value)):
                    hint = ("multiply by the inverse instead of dividing by the scale: torch computes "
                            "inv = float32(1/scale) once and multiplies, and for a scale like 3 or 1000 "
                            "g * inv and g / scale differ in the last bit")
                elif torch.equal(a, grads[k]):
                    hint = "multiply the gradients in place (g.mul_(inv)): the caller keeps the same tensors"
                elif a.dtype == torch.float64 and torch.equal(bits(a), bits(grads[k] * (1.0 / scale_value))):
                    hint = ("the inverse must be STORED as float32 after computing it in float64: "
                            "inv = scale.double().reciprocal().float(). torch multiplies even float64 "
                            "gradients by float32(1/scale); a Python float (1.0 / scale.item()) or a "
                            "float64 tensor is the unrounded double 1/scale, and float64 gradients show it")
                else:
                    hint = "each gradient becomes g * inv, with inv = 1/scale computed in float64 then cast to float32"
                raise fail(name, input=f"{shown}, gradient #{k}", expected=b, got=a, hint=hint)
        if step["narrow"]:
            raise fail(name, input=shown, expected="1/scale computed in float64, then cast to float32",
                       got=f"a division in low precision ({step['narrow'][0]})",
                       hint="compute the inverse as scale.double().reciprocal().float(): a float32 division "
                            "is not correctly rounded everywhere (fast-math GPU builds); in float64, then "
                            "rounded once to float32, it is")
        n += 1
    return f"{n} cases"


check_unscale = Check("unscale_and_check_", cases=_unscale_cases, plan=plan.unscale, judge=_judge_unscale,
                      rules=RULES)
"""Grade ``unscale_and_check_(grads, scale) -> found_inf`` (see the module docstring)."""


# --- part B: the update rule ---------------------------------------------------------------------
def _update_cases(seed: int):
    """The named situations, then drawn ones: a scale, tracker, flag and factors from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    drawn = []
    for k in range(4):
        gi = int(torch.randint(1, 50, (), generator=g))
        tracker = int(torch.randint(0, gi, (), generator=g)) if k % 2 else gi - 1
        scale = float(torch.tensor(2.0 ** float(torch.empty(()).uniform_(-10, 40, generator=g)), dtype=torch.float32))
        found = (0.0, 1.0)[k // 2]
        gf = float(1.0 + torch.rand((), generator=g).item() * 3)
        bf = float(0.1 + torch.rand((), generator=g).item() * 0.8)
        drawn.append((f"drawn case {k + 1}", scale, tracker, found, gf, bf, gi))
    return list(_named_update_cases()) + drawn


def _named_update_cases():
    #        label                                   scale     tracker found   gf    bf     interval
    yield "no overflow: count one more good step",   65536.0,  5,      0.0,   2.0,  0.5,   2000
    yield "overflow: back off and reset the tracker", 65536.0, 1234,   1.0,   2.0,  0.5,   2000
    yield "NaN in found_inf counts as found",          1024.0,  3,      NAN,   2.0,  0.5,   2000
    yield "two optimizers overflowed: found_inf 2.0",  1024.0,  3,      2.0,   2.0,  0.5,   2000
    yield "growth exactly at growth_interval",         1024.0,  1999,   0.0,   2.0,  0.5,   2000
    yield "one step before growth",                    1024.0,  1998,   0.0,   2.0,  0.5,   2000
    yield "interval 1: grow after every good step",    8.0,     0,      0.0,   2.0,  0.5,   1
    yield "tracker already past the interval",         8.0,     7,      0.0,   2.0,  0.5,   5
    yield "growth would overflow float32",             2.0 ** 127, 9,   0.0,   2.0,  0.5,   10
    yield "growth just past float32's max",            3.0e38,  9,      0.0,   1.5,  0.5,   10
    yield "backoff 0.3 (not exact in float32)",        3.0,     4,      1.0,   2.0,  0.3,   10
    yield "growth factor 1.7 from 1000",               1000.0,  9,      0.0,   1.7,  0.5,   10
    # the scale is a float32: it grows past fp16's 65504, and to values fp16 cannot hold
    yield "growth past fp16's max (65536 × 2)",        65536.0, 9,      0.0,   2.0,  0.5,   10
    yield "growth to a value fp16 cannot hold",        1000.3,  9,      0.0,   1.0001, 0.5, 10
    yield "no floor: the scale may fall below 1",      0.125,   0,      1.0,   2.0,  0.5,   2000
    yield "overflow right at the interval",            1024.0,  1999,   1.0,   2.0,  0.5,   2000
    yield "the smallest scale backs off to 0",         2.0 ** -149, 0,  1.0,   2.0,  0.5,   2000


def _update_hint(case, got_scale, got_tracker, exp_scale, exp_tracker) -> str:
    label, scale, tracker, found, gf, bf, gi = case
    if not math.isfinite(got_scale) and math.isfinite(exp_scale):
        return ("never grow the scale to inf: round the grown scale to float32 first "
                "(2^127 * 2 = 2^128 is a finite Python float but inf in float32) and keep the old scale "
                "if it is not finite; the tracker still resets")
    bad = found != 0 or math.isnan(found)
    if bad:
        if found != 1.0 and got_scale == scale and got_tracker == tracker + 1:
            return "any non-zero found_inf means an overflow -- NaN and 2.0 too (`if found_inf:` in Python terms)"
        if got_tracker != exp_tracker:
            return "after an overflow the growth tracker goes back to 0"
        if got_scale == max(scale * bf, 1.0) or got_scale == 1.0:
            return "there is no floor: the scale can fall below 1 (a falling scale is a symptom to investigate)"
        return ("back off as float32(scale * backoff_factor), the product taken in float64: multiplying by a "
                "float32 copy of 0.3 gives a different last bit")
    if tracker + 1 == gi and got_scale == scale:
        return "grow when tracker + 1 == growth_interval (count this step first, then compare)"
    if tracker + 1 != gi and got_scale != scale:
        if tracker + 1 > gi:
            return "compare with ==, not >=: a tracker already past the interval never grows the scale (torch's rule)"
        return "grow only when tracker + 1 reaches growth_interval exactly"
    if got_tracker != exp_tracker:
        if exp_tracker == 0:
            return "after growing, the tracker goes back to 0"
        return "a good step adds 1 to the growth tracker"
    return "grow as float32(scale * growth_factor), the product taken in float64"


def _update_crash_hint(err: dict) -> str:
    if "overflow" in err["message"]:
        return ("round to float32 before writing into the float32 tensor, and keep the old scale "
                "if the grown one is inf (2^128 does not fit in float32)")
    return "your function raised on this input"


def _judge_update(cases, result) -> str:
    """Compare the scale and tracker each call left with :func:`amp_edu.scaler.update_scale_`'s."""
    name = "update_scale_"
    if type(result) is not list or len(result) != len(cases):
        raise fail(name, expected=f"{len(cases)} answers", got=result, hint="the grader could not read the answers")
    n = 0
    for case, step in zip(cases, result):
        label, scale, tracker, found, gf, bf, gi = case
        exp_s = torch.tensor(scale, dtype=torch.float32)
        exp_t = torch.tensor(tracker, dtype=torch.int32)
        _ref.update_scale_(exp_s, exp_t, torch.tensor(found), gf, bf, gi)
        shown = (f"{label}: scale={scale!r}, growth_tracker={tracker}, found_inf={found!r}, "
                 f"growth_factor={gf}, backoff_factor={bf}, growth_interval={gi}")
        expected = f"scale={exp_s.item()!r}, growth_tracker={exp_t.item()}"
        returned(name, step["outcome"], input=shown, expected=expected, hint=_update_crash_hint)
        got_s, got_t = step["scale"], step["growth_tracker"]
        if not (type(got_s) is torch.Tensor and type(got_t) is torch.Tensor) or got_s.dtype != torch.float32 \
                or got_t.dtype != torch.int32 or got_s.dim() or got_t.dim():
            raise fail(name, input=shown, expected=expected, got=f"scale {got_s!r}, tracker {got_t!r}",
                       hint="update the tensors you were given in place (fill_ / copy_), keeping their dtypes")
        if not (same_bits(got_s, exp_s) and torch.equal(got_t, exp_t)):
            if got_s.item() == scale and got_t.item() == tracker and (exp_s.item() != scale or exp_t.item() != tracker):
                hint = ("nothing changed: update the tensors in place (scale.fill_(...), growth_tracker.fill_(...)); "
                        "assigning to the argument names does not change the caller's tensors")
            else:
                hint = _update_hint(case, got_s.item(), got_t.item(), exp_s.item(), exp_t.item())
            raise fail(name, input=shown, expected=expected,
                       got=f"scale={got_s.item()!r}, growth_tracker={got_t.item()}", hint=hint)
        n += 1
    return f"{n} cases"


check_update = Check("update_scale_", cases=_update_cases, plan=plan.update, judge=_judge_update, rules=RULES)
"""Grade ``update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
growth_interval)``, which updates the 0-dim tensors ``scale`` (float32) and ``growth_tracker``
(int32) in place."""
