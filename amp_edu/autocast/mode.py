"""``autocast``: PyTorch's autocast rebuilt as a ``TorchFunctionMode``, above autograd.

PyTorch implements autocast in the C++ dispatcher, in a layer that runs *before* autograd: the
casts are ordinary differentiable ops, so autograd records them and the backward pass sees (and
saves) the fp16/bf16 copies. A ``torch.overrides.TorchFunctionMode`` sits at the same place from
Python: every call of a torch function (``torch.mm``, ``F.linear``, ``x @ w``, ``x.softmax(-1)``)
goes to the mode's ``__torch_function__`` first, which may change the arguments before calling
the real op — and whatever it calls is recorded by autograd as usual.

The mode does three things per call:

1. **Python-level functions** (``F.softmax``, ``F.normalize``, ``nn.MultiheadAttention``'s
   ``multi_head_attention_forward``) are not ops but compositions of ops. The mode re-runs them
   with itself still active (skipping one hop of ``__torch_function__``), so the ops *inside* are
   autocast one by one — just as the dispatcher sees the inner ops of a composite in torch.
2. **Ops in the region's policy table** (``policy.py``) get their arguments cast by
   ``policy.decide``; casts of weights go through the region's ``WeightCache``.
3. **Everything else** runs untouched.

State is thread-local, like torch's: each thread has its own enabled flag, dtype and policy per
device type, cache switch, nesting depth and weight cache. Regions nest; the cache is cleared when
the outermost region of a thread exits. PyTorch's own autocast stays off throughout
(``torch.is_autocast_enabled()`` is False inside ``amp_edu.autocast``).

Where we differ from torch by construction (besides the op-level notes in ``policy.py``):

* ``backward()`` called *inside* a region: torch's autocast also reaches the C++ backward kernels
  (that is why torch advises against it); a TorchFunctionMode sees only Python-level code, so here
  only the ``backward`` of custom autograd Functions written in Python is autocast.
* torch keeps one weight cache for the whole process (cleared when any thread's outermost region
  exits); ours is per thread.
* Skipping one hop of ``__torch_function__`` uses ``torch._C._skip_one_hop_torch_function``
  where torch has it; on older torch, :func:`redispatch` runs a copy of the Python function whose
  own ``has_torch_function`` checks are switched off (the functions it calls still check).
"""

from __future__ import annotations

import functools
import threading
import types
import warnings
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .cache import WeightCache
from .policy import POLICIES, _kind_unchecked, decide, op_name

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "get_autocast_policy",
           "is_autocast_cache_enabled", "redispatch"]

DEVICE_TYPES = ("cpu", "cuda")
_DEFAULT_DTYPE = {"cpu": torch.bfloat16, "cuda": torch.float16}
_CPU_DTYPES = (torch.bfloat16, torch.float16)


class _State(threading.local):
    """One thread's autocast state (a fresh thread starts with autocast off)."""

    def __init__(self):
        self.enabled = {d: False for d in DEVICE_TYPES}
        self.dtype = dict(_DEFAULT_DTYPE)
        self.policy = {d: d for d in DEVICE_TYPES}
        self.cache_enabled = True
        self.nesting = 0
        self.cache = WeightCache()
        self.mode: _AutocastMode | None = None
        self.opening: list = []   # Python-level functions being run with the mode active


_STATE = _State()


def _check_device_type(device_type: Any) -> str:
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"amp_edu.autocast supports device_type 'cpu' or 'cuda', got {device_type!r}")
    return device_type


def is_autocast_enabled(device_type: str) -> bool:
    """Is ``amp_edu.autocast`` enabled for ``device_type`` in this thread?"""
    return _STATE.enabled[_check_device_type(device_type)]


def get_autocast_dtype(device_type: str) -> torch.dtype:
    """The low-precision dtype ``amp_edu.autocast`` uses for ``device_type`` (default: fp16 on cuda,
    bf16 on cpu, like torch)."""
    return _STATE.dtype[_check_device_type(device_type)]


def get_autocast_policy(device_type: str) -> str:
    """Which op table (``'cuda'`` or ``'cpu'``) the current region uses for ``device_type``."""
    return _STATE.policy[_check_device_type(device_type)]


def is_autocast_cache_enabled() -> bool:
    """Is the weight-cast cache on in the current region (default True)?"""
    return _STATE.cache_enabled


# ----------------------------------------------------------------------------------------------
# Routing: what the mode does with each callable it is handed.

_DIRECT, _OPEN = object(), object()
# Python-level functions that are not computations to autocast: run them as they are.
_NEVER_OPEN = {torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad,
               torch.Tensor.__repr__, torch.Tensor.__format__, torch.Tensor.__deepcopy__,
               torch.Tensor.__reduce_ex__, torch.Tensor.register_hook}
_ROUTES: dict[Any, Any] = {}


def _route(func):
    """``_OPEN`` for a Python-level composite, an op name for a listed op, else ``_DIRECT``."""
    target = func.__func__ if isinstance(func, types.MethodType) else func
    if isinstance(target, types.FunctionType) and func not in _NEVER_OPEN:
        return _OPEN
    return op_name(func) or _DIRECT


_SKIP_ONE_HOP = getattr(torch._C, "_skip_one_hop_torch_function", None)
_CHECK_NAMES = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")


def _never(*_args, **_kwargs) -> bool:
    return False


@functools.lru_cache(maxsize=None)
def _unchecked(fn: types.FunctionType):
    """A copy of Python function ``fn`` whose own ``has_torch_function*`` checks say False.

    Fallback for torch versions without ``torch._C._skip_one_hop_torch_function``: the copy runs
    ``fn``'s body once without handing itself back to the mode; the functions it calls still check
    (and so still reach the mode). None if ``fn`` does not use these names.
    """
    used = [n for n in _CHECK_NAMES if n in fn.__code__.co_names]
    if not used:
        return None
    g = dict(fn.__globals__)
    g.update({n: _never for n in used})
    copy = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def redispatch(func, types_, args, kwargs):
    """Run Python-level ``func`` skipping one hop of ``__torch_function__`` (the mode stays active)."""
    if _SKIP_ONE_HOP is not None:
        return _SKIP_ONE_HOP(func, types_, args, kwargs)
    target, bound = (func.__func__, func.__self__) if isinstance(func, types.MethodType) else (func, None)
    body = _unchecked(target)
    if body is None:
        return func(*args, **kwargs)
    return body(bound, *args, **kwargs) if bound is not None else body(*args, **kwargs)


def _autocast_device(args, kwargs, enabled):
    """The device type of the first tensor argument on a device where autocast is enabled."""
    if args and isinstance(args[0], torch.Tensor):          # the usual case, checked first
        first = args[0].device.type
        if enabled.get(first):
            return first
    stack = [args, tuple(kwargs.values())]
    while stack:
        for item in stack.pop():
            if isinstance(item, torch.Tensor):
                if enabled.get(item.device.type):
                    return item.device.type
            elif isinstance(item, (list, tuple)):
                stack.append(item)
    return None


class _AutocastMode(TorchFunctionMode):
    """The TorchFunctionMode behind ``autocast``; one per thread, pushed by the outermost region."""

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = _ROUTES.get(func)
        if route is None:
            route = _route(func)
            if not isinstance(func, types.MethodType):
                _ROUTES[func] = route
        st = _STATE
        if route is _OPEN:
            if func not in st.opening:
                st.opening.append(func)
                try:
                    with self:
                        return redispatch(func, types_, args, kwargs)
                finally:
                    st.opening.pop()
            # A Python override (Tensor.unflatten) calling its C implementation (super().unflatten)
            # hands itself to the mode again: treat this inner call as the op itself.
            route = op_name(func) or _DIRECT
        if route is _DIRECT:
            return func(*args, **kwargs)
        if kwargs.get("out") is not None:          # out= overloads are not autocast
            return func(*args, **kwargs)
        device = _autocast_device(args, kwargs, st.enabled)
        if device is None:
            return func(*args, **kwargs)
        kind = _kind_unchecked(st.policy[device], route, args, kwargs)
        if kind is None:
            return func(*args, **kwargs)
        lower = st.dtype[device]
        args, kwargs = decide(kind, args, kwargs, device_type=device, dtype=lower,
                              cast=st.cache.caster(lower, st.cache_enabled))
        return func(*args, **kwargs)


class autocast:
    """Run a region in mixed precision, casting op by op like ``torch.autocast`` — from scratch.

    >>> with autocast("cpu"):                                   # doctest: +SKIP
    ...     y = model(x)          # matmuls in bf16, losses in fp32
    >>> with autocast("cpu", dtype=torch.float16, policy="cuda"):   # doctest: +SKIP
    ...     y = model(x)          # the CUDA fp16 op table, studied on a CPU

    Args: ``device_type`` ('cpu' or 'cuda'); ``dtype`` the low-precision dtype (default
    fp16 for cuda, bf16 for cpu); ``enabled``; ``cache_enabled`` (the weight-cast cache,
    default on); ``policy`` ('cuda' or 'cpu', the op table; default: the device's own).
    Usable as a context manager or a decorator. Unsupported dtypes warn and disable the region
    (cpu) or raise (bf16 on a GPU without it), with torch's messages.
    """

    def __init__(self, device_type: str, dtype: torch.dtype | None = None, enabled: bool = True,
                 cache_enabled: bool | None = None, policy: str | None = None):
        self.device = _check_device_type(device_type)
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype (e.g. torch.bfloat16) or None, got {dtype!r}")
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be True or False, got {enabled!r}")
        if cache_enabled is not None and not isinstance(cache_enabled, bool):
            raise TypeError(f"cache_enabled must be True, False or None, got {cache_enabled!r}")
        if policy is not None and policy not in POLICIES:
            raise ValueError(f"policy must be one of {sorted(POLICIES)} or None, got {policy!r}")
        self.fast_dtype = get_autocast_dtype(device_type) if dtype is None else dtype
        self.policy = policy or device_type
        self._cache_enabled = is_autocast_cache_enabled() if cache_enabled is None else cache_enabled
        if enabled and self.device == "cuda":
            if not torch.cuda.is_available():
                warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.",
                              stacklevel=2)
                enabled = False
            elif self.fast_dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
                raise RuntimeError("Current CUDA Device does not support bfloat16. "
                                   "Please switch dtype to float16.")
        elif enabled and self.fast_dtype not in _CPU_DTYPES:
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                          "CPU Autocast only supports dtypes of torch.bfloat16, torch.float16 currently.",
                          stacklevel=2)
            enabled = False
        self._enabled = enabled
        self._saved: list[tuple] = []   # a stack, so one instance can be re-entered (decorators)

    def __enter__(self):
        st, d = _STATE, self.device
        self._saved.append((st.enabled[d], st.dtype[d], st.policy[d], st.cache_enabled))
        st.enabled[d], st.dtype[d], st.policy[d] = self._enabled, self.fast_dtype, self.policy
        st.cache_enabled = self._cache_enabled
        st.nesting += 1
        if st.mode is None:
            st.mode = _AutocastMode()
            st.mode.__enter__()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        st, d = _STATE, self.device
        st.nesting -= 1
        if st.nesting == 0:
            st.cache.clear()
            mode, st.mode = st.mode, None
            mode.__exit__(exc_type, exc_val, exc_tb)
        st.enabled[d], st.dtype[d], st.policy[d], st.cache_enabled = self._saved.pop()
        return False

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"autocast()(func) requires a callable, but got {type(func).__name__}. "
                            "Did you mean to use autocast as a context manager? For example:\n"
                            "    with autocast(device_type=...):\n        output = model(input)")

        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return decorate_autocast

    def __repr__(self) -> str:
        return (f"amp_edu.autocast(device_type={self.device!r}, dtype={self.fast_dtype}, "
                f"enabled={self._enabled}, cache_enabled={self._cache_enabled}, policy={self.policy!r})")


def _cache_for_tests() -> WeightCache:
    """This thread's weight cache (for tests and the lesson's cache experiments)."""
    return _STATE.cache
