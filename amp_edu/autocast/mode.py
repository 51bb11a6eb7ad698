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

:meth:`_AutocastMode.general` is that path, written to be read. The most common call (a
``lower``/``fp32`` op on plain CPU tensors passed positionally, like ``nn.Linear``'s) takes a
shortcut in the private :mod:`amp_edu.autocast._fastpath`: the same decisions in one loop that reads
each tensor's properties once, because on a small model this Python is the whole cost of the region
(``python -m amp_edu.bench.autocast_overhead``; ``tests/test_autocast_fastpath.py`` proves both
paths agree).

One autocast state, shared with torch
-------------------------------------
Library code asks *torch* whether autocast is on: ``nn.LSTM`` checks
``torch._C._is_any_autocast_enabled()`` before accepting an input whose dtype differs from its
weights, ``torch.amp.custom_fwd`` reads ``torch.is_autocast_enabled(device)`` and
``torch.get_autocast_dtype(device)``, ``torch.utils.checkpoint`` saves them and re-enters
``torch.autocast`` with them for the recompute, ``nn.TransformerEncoderLayer`` picks its fast path
from them. A from-scratch region that kept its state to itself would send all of them down the
wrong branch. So a region here *writes torch's own thread-local state* (``torch.set_autocast_enabled``,
``set_autocast_dtype``, ``set_autocast_cache_enabled``, the nesting counter) on entry, restores it
on exit, and the mode *reads* the enabled flag and the dtype back from torch at every listed op.
Every query in torch and in user code sees the region, and a ``torch.autocast(enabled=False)``
opened inside it (``custom_fwd(cast_inputs=...)``, checkpoint, user code) switches our casting off.

But torch's enabled flag *is* its dispatcher switch: ``is_autocast_enabled(device)`` means "the
``AutocastCPU`` (``AutocastCUDA``) dispatch key is not excluded in this thread", so with the flag
on, torch's C++ autocast kernels would cast too and hide our policy behind theirs. The mode
therefore runs each op that torch's autocast registers (every op of the policy tables) with the
autocast keys excluded (``torch._C._ExcludeDispatchKeyGuard``; for CPU tensors, simply
``torch.set_autocast_enabled("cpu", False)`` around the call, which is the same exclusion bit):
torch's autocast kernel is skipped for that call, exactly as torch's own autocast kernel excludes
its key before it redispatches to the real op. Ops torch does *not* register are fall-throughs for torch's autocast layer, so they
run as they are — and that is where the last piece sits:

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
  composites (``COMPOSITE_OPS``) warn once each, naming the op, so that difference is never silent.

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
import threading
import types
import warnings
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .cache import WeightCache
from . import _fastpath
from .policy import ALIASES, CONDITIONAL, FP32, LOWER, POLICIES, cast_arguments, decide, lookup, op_name

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "get_autocast_policy",
           "is_autocast_cache_enabled", "clear_autocast_cache", "is_autocast_available", "redispatch", "COMPOSITE_OPS",
           "TORCH_REGISTERED", "THIN_WRAPPERS", "weight_cache"]

DEVICE_TYPES = ("cpu", "cuda")
_CPU_DTYPES = (torch.bfloat16, torch.float16)
_DISPATCH_KEY = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}
# the dispatch keys of torch's own autocast, excluded while an op the mode decided on runs
_AUTOCAST_KEYS = (torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
                  | torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA))


def _registered(key: str) -> frozenset[str]:
    return frozenset(r.split("::")[1].split(".")[0]
                     for r in torch._C._dispatch_get_registrations_for_dispatch_key(key))


#: ATen ops torch's own autocast registers a kernel for, per device type (read from this torch).
TORCH_REGISTERED: dict[str, frozenset[str]] = {d: _registered(k) for d, k in _DISPATCH_KEY.items()}

#: C++ composites known to reach a listed op inside C++ (see the module docstring). Under the
#: device's own policy torch's dispatcher casts their parts; under another policy they warn once.
COMPOSITE_OPS = frozenset("""lstm gru rnn_tanh rnn_relu lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell
    matrix_power inner tensordot einsum chain_matmul linalg_multi_dot bilinear
    _transformer_encoder_layer_fwd _native_multi_head_attention""".split())


class _State(threading.local):
    """One thread's amp_edu-only state (the enabled flags, dtypes and cache switch are torch's)."""

    def __init__(self):
        self.policy = {d: d for d in DEVICE_TYPES}
        self.depth = 0            # amp_edu regions open in this thread
        self.cache = WeightCache()
        self.mode: _AutocastMode | None = None     # the mode on the stack while a region is open
        self.spare: _AutocastMode | None = None
        self.opening: list = []   # Python-level functions being run with the mode active
        self.warned: set = set()


_STATE = _State()


def _check_device_type(device_type: Any) -> str:
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type not in DEVICE_TYPES:
        torch.device(device_type)          # not a device string at all: torch's RuntimeError
        raise ValueError(f"amp_edu.autocast supports device_type 'cpu' or 'cuda', got {device_type!r}")
    return device_type


def is_autocast_available(device_type: str) -> bool:
    """Can ``amp_edu.autocast`` run on ``device_type``? ('cpu' and 'cuda'; like
    ``torch.amp.is_autocast_available``, a string that names no device is a RuntimeError.)"""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    torch.device(device_type)
    return device_type in DEVICE_TYPES


def is_autocast_enabled(device_type: str) -> bool:
    """Is autocast enabled for ``device_type`` in this thread? (torch's flag, which regions set.)"""
    return torch.is_autocast_enabled(_check_device_type(device_type))


def get_autocast_dtype(device_type: str) -> torch.dtype:
    """The low-precision dtype of the current region for ``device_type`` (torch's setting; default:
    fp16 for cuda, bf16 for cpu)."""
    return torch.get_autocast_dtype(_check_device_type(device_type))


def get_autocast_policy(device_type: str) -> str:
    """Which op table (``'cuda'`` or ``'cpu'``) the current amp_edu region uses for ``device_type``."""
    return _STATE.policy[_check_device_type(device_type)]


def is_autocast_cache_enabled() -> bool:
    """Is the weight-cast cache on in the current region (default True)? (torch's setting.)"""
    return torch.is_autocast_cache_enabled()


def clear_autocast_cache() -> None:
    """Forget this thread's cached weight casts, and torch's (called when the outermost region exits)."""
    _STATE.cache.clear()
    torch.clear_autocast_cache()


def weight_cache() -> WeightCache:
    """This thread's weight cache (for the lesson's cache experiments and tests)."""
    return _STATE.cache


# ----------------------------------------------------------------------------------------------
# Routing: what the mode does with each callable it is handed.

_OPEN, _UNSEEN = object(), object()
# Python-level functions that are not computations to autocast: run them as they are.
_NEVER_OPEN = {torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad,
               torch.Tensor.__repr__, torch.Tensor.__format__, torch.Tensor.__deepcopy__,
               torch.Tensor.__reduce_ex__, torch.Tensor.register_hook}
_ROUTES: dict[Any, Any] = {}
_ALL_REGISTERED = TORCH_REGISTERED["cpu"] | TORCH_REGISTERED["cuda"]
# Python functions whose body is one call of a listed op with the same tensor arguments: the mode
# treats each as that op (the same casts, one dispatch instead of opening it and seeing the op).
THIN_WRAPPERS = {torch.nn.functional.cross_entropy: "cross_entropy_loss"}


def _route(func):
    """``_OPEN`` for a Python-level composite; the ATen name for an op a policy lists or torch's
    autocast registers; ``("composite", name)`` for a known C++ composite; else None."""
    if func in THIN_WRAPPERS:
        return THIN_WRAPPERS[func]
    target = func.__func__ if isinstance(func, types.MethodType) else func
    if isinstance(target, types.FunctionType) and func not in _NEVER_OPEN:
        return _OPEN
    name = op_name(func)
    if name is not None:
        return name
    raw = getattr(func, "__name__", None)
    if isinstance(raw, str):
        if hasattr(func, "overloadpacket"):
            raw = raw.split(".")[0]
        raw = ALIASES.get(raw, raw)
        if raw in _ALL_REGISTERED:
            return raw
        if raw in COMPOSITE_OPS:
            return ("composite", raw)
    return None


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


_is_enabled = torch._C.is_autocast_enabled
_get_dtype = torch._C.get_autocast_dtype
_cache_on = torch._C.is_autocast_cache_enabled
_inference = torch.is_inference_mode_enabled


def _autocast_device(args, kwargs):
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

    def refresh(self) -> None:
        """Re-read the thread's policies (a region opened or closed)."""
        self.own_policy = _own_policy(self.policy)
        self.cpu_table = POLICIES[self.policy["cpu"]]
        self.cpu_conditional = CONDITIONAL[self.policy["cpu"]]

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        route = _ROUTES.get(func, _UNSEEN)
        if route is _UNSEEN:
            route = _route(func)
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
        where it makes these same decisions (``tests/test_autocast_fastpath.py``)."""
        if route is None:
            if self.own_policy:
                return func(*args, **kwargs) if kwargs else func(*args)
            return self.excluded(func, args, kwargs or {})
        if kwargs is None:
            kwargs = {}
        elif kwargs.get("out") is not None and type(route) is str:    # out= overloads are not autocast
            return self.excluded(func, args, kwargs)
        if route is _OPEN:
            if func is _MHA_FORWARD:
                _warn_fast_path(args, kwargs)
            opening = self.opening
            if func not in opening:
                opening.append(func)
                try:
                    with self:
                        return redispatch(func, types_, args, kwargs)
                finally:
                    opening.pop()
            # A Python override (Tensor.unflatten) calling its C implementation (super().unflatten)
            # hands itself to the mode again: treat this inner call as the op itself.
            route = _route_as_op(func)
            if route is None:
                return func(*args, **kwargs)
        if type(route) is tuple:                        # a known C++ composite
            if self.own_policy:
                return func(*args, **kwargs)
            _warn_composite(route[1], args, kwargs)
            return self.excluded(func, args, kwargs)
        # an op a table lists or torch registers: cast by the table of its autocast device
        device = _autocast_device(args, kwargs)
        if device is None:
            return func(*args, **kwargs)
        table = self.policy[device]
        kind = POLICIES[table].get(route)
        if kind is not None and route in CONDITIONAL[table]:
            kind = lookup(table, route, args, kwargs)
        if kind is not None:
            low_dtype = _get_dtype(device)
            cache_on = _cache_on() and not _inference()      # inference tensors are never cached
            args, kwargs = decide(kind, args, kwargs, device_type=device, dtype=low_dtype,
                                  cast=lambda t, to: self.cache.caster(low_dtype, to, cache_on)(t))
        if self.own_policy and route not in TORCH_REGISTERED[device]:
            return func(*args, **kwargs)
        return self.excluded(func, args, kwargs)


def _route_as_op(func):
    name = op_name(func)
    if name is None:
        raw = getattr(func, "__name__", None)
        return raw if raw in _ALL_REGISTERED else None
    return name


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
    if training or "fast path" in st.warned or _autocast_device(args[:3], {}) is None:
        return
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return
    st.warned.add("fast path")
    warnings.warn(_FAST_PATH_MESSAGE, UserWarning, stacklevel=4)


def _warn_composite(name: str, args, kwargs) -> None:
    device = _autocast_device(args, kwargs)
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


def _own_policy(policy: dict) -> bool:
    return policy["cpu"] == "cpu" and policy["cuda"] == "cuda"


_set_eval_frame = torch._C._dynamo.eval_frame.set_eval_frame


def _not_traced(fn):
    """``fn`` runs as plain Python even inside ``torch.compile``: what ``torch.compiler.disable``
    does, without importing dynamo (seconds) for every course import. Dynamo does not inline a
    function marked ``_torchdynamo_disable`` (torch 2.13 ``torch/_dynamo/symbolic_convert.py``
    lines 5736-5750: a graph break, then the call runs eagerly), and the call runs with dynamo's
    frame callback switched off, so no frame inside it is compiled either (``_fn`` of
    ``DisableContext``, ``torch/_dynamo/eval_frame.py`` lines 1423-1425: ``set_eval_frame(None)``).

    A region's entry and exit change thread-local state, torch's autocast flags and torch's
    function-mode stack; traced by dynamo and replayed in part around a graph break, they left the
    mode on torch's stack after the compiled call and crashed the next exit. Run eagerly, the region
    opens and closes exactly as it does outside ``torch.compile``, and dynamo compiles the ops in
    between with the mode active (``tests/test_autocast_compile.py``)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        prior = _set_eval_frame(None)
        try:
            return fn(*args, **kwargs)
        finally:
            _set_eval_frame(prior)
    run._torchdynamo_disable = True
    return run


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
    (cpu) or raise (bf16 on a GPU without it), with torch's messages. Inside the region torch's
    own queries (``torch.is_autocast_enabled(device_type)``, ``torch.get_autocast_dtype``,
    ``torch.is_autocast_cache_enabled``) report it, as they would for ``torch.autocast``.
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
        self.fast_dtype = torch.get_autocast_dtype(device_type) if dtype is None else dtype
        self.policy = policy or device_type
        self._cache_enabled = torch.is_autocast_cache_enabled() if cache_enabled is None else cache_enabled
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

    @_not_traced
    def __enter__(self):
        st, d = _STATE, self.device
        self._saved.append((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d),
                            torch.is_autocast_cache_enabled(), st.policy[d]))
        torch.set_autocast_enabled(d, self._enabled)
        torch.set_autocast_dtype(d, self.fast_dtype)
        torch.autocast_increment_nesting()
        torch.set_autocast_cache_enabled(self._cache_enabled)
        st.policy[d] = self.policy
        st.depth += 1
        if st.mode is None:
            if st.spare is None:                   # one mode object per thread, reused by every region
                st.spare = _AutocastMode(st)
            st.mode = st.spare
            st.mode.__enter__()
        st.mode.refresh()
        return self

    @_not_traced
    def __exit__(self, exc_type, exc_val, exc_tb):
        st, d = _STATE, self.device
        st.depth -= 1
        if torch.autocast_decrement_nesting() == 0:
            clear_autocast_cache()                 # torch's rule: the outermost region drops the cache
        elif st.depth == 0:
            st.cache.clear()                       # an enclosing torch.autocast region goes on
        enabled, dtype, cache_enabled, st.policy[d] = self._saved.pop()
        torch.set_autocast_enabled(d, enabled)
        torch.set_autocast_dtype(d, dtype)
        torch.set_autocast_cache_enabled(cache_enabled)
        if st.depth == 0:
            mode, st.mode = st.mode, None
            mode.__exit__(exc_type, exc_val, exc_tb)
        else:
            st.mode.refresh()
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

