"""Exercise 05's plans: call the learner's ``is_eligible``, ``autocast_args`` and ``cached_cast``.

Some of the check's inputs cannot travel by value: a tensor on the ``meta`` device (a tensor "on
another device"), an ``nn.Parameter`` (a tensor subclass that requires grad). The cases describe
them — ``{"$meta": shape, "dtype": dtype}`` (:func:`meta_spec`), ``{"$parameter": tensor}`` — and :func:`build` makes
them here (and in the judge, for the reference). What the learner returns goes back through
:func:`describe`, which writes a meta tensor as the same description (its bytes cannot be read).

* :func:`is_eligible`: ``is_eligible(t, device_type)`` per case (the generic plan, on built inputs);
* :func:`autocast_args`: ``autocast_args(op, args, kwargs, policy=..., device_type="cpu",
  dtype=...)`` per case: the outcome, and ``args`` and ``kwargs`` after the call (they are only read);
* :func:`cached_cast`: the weight-cache scenarios, in order, with what can only be seen here —
  whether two calls returned the same tensor object, whether a cast has autograd history, what
  the cache holds after ``inference_mode`` calls.
"""

from __future__ import annotations

import torch
from torch import nn

from .runner import call, each

__all__ = ["meta_spec", "build", "describe", "is_eligible", "autocast_args", "cached_cast", "CACHE_SCENARIOS"]

BF16, FP16 = torch.bfloat16, torch.float16


def meta_spec(*shape, dtype=torch.float32) -> dict:
    """How a case describes a tensor of ``shape`` on the ``meta`` device (:func:`build` makes it)."""
    return {"$meta": list(shape), "dtype": dtype}


def build(spec):
    """The object a case describes: meta tensors and parameters made, containers rebuilt."""
    t = type(spec)
    if t is dict and "$meta" in spec:
        return torch.empty(spec["$meta"], dtype=spec["dtype"], device="meta")
    if t is dict and "$parameter" in spec:
        return nn.Parameter(spec["$parameter"].clone())
    if t is dict:
        return {k: build(v) for k, v in spec.items()}
    if t is list or t is tuple:
        return t(build(v) for v in spec)
    return spec


def describe(value, depth: int = 0):
    """``value`` with every meta tensor written as ``{"$meta": shape, "dtype": dtype}`` (plain
    containers are looked into; everything else is left to the by-value writer)."""
    t = type(value)
    if t is torch.Tensor and value.is_meta:
        return {"$meta": list(value.shape), "dtype": value.dtype}
    if depth > 16:
        return value
    if t is list or t is tuple:
        return t(describe(v, depth + 1) for v in value)
    if t is dict:
        return {k: describe(v, depth + 1) for k, v in value.items()}
    return value


def is_eligible(cases, fn) -> dict:
    """``fn(t, device_type)`` for each case ``(t described, device_type)``."""
    return each([(build(t), device) for t, device in cases], fn)


def autocast_args(cases, fn) -> list[dict]:
    """For each case ``(label, policy, dtype, op, op key, args, kwargs)``: the outcome of
    ``fn(op, args, kwargs, policy=policy, device_type="cpu", dtype=dtype)`` and the arguments after."""
    out = []
    for _label, policy, low, op, _key, args, kwargs in cases:
        args, kwargs = build(args), build(kwargs)
        outcome = call(fn, op, args, kwargs, policy=policy, device_type="cpu", dtype=low)
        if "ok" in outcome:
            outcome = {"ok": describe(outcome["ok"])}
        out.append({"outcome": outcome, "args": describe(args), "kwargs": describe(kwargs)})
    return out


# the scenarios :func:`cached_cast` runs, in order (the judge reads its results in this order)
CACHE_SCENARIOS = ("reuse", "no_grad", "activation", "non_leaf", "view", "fp16_parameter", "fp16_in_bf16",
                   "nested_dtypes", "two_weights", "clear", "inference_mode")


def cached_cast(cases, fn) -> dict:
    """The weight-cache scenarios on the case's tensors (``p``, ``q``: weights; ``act``: an
    activation; ``base``: the base of a view; ``half``: an fp16 weight).

    Per scenario: ``calls`` (the outcome of each call, in order), and where the scenario is about
    it, ``same`` (the two calls returned the same object), ``grad_fn`` (the class name of the
    second cast's ``grad_fn``, or None) and ``cached`` (the number of entries in the cache)."""
    p = nn.Parameter(cases["p"].clone())
    q = nn.Parameter(cases["q"].clone())
    out = {}

    def ok(o):
        return o.get("ok")

    def twice(t, to, lower, cache=None):
        cache = {} if cache is None else cache
        a, b = call(fn, cache, t, to, lower), call(fn, cache, t, to, lower)
        return {"calls": [a, b], "same": "ok" in a and "ok" in b and ok(a) is ok(b)}

    out["reuse"] = twice(p, BF16, BF16)

    cache = {}
    with torch.no_grad():
        a = call(fn, cache, p, BF16, BF16)
    b = call(fn, cache, p, BF16, BF16)
    second = ok(b)
    out["no_grad"] = {"calls": [a, b], "grad_fn": type(second.grad_fn).__name__
                      if type(second) is torch.Tensor and second.grad_fn is not None else None}

    leaf_view = cases["base"].clone()[:4].requires_grad_()
    out["activation"] = twice(cases["act"].clone(), BF16, BF16)
    out["non_leaf"] = twice(p * 2, BF16, BF16)
    out["view"] = twice(leaf_view, BF16, BF16)
    out["fp16_parameter"] = twice(nn.Parameter(cases["half"].clone()), BF16, BF16)
    out["fp16_in_bf16"] = twice(p, FP16, BF16)

    cache = {}
    out["nested_dtypes"] = {"calls": [call(fn, cache, p, FP16, FP16), call(fn, cache, p, BF16, BF16)]}
    cache = {}
    out["two_weights"] = {"calls": [call(fn, cache, p, BF16, BF16), call(fn, cache, q, BF16, BF16)]}

    cache = {}
    a = call(fn, cache, p, BF16, BF16)
    with torch.no_grad():
        p.mul_(2)
    cache.clear()
    b = call(fn, cache, p, BF16, BF16)
    out["clear"] = {"calls": [a, b], "same": "ok" in a and "ok" in b and ok(a) is ok(b)}

    cache = {}
    with torch.inference_mode():
        scenario = twice(p, BF16, BF16, cache)
    out["inference_mode"] = {**scenario, "cached": len(cache)}
    return out
