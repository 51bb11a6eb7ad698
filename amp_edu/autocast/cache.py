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

__all__ = ["WeightCache", "cacheable", "plain_cast", "CAST_METHOD"]


def cacheable(t: torch.Tensor, to: torch.dtype, low_dtype: torch.dtype) -> bool:
    """Would torch cache the cast of ``t`` to ``to`` in a region whose low-precision dtype is ``low_dtype``?"""
    return (to == low_dtype and t.dtype == torch.float32 and t.requires_grad and t.is_leaf
            and not t._is_view() and not torch._C._is_cached_tensor(t))


# Tensor.bfloat16() / .half() / .float() are Tensor.to(dtype) with less argument parsing
CAST_METHOD = {torch.bfloat16: torch.Tensor.bfloat16, torch.float16: torch.Tensor.half,
               torch.float32: torch.Tensor.float}


def plain_cast(t: torch.Tensor, to: torch.dtype) -> torch.Tensor:
    """``t.to(to)``, by the cheapest call that does it (autocast's default cast)."""
    method = CAST_METHOD.get(to)
    return method(t) if method is not None else t.to(dtype=to)


def _caster_to(to: torch.dtype):
    """A one-argument ``t -> t.to(to)`` (a C method where there is one: no Python frame per cast)."""
    return CAST_METHOD.get(to) or (lambda t: t.to(dtype=to))


class WeightCache:
    """Low-precision copies of weights, reused within one autocast region."""

    def __init__(self):
        # target dtype -> {id(source): (source, copy)}; the inner dicts live as long as the cache
        self._stores: dict[torch.dtype, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}
        self.hits = 0
        self._casters: dict = {}

    def store(self, to: torch.dtype) -> dict:
        """The ``{id(source): (source, copy)}`` dict of casts to ``to`` (made on first use)."""
        store = self._stores.get(to)
        if store is None:
            store = self._stores[to] = {}
        return store

    def __len__(self) -> int:
        return sum(len(store) for store in self._stores.values())

    def cast(self, t: torch.Tensor, to: torch.dtype, *, low_dtype: torch.dtype, enabled: bool = True):
        """``t.to(to)``, served from the cache when ``t`` is a cacheable weight."""
        if not (enabled and cacheable(t, to, low_dtype)) or torch.is_inference_mode_enabled():
            return plain_cast(t, to)
        store = self.store(to)
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

    def caster(self, low_dtype: torch.dtype, to: torch.dtype, enabled: bool = True):
        """``cast(t)``: ``t.to(to)`` in a region whose low-precision dtype is ``low_dtype`` -- :meth:`cast`
        with its arguments bound, made once per setting, since the mode's hot path calls it per tensor.

        Only casts *to* ``low_dtype`` are ever cached, so every other target gets the plain C method
        (``Tensor.float``). The caller passes ``enabled=False`` when the region's cache is off or in
        inference mode (it checks once per op, not per tensor).
        """
        key = (low_dtype, to, enabled)
        fn = self._casters.get(key)
        if fn is not None:
            return fn
        plain = _caster_to(to)
        if not enabled or to != low_dtype:
            fn = plain
        else:
            store, f32, is_cached, grad_on = self.store(low_dtype), torch.float32, torch._C._is_cached_tensor, torch.is_grad_enabled

            def fn(t):
                # cacheable(t, to, low_dtype), cheapest test first (activations rarely require grad
                # *and* are leaves; weights always are)
                if not (t.requires_grad and t.is_leaf and t.dtype is f32 and not t._is_view()
                        and not is_cached(t)):
                    return plain(t)
                hit = store.get(id(t))
                if hit is not None and hit[0] is t:
                    self.hits += 1
                    return hit[1]
                if grad_on():
                    out = plain(t)
                else:
                    with torch.enable_grad():      # a no_grad forward: keep the autograd edge anyway
                        out = plain(t)
                store[id(t)] = (t, out)
                return out
        self._casters[key] = fn
        return fn

    def clear(self) -> None:
        """Forget every cached copy (called when the outermost region exits)."""
        for store in self._stores.values():
            store.clear()
