"""Exercise 05, part C: ``cached_cast(cache, t, to, lower)`` -- the weight-cast cache.

The weight cache's checks are about object identity and autograd history, which only the
learner's kernel sees: the plan (:func:`amp_edu.plans.l05.cached_cast`) runs the scenarios there
and reports, per scenario, the calls' outcomes and whether two calls returned the same object.
The judge reads them scenario by scenario, in the plan's order: a weight's cast is reused, the
``no_grad`` trap, what is *not* cached (activations, non-leaves, views, fp16 weights, casts to
another dtype), two dtypes and two weights in one cache, ``clear()``, ``inference_mode``.
"""

from __future__ import annotations

import torch

from ...plans import l05 as plan
from ..core import SELF_CHECK_SEED, Check, fail, returned
from .eligible import described

__all__ = ["check_cached_cast"]

NAME = "cached_cast"
BF16, FP16 = torch.bfloat16, torch.float16


def _cache_cases(seed: int = SELF_CHECK_SEED) -> dict:
    """The scenarios' tensors, drawn from ``seed``: weights ``p`` (4, 4) and ``q`` (3, 2), an
    activation, the base of a view, an fp16 weight."""
    g = torch.Generator().manual_seed(seed)
    return {"p": torch.randn(4, 4, generator=g), "q": torch.randn(3, 2, generator=g),
            "act": torch.randn(4, 4, generator=g), "base": torch.randn(8, generator=g),
            "half": torch.randn(4, 4, generator=g).half()}


def _cache_fail(shown, expected, got, hint):
    return fail(NAME, input=shown, expected=expected, got=got, hint=hint)


def _cast(name, outcome, source, to, shown):
    """The learner's tensor from one call's ``outcome``: ``source.to(to)``, or a failure."""
    out = returned(name, outcome, input=shown, expected=f"t.to({to})")
    if type(out) is not torch.Tensor or out.dtype != to or not torch.equal(out, source.to(to)):
        raise _cache_fail(shown, f"t.to({to})", described(out), "always return the cast tensor (cached or new)")
    return out


def _scenario(result, key) -> dict:
    got = result.get(key)
    if type(got) is not dict or type(got.get("calls")) is not list:
        raise fail(NAME, expected=f"the scenario {key!r}", got=got,
                   hint="the grader could not read what your function did")
    return got


def _calls(name, got, n, shown):
    calls = got["calls"]
    if len(calls) != n:
        raise fail(name, input=shown, expected=f"{n} calls", got=calls,
                   hint="the grader could not read what your function did")
    return calls


def _judge_cache(cases, result) -> str:
    """Judge the scenarios in the plan's order (``amp_edu.plans.l05.CACHE_SCENARIOS``)."""
    if type(result) is not dict:
        raise fail(NAME, expected="the weight-cache scenarios", got=result,
                   hint="the grader could not read what your function did")
    p, q = cases["p"], cases["q"]
    _judge_reuse(result, p)
    _judge_no_grad_trap(result, p)
    _judge_what_is_not_cached(result, cases)
    _judge_dtypes_share_one_cache(result, p)
    _judge_two_weights(result, p, q)
    _judge_clear(result, p)
    _judge_inference_mode(result, p * 2)       # the plan doubled the weight in place in "clear"
    return "reuse, the no_grad trap, what is not cached, dtypes, two weights, clear, inference mode"


def _judge_reuse(result, p) -> None:
    """A parameter's cast is made once, then the same tensor object is handed out again."""
    got = _scenario(result, "reuse")
    shown = "cached_cast(cache, p, torch.bfloat16, lower=torch.bfloat16) twice, p = nn.Parameter (fp32 leaf)"
    for c in _calls(NAME, got, 2, shown):
        _cast(NAME, c, p, BF16, shown)
    if got.get("same") is not True:
        raise _cache_fail(shown, "the same tensor object both times", "two different tensors",
                          "a weight's cast should be made once and reused within the region")


def _judge_no_grad_trap(result, p) -> None:
    """A copy cached in a ``no_grad`` forward still carries autograd history to the weight."""
    got = _scenario(result, "no_grad")
    shown = "first call inside torch.no_grad(), second call with grad enabled (same parameter)"
    for c in _calls(NAME, got, 2, shown):
        _cast(NAME, c, p, BF16, shown)
    if type(got.get("grad_fn")) is not str:
        raise _cache_fail(shown, "a cast with autograd history (grad_fn ToCopyBackward0)", "grad_fn=None",
                          "the no_grad trap: make the cached copy under torch.enable_grad(), so it stays "
                          "connected to the weight whichever forward made it")


def _judge_what_is_not_cached(result, cases) -> None:
    """Only casts of fp32 leaf parameters (not views) to the region's dtype are cached."""
    p = cases["p"]
    not_cached = [
        ("activation", cases["act"], BF16, BF16, "a tensor that does not require grad (an activation, a batch)"),
        ("non_leaf", p * 2, BF16, BF16, "a non-leaf tensor (p * 2)"),
        ("view", cases["base"][:4], BF16, BF16, "a view (base[:4].requires_grad_()) — a leaf, but a view"),
        ("fp16_parameter", cases["half"], BF16, BF16, "an fp16 parameter (only fp32 sources are cached)"),
        ("fp16_in_bf16", p, FP16, BF16, "a cast to fp16 in a bf16 region (not the region's low-precision dtype)"),
    ]
    for key, t, to, lower, what in not_cached:
        got = _scenario(result, key)
        shown = f"cached_cast(cache, t, {to}, lower={lower}) twice, t = {what}"
        for c in _calls(NAME, got, 2, shown):
            _cast(NAME, c, t, to, shown)
        if got.get("same") is not False:
            raise _cache_fail(shown, "two fresh casts (not cached)", "the same cached tensor twice",
                              "cache only casts to the region's dtype of fp32 tensors that require grad, "
                              "are leaves and are not views (t._is_view()) — i.e. parameters")


def _judge_dtypes_share_one_cache(result, p) -> None:
    """Nested regions with different dtypes share one cache: it is keyed by the dtype too."""
    got = _scenario(result, "nested_dtypes")
    shown = ("cached_cast(cache, p, fp16, lower=fp16), then cached_cast(cache, p, bf16, lower=bf16): "
             "nested regions with different dtypes share one cache")
    first, second = _calls(NAME, got, 2, shown)
    _cast(NAME, first, p, FP16, shown)
    second = returned(NAME, second, input=shown, expected="t.to(torch.bfloat16)")
    if type(second) is not torch.Tensor or second.dtype != BF16:
        raise _cache_fail(shown, "a bfloat16 cast of p", described(second),
                          "key the cache by the tensor AND the target dtype, e.g. (id(t), to): keyed by the "
                          "tensor alone, the bf16 region is handed the fp16 copy the outer region made"
                          if type(second) is torch.Tensor and second.dtype == FP16 else
                          "always return the cast tensor (cached or new)")


def _judge_two_weights(result, p, q) -> None:
    """Two weights in one region each get their own copy: the cache is keyed by the tensor."""
    got = _scenario(result, "two_weights")
    shown = "cached_cast(cache, p, bf16, bf16), then cached_cast(cache, q, bf16, bf16): two weights, one region"
    first, second = _calls(NAME, got, 2, shown)
    _cast(NAME, first, p, BF16, shown)
    second = returned(NAME, second, input=shown, expected="q.to(torch.bfloat16)")
    if not (type(second) is torch.Tensor and second.dtype == BF16 and second.shape == q.shape
            and torch.equal(second, q.to(BF16))):
        raise _cache_fail(shown, "q.to(torch.bfloat16), q's own copy (shape (3, 2))", described(second),
                          "key the cache by the tensor (id(t)) and the dtype, (id(t), to): keyed by the dtype "
                          "alone, every weight of the region is handed the first weight's copy"
                          if type(second) is torch.Tensor and second.shape == p.shape else
                          "always return the cast tensor (cached or new)")


def _judge_clear(result, p) -> None:
    """After ``cache.clear()`` (a region's exit) the weight, changed in place, is cast afresh."""
    got = _scenario(result, "clear")
    shown = "first call, cache.clear(), second call"
    first, second = _calls(NAME, got, 2, shown)
    _cast(NAME, first, p, BF16, shown)
    _cast(NAME, second, p * 2, BF16, shown)      # the plan doubles the weight in place between the calls
    if got.get("same") is not False:
        raise _cache_fail(shown, "a fresh cast after clear()", "the old cached tensor",
                          "keep the cached copies in the dict you are given, so clear() forgets them")


def _judge_inference_mode(result, p) -> None:
    """Nothing is cached in ``torch.inference_mode()``, as in torch."""
    got = _scenario(result, "inference_mode")
    shown = "two calls inside torch.inference_mode()"
    for c in _calls(NAME, got, 2, shown):
        _cast(NAME, c, p, BF16, shown)
    if got.get("same") is not False or got.get("cached") != 0:
        raise _cache_fail(shown, "no caching in inference mode", "a cached tensor",
                          "torch does not cache in inference_mode (torch.is_inference_mode_enabled()): "
                          "such tensors could not be used by a later grad forward")


check_cached_cast = Check("cached_cast", cases=_cache_cases, plan=plan.cached_cast, judge=_judge_cache)
"""Grade ``cached_cast(cache: dict, t, to, lower) -> tensor``: the weight-cast cache."""
