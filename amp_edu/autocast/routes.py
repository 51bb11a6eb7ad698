"""Routes: what the autocast mode does with each callable it is handed, decided once per callable.

Every torch call inside a region reaches the mode (:mod:`.mode`) as a callable — ``torch.mm``,
``F.softmax``, ``Tensor.__matmul__``, ``torch.ops.aten.mm.default`` — and :func:`route_of` sorts it
into one of four kinds:

* :data:`OPEN`: a **Python-level function** (``F.softmax``, ``F.normalize``, ``nn.MultiheadAttention``'s
  ``multi_head_attention_forward``) is not an op but a composition of ops. The mode re-runs it with
  itself still active, so the ops *inside* are autocast one by one -- just as torch's dispatcher
  sees the inner ops of a composite. (:data:`THIN_WRAPPERS`, whose body is one listed op on the same
  tensors, skip that detour and count as the op.)
* **an ATen name** (``"mm"``, ``"softmax"``): an op that a policy table lists or that torch's own
  autocast registers a kernel for (:data:`TORCH_REGISTERED`, read from this torch's dispatcher).
* ``("composite", name)``: a **C++ composite** known to reach a listed op inside C++, where no
  TorchFunctionMode can see it (:data:`COMPOSITE_OPS`; see :mod:`.mode` for what that means).
* ``None``: **everything else**, which runs untouched.

A route depends only on the callable, so the mode remembers each one (``mode._ROUTES``; bound
methods, made afresh at every attribute access, are not remembered).
"""

from __future__ import annotations

import types
import torch

from .policy import ALIASES, op_name

__all__ = ["TORCH_REGISTERED", "ALL_REGISTERED", "COMPOSITE_OPS", "THIN_WRAPPERS", "NEVER_OPEN", "OPEN",
           "route_of", "route_as_op"]

_DISPATCH_KEY = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}


def _registered(key: str) -> frozenset[str]:
    return frozenset(r.split("::")[1].split(".")[0]
                     for r in torch._C._dispatch_get_registrations_for_dispatch_key(key))


#: ATen ops torch's own autocast registers a kernel for, per device type (read from this torch).
TORCH_REGISTERED: dict[str, frozenset[str]] = {d: _registered(k) for d, k in _DISPATCH_KEY.items()}
ALL_REGISTERED = TORCH_REGISTERED["cpu"] | TORCH_REGISTERED["cuda"]

#: C++ composites known to reach a listed op inside C++ (see :mod:`.mode`). Under the device's own
#: policy torch's dispatcher casts their parts; under another policy they warn once.
COMPOSITE_OPS = frozenset("""lstm gru rnn_tanh rnn_relu lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell
    matrix_power inner tensordot einsum chain_matmul linalg_multi_dot bilinear
    _transformer_encoder_layer_fwd _native_multi_head_attention""".split())

#: Python functions whose body is one call of a listed op with the same tensor arguments: the mode
#: treats each as that op (the same casts, one dispatch instead of opening it and seeing the op).
THIN_WRAPPERS = {torch.nn.functional.cross_entropy: "cross_entropy_loss"}

#: Python-level functions that are not computations to autocast: they run as they are.
NEVER_OPEN = {torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad,
              torch.Tensor.__repr__, torch.Tensor.__format__, torch.Tensor.__deepcopy__,
              torch.Tensor.__reduce_ex__, torch.Tensor.register_hook}

OPEN = object()          # the route of a Python-level function: run it with the mode active


def route_of(func):
    """:data:`OPEN` for a Python-level composite; the ATen name for an op a policy lists or torch's
    autocast registers; ``("composite", name)`` for a known C++ composite; else None."""
    if func in THIN_WRAPPERS:
        return THIN_WRAPPERS[func]
    target = func.__func__ if isinstance(func, types.MethodType) else func
    if isinstance(target, types.FunctionType) and func not in NEVER_OPEN:
        return OPEN
    name = op_name(func)
    if name is not None:
        return name
    raw = getattr(func, "__name__", None)
    if isinstance(raw, str):
        if hasattr(func, "overloadpacket"):
            raw = raw.split(".")[0]
        raw = ALIASES.get(raw, raw)
        if raw in ALL_REGISTERED:
            return raw
        if raw in COMPOSITE_OPS:
            return ("composite", raw)
    return None


def route_as_op(func):
    """The route of a Python override (``Tensor.unflatten``) that hands *itself* to the mode again
    from inside its own body (``super().unflatten``): the op it names, or None."""
    name = op_name(func)
    if name is None:
        raw = getattr(func, "__name__", None)
        return raw if raw in ALL_REGISTERED else None
    return name
