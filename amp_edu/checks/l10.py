"""Graders for exercise 10 (fp8 scaling, the two pieces every fp8 recipe is built on).

* :func:`check_quantize_tensorwise` grades ``quantize_tensorwise(x, fp8_dtype, scale=None) ->
  (x_fp8, scale)``: with ``scale=None`` compute the current per-tensor scale
  ``fp8_max / max(amax, EPS)`` (float64 division, stored float32), then cast
  ``saturate(x.float() * scale)`` to ``fp8_dtype``; with a given (delayed) scale, cast with it.
* :func:`check_delayed_update` grades ``delayed_update(history, amax, scale, fp8_dtype, margin=0)
  -> (new_history, new_scale)``: put ``amax`` at the front of the history, drop the oldest, and
  compute the next scale ``fp8_max / max(new_history) / 2^margin`` -- or keep ``scale`` (the
  previous one) when that max is 0 or not finite, Transformer Engine's rule.

The expected answers come from :mod:`amp_edu.fp8`, which ``tests/test_fp8_parity.py`` proves
bit-identical to torchao. The cases are the ones nearly-right answers get wrong: an inverted
scale, a negative outlier, e5m2 and bf16 inputs, a tensor of zeros, a scale that overflows, the
output dtypes, the input left untouched; for the history: the roll and its direction, a current
amax larger than the history, an old maximum that falls off, the margin, an all-zero history and
a NaN amax (both keep the previous scale).
"""

from __future__ import annotations

import math

import torch

from ..fp8 import EPS, cast_to_float8, delayed_scale, fp8_max, tensor_to_scale, update_amax_history
from .core import call_learner, fail, passed, require_callable

__all__ = ["check_quantize_tensorwise", "check_delayed_update"]

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.element_size() == 1 else t


def _same(a, b) -> bool:
    return (isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(_bits(a), _bits(b)))


def _show(x: torch.Tensor) -> str:
    vals = x.flatten().tolist()
    body = ", ".join(f"{v:.4g}" for v in vals[:5]) + (", ..." if len(vals) > 5 else "")
    return f"[{body}] ({x.dtype}, shape {tuple(x.shape)})"


def _show_pair(got, first: str) -> str:
    """``first=[...] (dtype), scale=... (dtype)`` with the scale's every digit, or the raw value."""
    if not (isinstance(got, tuple) and len(got) == 2):
        return repr(got)
    a, b = got
    sa = _show(a.float()).replace("(torch.float32", f"({a.dtype}") if isinstance(a, torch.Tensor) else repr(a)
    sb = (f"{b.item()!r} ({b.dtype})" if isinstance(b, torch.Tensor) and b.numel() == 1 else repr(b))
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
    if x_after.dtype != x.dtype or not torch.equal(x_after, x):
        return "x was modified: compute x.float() * scale into a new tensor (no x.mul_, no x *= scale)"
    if not (isinstance(got, tuple) and len(got) == 2):
        return "return a pair (x_fp8, scale)"
    data, scale = got
    if not isinstance(scale, torch.Tensor):
        return "return the scale as a tensor (a 0-dim float32 tensor)"
    if not isinstance(data, torch.Tensor):
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


def check_quantize_tensorwise(quantize_tensorwise) -> None:
    """Grade ``quantize_tensorwise(x, fp8_dtype, scale=None) -> (x_fp8, scale)``."""
    name = "quantize_tensorwise"
    require_callable(name, quantize_tensorwise)
    n = 0
    for label, x, dtype, given in _quantize_cases():
        scale_in = None if given is None else torch.tensor(given, dtype=torch.float32)
        exp = _reference_quantize(x, dtype, scale_in)
        shown = f"{label}: x={_show(x)}, fp8_dtype={dtype}" + ("" if given is None else f", scale={given!r}")
        theirs = x.clone()
        args = (theirs, dtype) if given is None else (theirs, dtype, scale_in.clone())
        got = call_learner(name, quantize_tensorwise, args, input=shown, expected=exp)
        ok = (isinstance(got, tuple) and len(got) == 2 and _same(got[0], exp[0]) and _same(got[1], exp[1])
              and _same(theirs, x))
        if not ok:
            hint = _quantize_hint(x, theirs, dtype, given, exp, got)
            raise fail(name, input=shown, expected=_show_pair(exp, "x_fp8"), got=_show_pair(got, "x_fp8"),
                       hint=hint)
        n += 1
    passed(name, f"{n} cases")


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
    if not torch.equal(history.nan_to_num(nan=-1.0), h_before.nan_to_num(nan=-1.0)):
        return ("the history passed in was modified: build a new tensor (torch.cat / torch.roll), "
                "the caller may still hold the old one")
    if not (isinstance(got, tuple) and len(got) == 2):
        return "return a pair (new_history, scale)"
    new_h, scale = got
    if not isinstance(new_h, torch.Tensor) or not isinstance(scale, torch.Tensor):
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
    return (isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.nan_to_num(nan=-1.0), b.nan_to_num(nan=-1.0)))


def check_delayed_update(delayed_update) -> None:
    """Grade ``delayed_update(history, amax, scale, fp8_dtype, margin=0) -> (new_history, new_scale)``."""
    name = "delayed_update"
    require_callable(name, delayed_update)
    n = 0
    for label, history, amax, prev, dtype, margin in _delayed_cases():
        exp = _reference_delayed(history, amax, prev, dtype, margin)
        shown = (f"{label}: history={history.tolist()}, amax={amax!r}, scale={prev!r}, fp8_dtype={dtype}, "
                 f"margin={margin}")
        theirs = history.clone()
        given = amax if isinstance(amax, torch.Tensor) else torch.tensor(amax)
        args = (theirs, given, torch.tensor(prev, dtype=torch.float32), dtype, margin)
        got = call_learner(name, delayed_update, args, input=shown, expected=exp)
        ok = (isinstance(got, tuple) and len(got) == 2 and _same_nan(got[0], exp[0]) and _same(got[1], exp[1])
              and torch.equal(theirs, history))
        if not ok:
            raise fail(name, input=shown, expected=_show_pair(exp, "new_history"),
                       got=_show_pair(got, "new_history"),
                       hint=_delayed_hint(theirs, float(amax), prev, dtype, margin, exp, got, history))
        n += 1
    passed(name, f"{n} cases")
