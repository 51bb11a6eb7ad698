"""Graders for exercise 10 (fp8 scaling, the two pieces every fp8 recipe is built on).

* :func:`check_quantize_tensorwise` grades ``quantize_tensorwise(x, fp8_dtype, scale=None) ->
  (x_fp8, scale)``: with ``scale=None`` compute the current per-tensor scale
  ``fp8_max / max(amax, EPS)`` (float64 division, stored float32), then cast
  ``saturate(x.float() * scale)`` to ``fp8_dtype``; with a given (delayed) scale, cast with it.
* :func:`check_delayed_update` grades ``delayed_update(history, amax, scale, fp8_dtype, margin=0)
  -> (new_history, new_scale)``: put ``amax`` at the front of the history, drop the oldest, and
  compute the next scale ``fp8_max / max(new_history) / 2^margin`` -- or keep ``scale`` (the
  previous one) when that max is 0 or not finite, Transformer Engine's rule.

The expected answers come from :mod:`amp_edu.fp8`, which ``tests/fp8/test_linear_parity.py`` proves
bit-identical to torchao. The cases are the ones nearly-right answers get wrong: an inverted
scale, a negative outlier, e5m2 and bf16 inputs, a tensor of zeros, a scale that overflows, the
output dtypes, the input left untouched; for the history: the roll and its direction, a current
amax larger than the history, an old maximum that falls off, the margin, an all-zero history and
a NaN amax (both keep the previous scale) -- then cases drawn from the check's seed (random
tensors, histories, scales and margins), so that an answer fitted to the named cases fails.

Each check is a :class:`~.core.Check`: the plans (:mod:`amp_edu.plans.l10`) call the learner's
function on fresh copies of the inputs and hand back what it returned and the input it must leave
alone as it is after the call; the judges here compute the reference and compare.
"""

from __future__ import annotations

import math

import torch

from ..fp8 import EPS, cast_to_float8, delayed_scale, fp8_max, tensor_to_scale, update_amax_history
from ..plans.l10 import delayed_update_plan, quantize_tensorwise_plan
from .core import Check, fail, returned
from .rules import Rule

__all__ = ["check_quantize_tensorwise", "check_delayed_update"]

# "Use plain tensor operations (not amp_edu.fp8)": the checks compare with amp_edu.fp8.
RULES = (Rule("amp_edu.fp8", (), "amp_edu.fp8 is what the check compares with: use plain tensor operations"),)

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.element_size() == 1 else t


def _same(a, b) -> bool:
    return (type(a) is torch.Tensor and a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(_bits(a), _bits(b)))


def _show(x: torch.Tensor) -> str:
    vals = x.flatten().tolist()
    body = ", ".join(f"{v:.4g}" for v in vals[:5]) + (", ..." if len(vals) > 5 else "")
    return f"[{body}] ({x.dtype}, shape {tuple(x.shape)})"


def _show_pair(got, first: str) -> str:
    """``first=[...] (dtype), scale=... (dtype)`` with the scale's every digit, or the raw value."""
    if not (type(got) is tuple and len(got) == 2):
        return repr(got)
    a, b = got
    sa = _show(a.float()).replace("(torch.float32", f"({a.dtype}") if type(a) is torch.Tensor else repr(a)
    sb = (f"{b.item()!r} ({b.dtype})" if type(b) is torch.Tensor and b.numel() == 1 else repr(b))
    return f"{first}={sa}, scale={sb}"


_F32_DIVISION = ("compute fp8_max / amax in float64 (amax.double()), then .float(): in float32, "
                 "`fp8_max / t` runs as fp8_max * (1/t) -- two roundings, and the last bit differs "
                 "from the scale torchao (and every fp8 recipe here) uses")


def _float32_division(m: float, amax: float) -> float:
    t = torch.tensor(amax, dtype=torch.float32)
    return float(m / t.clamp(min=EPS))


# --- part A: per-tensor scale and cast -----------------------------------------------------------
def _reference_quantize(x, fp8_dtype, scale=None):
    scale = tensor_to_scale(x, fp8_dtype) if scale is None else scale
    return cast_to_float8(x, fp8_dtype, scale).data, scale


def _quantize_cases():
    g = torch.Generator().manual_seed(10)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    yield "activations, e4m3", r(4, 8) * 3, E4, None
    neg = r(16)
    neg[3] = -40.0
    yield "the largest magnitude is negative", neg, E4, None
    yield "gradients, e5m2", r(32) * 1e-4, E5, None
    yield "a tensor of zeros (amax 0)", torch.zeros(6), E4, None
    yield "bf16 input", (r(8, 32) * 7).bfloat16(), E4, None
    yield "a given (delayed) scale: some values overflow e5m2", torch.tensor([1.0, -3.0, 90.0, -2e3]), E5, 1000.0
    yield "a given scale: some values overflow e4m3", torch.tensor([0.5, 2.0, -9.0, 30.0]), E4, 64.0
    yield "tiny values, large scale", r(8) * 1e-6, E4, None
    yield "a 3-D tensor", r(2, 3, 4), E5, None


def _quantize_hint(x, x_after, fp8_dtype, given, exp, got) -> str:
    exp_data, exp_scale = exp
    if not _same(x_after, x):
        return "x was modified: compute x.float() * scale into a new tensor (no x.mul_, no x *= scale)"
    if not (type(got) is tuple and len(got) == 2):
        return "return a pair (x_fp8, scale)"
    data, scale = got
    if type(scale) is not torch.Tensor:
        return "return the scale as a tensor (a 0-dim float32 tensor)"
    if type(data) is not torch.Tensor:
        return "return x_fp8 as a tensor"
    if data.dtype != fp8_dtype:
        if data.dtype in (E4, E5):
            return (f"cast to the fp8_dtype argument ({fp8_dtype}), not {data.dtype}: e4m3 for "
                    "activations and weights, e5m2 for gradients, and the caller picks")
        return f"x_fp8 must be a {fp8_dtype} tensor (x_scaled.to(fp8_dtype)), got {data.dtype}"
    if given is None and scale.dtype != torch.float32:
        return (f"store the scale as float32 (got {scale.dtype}): divide in float64 for the rounding, "
                "then .to(torch.float32) -- _scaled_mm takes float32 scales")
    if given is None and scale.numel() == 1 and exp_scale.item() > 0:
        s, e = float(scale.item()), float(exp_scale.item())
        if not math.isfinite(s) or math.isnan(s):
            return (f"amax is 0 here, so fp8_max / amax is inf: clamp amax to at least EPS = {EPS} first "
                    "(torch.clamp(amax, min=EPS)); then 0 * scale is 0, not NaN")
        if s > 0 and abs(math.log2(s) + math.log2(e)) < 1e-3:
            return "the scale is inverted: scale = fp8_max / amax (multiply x by it to fill the fp8 range)"
        if x.numel() and s != e:
            if s == _float32_division(fp8_max(fp8_dtype), float(x.abs().max())):
                return _F32_DIVISION
            m_signed, m_abs = float(x.float().max()), float(x.float().abs().max())
            if m_signed != m_abs and m_signed > 0 and math.isclose(s, fp8_max(fp8_dtype) / m_signed, rel_tol=1e-6):
                return "amax is the largest *magnitude*: x.abs().max(), not x.max() (a negative outlier counts)"
            other = E5 if fp8_dtype == E4 else E4
            if math.isclose(s, e * fp8_max(other) / fp8_max(fp8_dtype), rel_tol=1e-6):
                return (f"use the max of {fp8_dtype} (torch.finfo(fp8_dtype).max = {fp8_max(fp8_dtype):g}), "
                        f"not {fp8_max(other):g}")
            return "scale = fp8_max / max(x.abs().max(), EPS), in float64, then float32"
    if given is not None and not _same(scale, exp_scale):
        return "with a given scale, return that scale unchanged (the caller's delayed scale)"
    d, ed = data.float(), exp_data.float()
    if (~torch.isfinite(d)).any() and torch.isfinite(ed).all():
        return (f"saturate: clamp x * scale to [-fp8_max, fp8_max] ({fp8_max(fp8_dtype):g}) before the cast; "
                "a delayed scale can make values overflow, and e5m2 turns them into inf")
    if x.dtype != torch.float32:
        return "multiply in float32: x.float() * scale (a bf16 product rounds before the fp8 cast does)"
    return "x_fp8 = clamp(x.float() * scale, -fp8_max, fp8_max).to(fp8_dtype)"


def _drawn_quantize(seed: int) -> list[tuple]:
    """Four cases drawn from ``seed``: activations with a negative outlier somewhere (e4m3),
    small gradients (e5m2), a bf16 input, and a given scale under which some values overflow."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    k = lambda lo, hi: int(torch.randint(lo, hi, (), generator=g))  # noqa: E731
    act = r(k(1, 6), k(2, 17)) * 2.0 ** k(-4, 7)
    flat = act.view(-1)
    flat[k(0, flat.numel())] = -flat.abs().max() * (1.5 + float(torch.rand((), generator=g)))
    grads = r(k(8, 65)) * 2.0 ** k(-24, -6)
    bf16 = (r(k(2, 9), k(2, 33)) * 2.0 ** k(-6, 9)).bfloat16()
    fp8_dtype = (E4, E5)[k(0, 2)]
    given_x = r(k(4, 17)) * 2.0 ** k(-3, 8)
    overflow = 1.25 + 2.0 * float(torch.rand((), generator=g))          # the largest |x| lands past fp8_max
    given = torch.tensor(fp8_max(fp8_dtype) / float(given_x.abs().max()) * overflow, dtype=torch.float32).item()
    return [("drawn: activations with a negative outlier, e4m3", act, E4, None),
            ("drawn: gradients, e5m2", grads, E5, None),
            ("drawn: bf16 input", bf16, (E4, E5)[k(0, 2)], None),
            ("drawn: a given scale under which some values overflow", given_x, fp8_dtype, given)]


def _all_quantize_cases(seed: int) -> list[tuple]:
    """The named cases, then :func:`_drawn_quantize`: ``(label, x, fp8_dtype, scale or None)``."""
    return list(_quantize_cases()) + _drawn_quantize(seed)


def _readable(name: str, cases, result, key: str) -> None:
    """Fail unless ``result`` is the plan's list of ``{"outcome", key}``, one per case."""
    if type(result) is not list or len(result) != len(cases) or not all(
            type(r) is dict and r.keys() == {"outcome", key} for r in result):
        raise fail(name, expected=f"{len(cases)} answers", got=result,
                   hint="the grader could not read your function's answers")


def _judge_quantize(cases, result) -> str:
    name = "quantize_tensorwise"
    _readable(name, cases, result, "x")
    for (label, x, dtype, given), r in zip(cases, result):
        scale_in = None if given is None else torch.tensor(given, dtype=torch.float32)
        exp = _reference_quantize(x, dtype, scale_in)
        shown = f"{label}: x={_show(x)}, fp8_dtype={dtype}" + ("" if given is None else f", scale={given!r}")
        got = returned(name, r["outcome"], input=shown, expected=exp)
        theirs = r["x"]
        ok = (type(got) is tuple and len(got) == 2 and _same(got[0], exp[0]) and _same(got[1], exp[1])
              and _same(theirs, x))
        if not ok:
            hint = _quantize_hint(x, theirs, dtype, given, exp, got)
            raise fail(name, input=shown, expected=_show_pair(exp, "x_fp8"), got=_show_pair(got, "x_fp8"),
                       hint=hint)
    return f"{len(cases)} cases"


check_quantize_tensorwise = Check("quantize_tensorwise", cases=_all_quantize_cases, plan=quantize_tensorwise_plan,
                                  judge=_judge_quantize, rules=RULES)
"""Grade ``quantize_tensorwise(x, fp8_dtype, scale=None) -> (x_fp8, scale)``."""


# --- part B: the delayed-scaling amax-history update ---------------------------------------------
def _delayed_cases():
    t = lambda *v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    yield "the current amax is smaller than the history's", t(3.0, 2.0, 1.0, 0.5), 0.25, 149.0, E4, 0
    yield "the current amax is the largest", t(1.0, 1.0, 1.0, 1.0), 4.0, 448.0, E4, 0
    yield "the oldest amax (the largest) falls off", t(1.0, 1.5, 1.0, 8.0), 2.0, 56.0, E4, 0
    yield "margin 2: a 4x headroom", t(2.0, 5.0, 1.0), 3.0, 22.4, E4, 2
    yield "gradients: e5m2", t(1e-3, 4e-3, 2e-3, 1e-3, 5e-4), 3e-3, 1.4e7, E5, 0
    yield "an all-zero history and amax (a dead layer): keep the scale", t(0.0, 0.0, 0.0), 0.0, 37.0, E4, 0
    yield "a NaN amax (an overflow upstream): keep the scale", t(2.0, 1.0), math.nan, 224.0, E4, 0
    yield "an inf amax (a tensor that overflowed): keep the scale", t(2.0, 1.0), math.inf, 224.0, E4, 0
    yield ("an amax computed in float64 (exactly, as quantize_tensorwise does): the history stays float32",
           t(3.0, 2.0, 1.0), torch.tensor(2.5, dtype=torch.float64), 149.0, E4, 0)
    yield "history of length 1", t(7.0), 3.0, 64.0, E4, 1
    yield "margin 1, e5m2", t(10.0, 200.0, 30.0, 40.0, 50.0, 60.0), 100.0, 143.36, E5, 1


def _delayed_hint(history, amax, prev, dtype, margin, exp, got, h_before) -> str:
    exp_h, exp_s = exp
    if not _same_nan(history, h_before):
        return ("the history passed in was modified: build a new tensor (torch.cat / torch.roll), "
                "the caller may still hold the old one")
    if not (type(got) is tuple and len(got) == 2):
        return "return a pair (new_history, scale)"
    new_h, scale = got
    if type(new_h) is not torch.Tensor or type(scale) is not torch.Tensor:
        return "return tensors: the new history (1-D float32) and the scale (0-dim float32)"
    if new_h.shape != h_before.shape:
        return f"the history keeps its length ({h_before.numel()}): add the new amax and drop the oldest"
    if new_h.dtype != h_before.dtype:
        return (f"the history stays {h_before.dtype} (got {new_h.dtype}): cast the amax to the history's dtype "
                "(amax.reshape(1).to(history.dtype)) before torch.cat, which otherwise promotes the whole history")
    if not torch.equal(new_h, exp_h) and not (torch.isnan(exp_h).any() and torch.equal(
            new_h.nan_to_num(nan=-1.0), exp_h.nan_to_num(nan=-1.0))):
        if torch.equal(new_h, torch.cat([h_before[1:], torch.tensor([amax])])):
            return "newest first: the new amax goes to index 0 and the last (oldest) entry falls off"
        if new_h[0].item() == amax and torch.equal(new_h[1:], h_before[1:]):
            return ("the history was not rolled: writing the amax into slot 0 overwrites the previous "
                    "step's amax; shift everything back one place first (torch.cat([amax, history[:-1]]))")
        return "new_history = [amax, history[0], ..., history[-2]]"
    if scale.dtype != torch.float32:
        return f"store the scale as float32 (got {scale.dtype})"
    s, e = float(scale.item()), float(exp_s.item())
    m = fp8_max(dtype)
    a = float(exp_h.max())
    if not (math.isfinite(a) and a > 0):
        what = "0" if a == 0 else "inf" if math.isinf(a) else "NaN"
        if s == prev:
            return "keep the previous scale here"
        return (f"the history's max is {what}: no scale can be computed from it, so keep the previous "
                f"scale ({prev!r}) unchanged, as Transformer Engine does"
                + (f" (clamping to EPS gives {m / EPS:.3g}: with it the next real tensor saturates "
                   "completely)" if math.isclose(s, m / EPS, rel_tol=1e-6) else ""))
    if s == float(torch.tensor(_float32_division(m, float(exp_h.max())), dtype=torch.float32) / 2.0 ** margin) \
            or s == _float32_division(m, float(exp_h.max())) / 2 ** margin:
        return _F32_DIVISION
    if float(h_before.max()) != float(exp_h.max()) and \
            math.isclose(s, m / max(float(h_before.max()), EPS) / 2 ** margin, rel_tol=1e-6):
        return ("take the max over the *new* history, which includes this step's amax (and no longer "
                "the amax that fell off)")
    if margin and math.isclose(s, e * 4 ** margin, rel_tol=1e-6):
        return "the margin lowers the scale: divide by 2**margin (you multiplied)"
    if margin and math.isclose(s, e * 2 ** margin, rel_tol=1e-6):
        return "apply the margin: scale = fp8_max / amax / 2**margin"
    if margin and not math.isclose(s, e, rel_tol=1e-6):
        return "the margin is a power of two: scale = fp8_max / amax / 2**margin (not - margin, not / margin)"
    if s > 0 and e > 0 and abs(math.log2(s) + math.log2(e)) < 1e-3:
        return "the scale is inverted: scale = fp8_max / amax"
    if math.isclose(s, e * fp8_max(E5 if dtype == E4 else E4) / m, rel_tol=1e-6):
        return f"use the max of {dtype} ({m:g})"
    return ("scale = fp8_max / max(new_history) / 2**margin, in float64, stored as float32 (the previous "
            "scale when that max is 0 or not finite)")


def _reference_delayed(history, amax, prev, dtype, margin):
    new = update_amax_history(history, torch.as_tensor(amax, dtype=torch.float32))
    return new, delayed_scale(new, dtype, torch.tensor(prev, dtype=torch.float32), margin)


def _same_nan(a, b) -> bool:
    return (type(a) is torch.Tensor and a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.nan_to_num(nan=-1.0), b.nan_to_num(nan=-1.0)))


def _drawn_delayed(seed: int) -> list[tuple]:
    """Four cases drawn from ``seed``: histories of 1 to 9 amaxes (short values m·2^e, some 0), an
    amax above the history's max, an old maximum that falls off, a plain step and e5m2 gradients;
    previous scales and margins drawn too."""
    g = torch.Generator().manual_seed(seed)
    k = lambda lo, hi: int(torch.randint(lo, hi, (), generator=g))  # noqa: E731

    def value(lo: int, hi: int) -> float:                 # m·2^e: exact in float32, a short repr
        return k(1, 64) * 2.0 ** k(lo, hi)

    def history(n: int, lo: int, hi: int) -> torch.Tensor:      # about one entry in six is 0, not all
        h = torch.tensor([value(lo, hi) if k(0, 6) else 0.0 for _ in range(n)], dtype=torch.float32)
        if not h.any():
            h[0] = value(lo, hi)
        return h

    out = []
    h = history(k(2, 10), -6, 4)
    out.append(("drawn: the current amax is the largest", h, float(h.max()) * k(2, 9), k(1, 4000) / 8,
                (E4, E5)[k(0, 2)], k(0, 4)))
    h, amax = history(k(2, 10), -6, 4), value(-6, 4)
    h[-1] = max(float(h.max()), amax) * k(2, 9)
    out.append(("drawn: the oldest amax (the largest) falls off", h, amax, k(1, 4000) / 8, E4, k(0, 4)))
    out.append(("drawn: a step", history(k(1, 10), -6, 6), value(-6, 6), k(1, 4000) / 8, (E4, E5)[k(0, 2)],
                k(0, 4)))
    out.append(("drawn: gradients, e5m2", history(k(1, 6), -20, -8), value(-20, -8), float(2 ** k(10, 24)), E5,
                k(0, 3)))
    return out


def _all_delayed_cases(seed: int) -> list[tuple]:
    """The named cases, then :func:`_drawn_delayed`: ``(label, history, amax, scale, fp8_dtype, margin)``."""
    return list(_delayed_cases()) + _drawn_delayed(seed)


def _judge_delayed(cases, result) -> str:
    name = "delayed_update"
    _readable(name, cases, result, "history")
    for (label, history, amax, prev, dtype, margin), r in zip(cases, result):
        exp = _reference_delayed(history, amax, prev, dtype, margin)
        shown = (f"{label}: history={history.tolist()}, amax={amax!r}, scale={prev!r}, fp8_dtype={dtype}, "
                 f"margin={margin}")
        got = returned(name, r["outcome"], input=shown, expected=exp)
        theirs = r["history"]
        ok = (type(got) is tuple and len(got) == 2 and _same_nan(got[0], exp[0]) and _same(got[1], exp[1])
              and _same(theirs, history))
        if not ok:
            raise fail(name, input=shown, expected=_show_pair(exp, "new_history"),
                       got=_show_pair(got, "new_history"),
                       hint=_delayed_hint(theirs, float(amax), prev, dtype, margin, exp, got, history))
    return f"{len(cases)} cases"


check_delayed_update = Check("delayed_update", cases=_all_delayed_cases, plan=delayed_update_plan,
                             judge=_judge_delayed, rules=RULES)
"""Grade ``delayed_update(history, amax, scale, fp8_dtype, margin=0) -> (new_history, new_scale)``."""
