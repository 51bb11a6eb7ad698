"""The weight-cast cache: cast each fp32 weight to fp16/bf16 once per autocast region.

A model uses its weights in several ops per forward pass (and an RNN once per time step); casting
them every time would repeat the same copy. PyTorch (after NVIDIA Apex) caches the low-precision
copy of a tensor when the tensor looks like a *model weight*:

* the cast goes to the region's low-precision dtype,
* the source is float32, requires grad, is a leaf and not a view (an ``nn.Parameter``),
* the region has ``cache_enabled=True`` (the default),
* the tensor is not one of torch's "cached tensors" (``torch._C._add_cached_tensor``, the
  tensors a CUDA graph's memory pool owns): torch never caches casts of those.

The cache lives until the *outermost* autocast region exits. That lifetime is the source of two
classic traps (both shown in lesson 05):

1. a ``torch.no_grad()`` forward followed by a grad forward in the same region: a naive cache
   stores the copy made without autograd history, the second forward reuses it, and no gradient
   reaches the weight (pytorch/pytorch#112583, #65766). PyTorch fixed this (PR #165068): the
   cached copy is always made *with* grad mode on, so it carries its ``ToCopyBackward`` edge to
   the weight whichever forward made it; and nothing is cached in ``torch.inference_mode()``.
   We do the same.
2. weights updated in place (``optimizer.step()``) inside one long region: the next forward still
   uses the cached copy of the *old* weights. Still true in PyTorch: exit the region (or use
   ``cache_enabled=False``) between such steps.

Keys are the target dtype and the source tensor's ``id`` (one dict per dtype). The entry also holds
the source tensor itself, so the ``id`` cannot be reused by another tensor while it is cached
(torch keys by the TensorImpl pointer and holds a weak reference; holding the weight until the
region exits costs nothing, since its low-precision copy is held anyway and the model holds the
weight).
"""

from __future__ import annotations

import torch

__all__ = ["WeightCache", "cacheable"]


def cacheable(t: torch.Tensor, to: torch.dtype, low_dtype: torch.dtype) -> bool:
    """Would torch cache the cast of ``t`` to ``to`` in a region whose low-precision dtype is ``low_dtype``?"""
    return (to == low_dtype and t.dtype == torch.float32 and t.requires_grad and t.is_leaf
            and not t._is_view() and not torch._C._is_cached_tensor(t))


# Tensor.bfloat16() / .half() / .float() are Tensor.to(dtype) with less argument parsing
_CAST_METHOD = {torch.bfloat16: torch.Tensor.bfloat16, torch.float16: torch.Tensor.half,
                torch.float32: torch.Tensor.float}


def _plain_to(t: torch.Tensor, to: torch.dtype) -> torch.Tensor:
    method = _CAST_METHOD.get(to)
    return method(t) if method is not None else t.to(dtype=to)


class WeightCache:
    """Low-precision copies of weights, reused within one autocast region."""

    def __init__(self):
        # target dtype -> {id(source): (source, copy)}; the inner dicts live as long as the cache
        self._stores: dict[torch.dtype, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}
        self.hits = 0
        self._casters: dict = {}

    def _store(self, to: torch.dtype) -> dict:
        store = self._stores.get(to)
        if store is None:
            store = self._stores[to] = {}
        return store

    def __len__(self) -> int:
        return sum(len(store) for store in self._stores.values())

    def cast(self, t: torch.Tensor, to: torch.dtype, *, low_dtype: torch.dtype, enabled: bool = True):
        """``t.to(to)``, served from the cache when ``t`` is a cacheable weight."""
        if not (enabled and cacheable(t, to, low_dtype)) or torch.is_inference_mode_enabled():
            return t.to(to)
        store = self._store(to)
        hit = store.get(id(t))
        if hit is not None and hit[0] is t:
            self.hits += 1
            return hit[1]
        if torch.is_grad_enabled():
            out = t.to(to)
        else:
            with torch.enable_grad():      # keep the autograd edge even in a no_grad forward
                out = t.to(to)
        store[id(t)] = (t, out)
        return out

    def caster(self, low_dtype: torch.dtype, enabled: bool = True):
        """``cast(t, to)`` for a region whose low-precision dtype is ``low_dtype``: :meth:`cast` with
        its arguments bound, made once per setting (the mode's hot path calls it per tensor).
        The caller passes ``enabled=False`` in inference mode (it checks once per op, not per tensor)."""
        key = (low_dtype, enabled)
        fn = self._casters.get(key)
        if fn is not None:
            return fn
        if not enabled:
            fn = _plain_to
        else:
            store, f32, is_cached, methods = self._store(low_dtype), torch.float32, torch._C._is_cached_tensor, _CAST_METHOD
            grad_on = torch.is_grad_enabled

            low_method = methods.get(low_dtype) or (lambda t: t.to(dtype=low_dtype))

            def fn(t, to):
                if (to is low_dtype and t.requires_grad and t.is_leaf and t.dtype is f32 and not t._is_view()
                        and not is_cached(t)):
                    hit = store.get(id(t))
                    if hit is not None and hit[0] is t:
                        self.hits += 1
                        return hit[1]
                    if grad_on():
                        out = low_method(t)
                    else:
                        with torch.enable_grad():      # a no_grad forward: keep the autograd edge anyway
                            out = low_method(t)
                    store[id(t)] = (t, out)
                    return out
                method = methods.get(to)
                return method(t) if method is not None else t.to(dtype=to)
        self._casters[key] = fn
        return fn

    def clear(self) -> None:
        """Forget every cached copy (called when the outermost region exits)."""
        for store in self._stores.values():
            store.clear()
