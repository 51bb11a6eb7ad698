"""The autocast mode: a ``TorchFunctionMode`` that casts each op's arguments, above autograd.

PyTorch implements autocast in the C++ dispatcher, in a layer that runs *before* autograd: the
casts are ordinary differentiable ops, so autograd records them and the backward pass sees (and
saves) the fp16/bf16 copies. A ``torch.overrides.TorchFunctionMode`` sits at the same place from
Python: every call of a torch function (``torch.mm``, ``F.linear``, ``x @ w``, ``x.softmax(-1)``)
goes to the mode's ``__torch_function__`` first, which may change the arguments before calling
the real op — and whatever it calls is recorded by autograd as usual. A region
(:class:`~amp_edu.autocast.region.autocast`) pushes one such mode per thread; this module is what it
does with each call, in :meth:`_AutocastMode.general`, written to be read:

1. find the call's **route** (:mod:`.routes`): a Python-level function is re-run with the mode
   still active (:func:`redispatch`), so the ops inside it are autocast one by one;
2. for an op that the region's policy table lists (:mod:`.policy`), find the tensor's **autocast
   device** (:func:`autocast_device`) and let ``policy.decide`` cast the arguments; casts of
   weights go through the thread's weight cache (:mod:`.cache`);
3. **run the op with torch's autocast switched off for it** (:meth:`_AutocastMode.excluded`), so
   torch's own kernels do not cast a second time; everything else runs untouched.

The most common call (a ``lower``/``fp32`` op on plain CPU tensors passed positionally, like
``nn.Linear``'s) takes a shortcut in the private :mod:`amp_edu.autocast._fastpath`: the same
decisions in one loop that reads each tensor's properties once, because on a small model this
Python is the whole cost of the region (``python -m amp_edu.bench.autocast_overhead``;
``tests/autocast/test_fastpath.py`` proves both paths agree).

Why step 3: torch's switch is torch's state
-------------------------------------------
A region writes torch's own autocast state (:mod:`.state`), so that library code asking torch sees
it. But torch's enabled flag *is* its dispatcher switch: ``is_autocast_enabled(device)`` means "the
``AutocastCPU`` (``AutocastCUDA``) dispatch key is not excluded in this thread", so with the flag
on, torch's C++ autocast kernels would cast too and hide our policy behind theirs. The mode
therefore runs each op that torch's autocast registers (``routes.TORCH_REGISTERED``) with the
autocast keys excluded (``torch._C._ExcludeDispatchKeyGuard``; the fast path flips the CPU key's
exclusion bit directly): torch's autocast kernel is skipped for that call, exactly as torch's own
autocast kernel excludes its key before it redispatches to the real op. Ops torch does *not*
register are fall-throughs for torch's autocast layer, so they run as they are — and that is
where the last piece sits:

* **C++ composites.** An unregistered op implemented in C++ by calling registered ones
  (``torch.lstm`` reaching ``mkldnn_rnn_layer``, the RNN cells and ``gru`` reaching ``linear``,
  ``matrix_power`` and ``inner`` reaching ``mm``, the TransformerEncoderLayer fast path
  ``_transformer_encoder_layer_fwd`` reaching ``_native_multi_head_attention``) calls its parts
  inside C++, where no TorchFunctionMode can see them. With torch's state on, the dispatcher-level
  autocast casts those parts — by torch's table for the device, which is the region's table when
  the region uses the device's own policy (the default). So the results equal torch's, and this
  is the one place where torch's casting, not ours, is at work.
* With a region whose policy is *not* the device's own (``policy="cuda"`` on CPU tensors, to study
  the CUDA table on a laptop), torch's table would be the wrong one. Then every op runs with the
  autocast keys excluded: pure amp_edu, and the parts of C++ composites run uncast. The known
  composites (``routes.COMPOSITE_OPS``) warn once each, naming the op, so that difference is never
  silent.

Where we differ from torch by construction (besides the op-level notes in ``policy.py``):

* ``backward()`` called *inside* a region: like torch, the C++ backward kernels run with the
  region's state (torch's dispatcher-level autocast casts them, as it would under
  ``torch.autocast``; torch advises against it). The backward of custom autograd Functions written
  in Python is cast by the mode.
* ``torch.utils.checkpoint`` recomputes under ``torch.autocast`` with the state it saved (enabled,
  dtype, cache): the device's own table, which is the region's under the default policy. Under a
  foreign policy the recompute uses torch's table instead (the non-reentrant checkpoint then
  reports the changed dtypes as a CheckpointError); checkpoint with the device's own policy.
* TorchScript code (``torch.jit.script``) runs below the Python layer, so no TorchFunctionMode
  sees it; torch's dispatcher-level autocast casts it, by torch's table for the device.
* torch keeps one weight cache for the whole process (cleared when any thread's outermost region
  exits); ours is per thread, and keyed by tensor *and* dtype (see ``cache.py``).
* Skipping one hop of ``__torch_function__`` uses ``torch._C._skip_one_hop_torch_function``
  where torch has it; on older torch, :func:`redispatch` runs a copy of the Python function whose
  own ``has_torch_function`` checks are switched off (the functions it calls still check).
"""

from __future__ import annotations

import functools
import types
import warnings

import torch
from torch.overrides import TorchFunctionMode

from . import _fastpath
from .policy import CONDITIONAL, FP32, LOWER, POLICIES, decide, lookup
from .routes import OPEN, TORCH_REGISTERED, route_as_op, route_of
from .state import _STATE, _State

__all__ = ["autocast_device", "redispatch"]

# the dispatch keys of torch's own autocast, excluded while an op the mode decided on runs
_AUTOCAST_KEYS = (torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
                  | torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA))
_is_enabled = torch._C.is_autocast_enabled
_get_dtype = torch._C.get_autocast_dtype
_cache_on = torch._C.is_autocast_cache_enabled
_inference = torch.is_inference_mode_enabled
_UNSEEN = object()
_ROUTES: dict = {}        # callable -> its route (routes.route_of), found once


class _AutocastMode(TorchFunctionMode):
    """The TorchFunctionMode behind ``autocast``; one per thread, pushed by the outermost region.

    ``own_policy`` is True while every device's region uses that device's own table, so torch's
    dispatcher-level autocast may cast the parts of C++ composites (see the module docstring).
    """

    def __init__(self, state: _State):
        super().__init__()
        self.own_policy = True
        self.policy = state.policy            # this thread's per-device tables (shared dict)
        self.cpu_table = POLICIES["cpu"]         # the table of CPU tensors' region (the hot path's)
        self.cpu_conditional = CONDITIONAL["cpu"]
        self.registered_cpu = TORCH_REGISTERED["cpu"]   # ops torch's AutocastCPU kernel casts
        self.cache = state.cache
        self.opening = state.opening
        self._guard = torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS)   # reusable, not re-entrant
        self._guard_busy = False

    def refresh(self) -> None:
        """Re-read the thread's policies (a region opened or closed)."""
        self.own_policy = self.policy["cpu"] == "cpu" and self.policy["cuda"] == "cuda"
        self.cpu_table = POLICIES[self.policy["cpu"]]
        self.cpu_conditional = CONDITIONAL[self.policy["cpu"]]

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        route = _ROUTES.get(func, _UNSEEN)
        if route is _UNSEEN:
            route = route_of(func)
            if not isinstance(func, types.MethodType):
                _ROUTES[func] = route
        kind = self.cpu_table.get(route) if type(route) is str else None
        if kind is LOWER or kind is FP32:
            # the commonest call (a lower/fp32 op on plain CPU tensors), fast: the decisions of
            # general() below, in the order that reads the fewest properties (_fastpath.py)
            result = _fastpath.lower_or_fp32_on_cpu(self, func, route, kind, args, kwargs)
            if result is not _fastpath.MISS:
                return result
        return self.general(func, types_, route, args, kwargs)

    def general(self, func, types_, route, args, kwargs):
        """What the mode does with one call of ``func`` (its ``route`` already found): the
        readable path, which every call could take; the fast one above takes a shortcut only
        where it makes these same decisions (``tests/autocast/test_fastpath.py``)."""
        if route is None:
            if self.own_policy:
                return func(*args, **kwargs) if kwargs else func(*args)
            return self.excluded(func, args, kwargs or {})
        if kwargs is None:
            kwargs = {}
        elif kwargs.get("out") is not None and type(route) is str:    # out= overloads are not autocast
            return self.excluded(func, args, kwargs)
        if route is OPEN:
            if func not in self.opening:
                return self.open(func, types_, args, kwargs)
            # A Python override (Tensor.unflatten) calling its C implementation (super().unflatten)
            # hands itself to the mode again: treat this inner call as the op itself.
            route = route_as_op(func)
            if route is None:
                return func(*args, **kwargs)
        if type(route) is tuple:                        # a known C++ composite
            if self.own_policy:
                return func(*args, **kwargs)
            _warn_composite(route[1], args, kwargs)
            return self.excluded(func, args, kwargs)
        # an op a table lists or torch registers: cast by the table of its autocast device
        device = autocast_device(args, kwargs)
        if device is None:
            return func(*args, **kwargs)
        args, kwargs = self.cast(device, route, args, kwargs)
        if self.own_policy and route not in TORCH_REGISTERED[device]:
            return func(*args, **kwargs)
        return self.excluded(func, args, kwargs)

    def open(self, func, types_, args, kwargs):
        """Run Python-level ``func`` with the mode still active, so the ops inside it reach the mode."""
        if func is _MHA_FORWARD:
            _warn_fast_path(args, kwargs)
        self.opening.append(func)
        try:
            with self:
                return redispatch(func, types_, args, kwargs)
        finally:
            self.opening.pop()

    def cast(self, device: str, route: str, args, kwargs):
        """The arguments op ``route`` runs with on ``device``: cast as the region's table says."""
        table = self.policy[device]
        kind = POLICIES[table].get(route)
        if kind is not None and route in CONDITIONAL[table]:
            kind = lookup(table, route, args, kwargs)
        if kind is None:
            return args, kwargs
        low_dtype = _get_dtype(device)
        cache_on = _cache_on() and not _inference()      # inference tensors are never cached
        return decide(kind, args, kwargs, device_type=device, dtype=low_dtype,
                      cast=lambda t, to: self.cache.caster(low_dtype, to, cache_on)(t))

    def excluded(self, func, args, kwargs):
        """``func(*args, **kwargs)`` with torch's autocast keys excluded (its kernels are skipped),
        as torch's own autocast kernels exclude their key before they redispatch."""
        if self._guard_busy:                  # re-entered from inside an op: a fresh guard
            with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
                return func(*args, **kwargs)
        self._guard_busy = True
        try:
            with self._guard:
                return func(*args, **kwargs)
        finally:
            self._guard_busy = False


def autocast_device(args, kwargs):
    """The device type of the first tensor argument on a device where autocast is enabled."""
    if args:
        first = args[0]
        if isinstance(first, torch.Tensor):              # the usual case, checked first
            if first.is_cpu:
                if _is_enabled("cpu"):
                    return "cpu"
            elif first.is_cuda and _is_enabled("cuda"):
                return "cuda"
    stack = [args, tuple(kwargs.values())]
    while stack:
        for item in stack.pop():
            if isinstance(item, torch.Tensor):
                d = "cpu" if item.is_cpu else "cuda" if item.is_cuda else None
                if d is not None and _is_enabled(d):
                    return d
            elif isinstance(item, (list, tuple)):
                stack.append(item)
    return None


# --- re-running a Python-level function with the mode active -----------------------------------

_SKIP_ONE_HOP = getattr(torch._C, "_skip_one_hop_torch_function", None)
_CHECK_NAMES = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")


def redispatch(func, types_, args, kwargs):
    """Run Python-level ``func`` skipping one hop of ``__torch_function__`` (the mode stays active)."""
    if _SKIP_ONE_HOP is not None:
        return _SKIP_ONE_HOP(func, types_, args, kwargs)
    target, bound = (func.__func__, func.__self__) if isinstance(func, types.MethodType) else (func, None)
    body = _unchecked(target)
    if body is None:
        return func(*args, **kwargs)
    return body(bound, *args, **kwargs) if bound is not None else body(*args, **kwargs)


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


# --- the two differences from torch that the mode says out loud --------------------------------

_MHA_FORWARD = torch.nn.functional.multi_head_attention_forward
_FAST_PATH_MESSAGE = (
    "amp_edu.autocast: attention (nn.MultiheadAttention, nn.TransformerEncoderLayer, "
    "nn.TransformerDecoderLayer) in eval mode without grad. torch may take a fused fast path there "
    "(torch._native_multi_head_attention, torch._transformer_encoder_layer_fwd), but only when no "
    "TorchFunctionMode is active, so under amp_edu.autocast the composite path runs: the same math, "
    "possibly different rounding, and nn.TransformerEncoderLayer returns float32 where torch.autocast "
    "returns the low-precision dtype.")


def _warn_fast_path(args, kwargs) -> None:
    """Warn once per thread when ``multi_head_attention_forward`` runs where torch may not run it."""
    training = kwargs.get("training", args[13] if len(args) > 13 else True)
    st = _STATE
    if training or "fast path" in st.warned or autocast_device(args[:3], {}) is None:
        return
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return
    st.warned.add("fast path")
    warnings.warn(_FAST_PATH_MESSAGE, UserWarning, stacklevel=5)


def _warn_composite(name: str, args, kwargs) -> None:
    device = autocast_device(args, kwargs)
    if device is None:
        return
    st = _STATE
    key = (name, device, st.policy[device])
    if key in st.warned:
        return
    st.warned.add(key)
    warnings.warn(
        f"amp_edu.autocast(policy={st.policy[device]!r}) on {device} tensors: torch.{name} is a C++ "
        f"composite whose inner ops a TorchFunctionMode cannot see; they run uncast here (torch's "
        f"own autocast would cast them, by its {device} table). Cast its inputs yourself, or use "
        f"the device's own policy.", UserWarning, stacklevel=3)
