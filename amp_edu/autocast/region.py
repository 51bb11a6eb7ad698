"""``autocast``: PyTorch's autocast rebuilt from scratch — the region, opened and closed.

``with autocast("cpu"):`` does three things on entry and undoes them on exit, in this order:

1. **writes torch's own autocast state** for the device — enabled, dtype, cache switch, and the
   nesting counter (``torch.autocast_increment_nesting``) — saving the old values on a stack, so
   that torch's queries, ``custom_fwd``, checkpoint and ``nn`` modules see the region
   (:mod:`.state` says why);
2. **records the region's op table** (``policy``) in this thread's :data:`~.state._STATE`;
3. **pushes the autocast mode** (:mod:`.mode`) onto torch's function-mode stack — once per
   thread, by the outermost region; inner regions only make it re-read the tables.

On exit the weight cache follows torch's rule: it is cleared when the outermost autocast region
exits (torch's nesting counter reaches 0, :func:`~.state.clear_autocast_cache`), and an amp_edu
region nested in a ``torch.autocast`` region clears only its own cache.

Entry and exit run as plain Python even inside ``torch.compile`` (:func:`_not_traced`).
"""

from __future__ import annotations

import functools
import warnings

import torch

from .mode import _AutocastMode
from .policy import POLICIES
from .state import _STATE, check_device_type, clear_autocast_cache

__all__ = ["autocast"]

_CPU_DTYPES = (torch.bfloat16, torch.float16)
_set_eval_frame = torch._C._dynamo.eval_frame.set_eval_frame


def _not_traced(fn):
    """``fn`` runs as plain Python even inside ``torch.compile``: what ``torch.compiler.disable``
    does, without importing dynamo (seconds) for every course import. Dynamo does not inline a
    function marked ``_torchdynamo_disable`` (torch 2.13, ``torch/_dynamo/symbolic_convert.py``,
    ``InliningInstructionTranslator.check_inlineable``: a graph break, then the call runs eagerly),
    and the call runs with dynamo's frame callback switched off, so no frame inside it is compiled
    either (``torch/_dynamo/eval_frame.py``, the ``_fn`` wrapper that ``DisableContext.__call__``
    returns: ``set_eval_frame(None)`` around the call).

    A region's entry and exit change thread-local state, torch's autocast flags and torch's
    function-mode stack; traced by dynamo and replayed in part around a graph break, they left the
    mode on torch's stack after the compiled call and crashed the next exit. Run eagerly, the region
    opens and closes exactly as it does outside ``torch.compile``, and dynamo compiles the ops in
    between with the mode active (``tests/autocast/test_under_compile.py``)."""
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
        self.device = check_device_type(device_type)
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
