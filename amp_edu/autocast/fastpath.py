"""The mode's hot path: the casts of one ``lower``/``fp32`` op on CPU tensors, in one loop.

A training step of a small model makes a few dozen autocast decisions, and on a CPU each costs about
as much as the tiny op it decides for, so the per-call Python is what a learner measures when they
compare this autocast with torch's (``python -m amp_edu.bench.autocast_overhead``). The general
path spends it on generality: :func:`policy.cast_arguments` walks nested lists and keyword
arguments and calls :meth:`WeightCache.caster`'s function once per tensor, which re-reads what the
walk has just read. :func:`cast_positional` makes the *same* decisions for the common call (plain
tensors, positional, on the CPU) with each tensor's properties read once:

1. eligible (``policy.is_eligible``): floating, not float64, on the CPU, and not already ``to``;
2. cacheable (``cache.cacheable``): the cast goes to the region's low dtype, the source is a
   float32 leaf that requires grad, is not a view and is not one of torch's cached tensors;
3. then the region's :class:`~amp_edu.autocast.cache.WeightCache` store is asked, and filled on a
   miss, exactly as :meth:`WeightCache.caster` does (with grad mode on, see ``cache.py``).

Anything else (a list of tensors, a tensor subclass, a keyword tensor) returns None and takes the
general path. ``tests/test_autocast_fastpath.py`` checks that both paths return the same tensors and
leave the same cache behind on every combination of these properties.
"""

from __future__ import annotations

import torch

from .cache import CAST_METHOD, WeightCache
from .policy import ELIGIBLE_DTYPES

__all__ = ["cast_positional", "PLAIN_TENSORS"]

#: the tensor types the hot path handles (``type(t) in PLAIN_TENSORS`` is cheaper than isinstance)
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)

_F32 = torch.float32
_is_cached = torch._C._is_cached_tensor
_grad_on = torch.is_grad_enabled


def cast_positional(cache: WeightCache, args: tuple, to: torch.dtype, low_dtype: torch.dtype | None,
                    cache_on: bool) -> tuple | None:
    """``args`` with every eligible CPU tensor cast to ``to`` (cached weights from ``cache`` when
    ``cache_on`` and ``to`` is ``low_dtype``), or None if an argument needs the general path."""
    store = cache.store(low_dtype) if cache_on and to is low_dtype else None
    plain = CAST_METHOD.get(to)
    if plain is None:
        return None
    out = []
    for a in args:
        if type(a) in PLAIN_TENSORS:
            dt = a.dtype
            if dt is not to and dt in ELIGIBLE_DTYPES and a.is_cpu:
                if (store is not None and dt is _F32 and a.requires_grad and a.is_leaf
                        and not a._is_view() and not _is_cached(a)):
                    hit = store.get(id(a))
                    if hit is not None and hit[0] is a:
                        cache.hits += 1
                        a = hit[1]
                    else:
                        if _grad_on():
                            copy = plain(a)
                        else:
                            with torch.enable_grad():      # keep the autograd edge (cache.py)
                                copy = plain(a)
                        store[id(a)] = (a, copy)
                        a = copy
                else:
                    a = plain(a)
        elif isinstance(a, (torch.Tensor, list, tuple)):
            return None
        out.append(a)
    return tuple(out)
