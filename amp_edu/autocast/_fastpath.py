"""Private: the mode's hot path, the casts of one ``lower``/``fp32`` op on CPU tensors in one loop.

Not lesson code: :meth:`amp_edu.autocast.mode._AutocastMode.general` is the readable path, and
this module only takes shortcuts where it makes the same decisions.

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
general path. :func:`lower_or_fp32_on_cpu` is the mode's entry: it checks that the call is the
common one (CPU autocast on and CUDA's off, positional tensors, an unconditional entry of the CPU
table), casts with :func:`cast_positional` and runs the op with torch's own ``AutocastCPU`` key
excluded by flipping its exclusion bit directly (a third of the cost of a guard object). ``tests/autocast/test_fastpath.py`` checks that both paths return the same tensors and
leave the same cache behind on every combination of these properties.
"""

from __future__ import annotations

import torch

from .cache import CAST_METHOD, WeightCache
from .policy import ELIGIBLE_DTYPES, LOWER

__all__ = ["cast_positional", "lower_or_fp32_on_cpu", "MISS", "PLAIN_TENSORS"]

#: the tensor types the hot path handles (``type(t) in PLAIN_TENSORS`` is cheaper than isinstance)
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)

_F32 = torch.float32
_is_cached = torch._C._is_cached_tensor
_grad_on = torch.is_grad_enabled
# torch's autocast state read and written by enum, without parsing a device string: the hot path's
# spelling of ``is_autocast_enabled("cpu")`` and ``set_autocast_enabled("cpu", not excluded)``
_excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
_set_excluded = torch._C._dispatch_tls_set_dispatch_key_excluded
_CPU_KEY, _CUDA_KEY = torch._C.DispatchKey.AutocastCPU, torch._C.DispatchKey.AutocastCUDA
_get_dtype = torch._C.get_autocast_dtype
_cache_on = torch._C.is_autocast_cache_enabled
_inference = torch.is_inference_mode_enabled
#: what :func:`lower_or_fp32_on_cpu` returns for a call it leaves to the general path
MISS = object()


def _no_tensors(kwargs: dict) -> bool:
    """No keyword argument is a tensor or a container that may hold one (``out=`` is a tensor)."""
    for v in kwargs.values():
        if isinstance(v, (torch.Tensor, list, tuple, dict)):
            return False
    return True


def lower_or_fp32_on_cpu(mode, func, route: str, kind, args: tuple, kwargs: dict | None):
    """``func(*args, **kwargs)`` with the casts the general path would make, for a ``lower`` or
    ``fp32`` entry ``route`` of the CPU table on positional CPU tensors; :data:`MISS` for any
    other call. With CUDA autocast off, the op's autocast device is the CPU if any tensor argument
    is on it (``mode.autocast_device``), and only CPU tensors are cast: the loop decides both."""
    if not args or (kwargs and not _no_tensors(kwargs)) or route in mode.cpu_conditional:
        return MISS
    if not (_excluded(_CUDA_KEY) and not _excluded(_CPU_KEY)):      # CPU autocast on, CUDA off
        return MISS
    if kind is LOWER:
        low_dtype = _get_dtype("cpu")
        cast = cast_positional(mode.cache, args, low_dtype, low_dtype, _cache_on() and not _inference())
    else:
        cast = cast_positional(mode.cache, args, _F32, None, False)
    if cast is None:
        return MISS
    if mode.own_policy and route not in mode.registered_cpu:
        return func(*cast, **kwargs) if kwargs else func(*cast)
    _set_excluded(_CPU_KEY, True)     # exclude torch's AutocastCPU key (see mode.py's docstring)
    try:
        return func(*cast, **kwargs) if kwargs else func(*cast)
    finally:
        _set_excluded(_CPU_KEY, False)


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
