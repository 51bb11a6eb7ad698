"""A quantized optimizer state that PyTorch treats as a tensor: a ``torch.Tensor`` subclass.

:mod:`.blockwise` turns an fp32 state into codes and scales. Where do they live? An optimizer keeps
its state in ``optimizer.state[p]``, and PyTorch's machinery walks that dictionary expecting
tensors: ``Optimizer.load_state_dict`` calls ``value.to(dtype=p.dtype, device=p.device)`` on every
state (so a checkpoint saved on a CPU follows a model on a GPU), ``torch.distributed.checkpoint``
(DCP) saves each tensor and, when it loads at another world size, *slices* the tensors to each
rank's part, and FSDP2 wraps each rank's part in a ``DTensor``. A plain Python object holding
``codes`` and ``scale`` is skipped or refused by all of them.

So :class:`QuantizedState` is a **wrapper tensor subclass**, as torchao's ``OptimState8bit``,
``OptimState4bit`` and ``OptimStateFp8`` are (``torchao/optim/subclass_*.py`` in torchao 0.18.0):

* ``torch.Tensor._make_wrapper_subclass`` makes a tensor with a shape, a dtype and a device but no
  data of its own; the data are ordinary tensors kept as attributes (``codes``, ``scale``,
  ``qmap``). The dtype is only an *appearance*: the state *looks* like ``p.dtype`` (so the
  optimizer's ``.to(dtype=p.dtype)`` is harmless) while it stores codes.
* Every operation on it reaches ``__torch_dispatch__`` as an ATen op (``aten.slice.Tensor``,
  ``aten.copy_.default``, ...) with the wrapper among its arguments. The class answers the few
  that moving, saving and sharding need, each in terms of codes and scales, and refuses the rest
  with a message (arithmetic belongs to :meth:`QuantizedState.dequantize`'s fp32 tensor).

=============================  =================================================================
op                             what it does to the codes and scales
=============================  =================================================================
``copy_``                      into a state: quantize (new codes, new scales); state into state:
                               copy codes and scales; state into a plain tensor: dequantize
``_to_copy`` (``.to``)         ``dtype``: only the appearance changes; ``device``: codes, scales
                               and code book are copied to it
``detach``, ``alias``          a new wrapper around the *same* codes and scales (a view)
``clone``                      a new wrapper around copies
``view``, ``_unsafe_view``     the same codes in another shape (blocks are in memory order, so
                               a reshape keeps every element's block)
``slice`` (dim 0, step 1)      the rows' codes and their blocks' scales, as views; the cut must
                               fall on a block boundary (DCP's resharding, ``state[:n]``)
``lerp``                       dequantize, then the plain op (torchao's step calls it)
``is_pinned``                  whether the inner tensors are (DCP's save asks)
c10d all-gather / wait         gather codes and scales separately (``DTensor.full_tensor()``)
=============================  =================================================================

Saving: ``torch.save`` pickles the kind, the codes, the scales and the code book, and
``torch.load(weights_only=True)`` rebuilds the wrapper from them (the class and its rebuild
function are registered with ``add_safe_globals``), on the device the inner tensors land on
(``map_location`` moves the wrapper with them).
"""

from __future__ import annotations

import math

import torch

from ..validate import check_bool, check_int
from . import blockwise
from .blockwise import BLOCK_SIZES, FP8, QUANTIZED_STATES

__all__ = ["QuantizedState", "UnsupportedOp", "is_quantized_state"]

aten = torch.ops.aten
_HANDLERS: dict = {}


def _implements(*ops):
    def register(fn):
        for op in ops:
            _HANDLERS[op] = fn
        return fn
    return register


def _check_kind(kind) -> str:
    if kind not in QUANTIZED_STATES:
        raise ValueError(f"kind must be one of {', '.join(QUANTIZED_STATES)}, got {kind!r}")
    return kind


def _check_dtype(dtype) -> torch.dtype:
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype or None, got {type(dtype).__name__}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype (the dtype the state appears as) must be a floating-point dtype, got {dtype}")
    return dtype


class UnsupportedOp(NotImplementedError):
    """An op a :class:`QuantizedState` deliberately refuses: it stores codes, not numbers, so it
    answers only what an optimizer and a checkpoint need (detach, clone, copy, move, view, slice,
    the moments' lerp, the collectives) and sends arithmetic to :meth:`QuantizedState.dequantize`.
    A ``NotImplementedError``, as torch's dispatch expects of an op a tensor subclass has no rule for."""


class QuantizedState(torch.Tensor):
    """One optimizer state tensor (e.g. Adam's ``exp_avg`` of one weight) stored block-wise.

    ``QuantizedState(kind, shape, signed=True, block_size=None, device=None, dtype=None)`` is a zero
    state of ``shape`` (also :meth:`zeros`). ``kind``: ``"8bit"``, ``"4bit"`` or ``"fp8"``;
    ``signed``: the code book covers [-1, 1] (first moment) or [0, 1] (second); ``block_size``:
    256/128/256 by default; ``dtype``: the dtype it appears as (torch's default dtype if ``None``).

    Attributes: ``codes`` (uint8, or float8_e4m3fn for ``fp8``; the 4-bit kind packs two codes
    per byte in a flat tensor), ``scale`` (fp32, one per block), ``qmap`` (fp32 code book;
    ``None`` for fp8), ``kind``, ``signed``, ``block_size``. :meth:`dequantize` is the state as an
    fp32 tensor; ``state.copy_(x)`` stores ``x``.
    """

    @staticmethod
    def __new__(cls, kind: str, shape, *, signed: bool = True, block_size: int | None = None,
                device=None, dtype: torch.dtype | None = None):
        kind = _check_kind(kind)
        signed = check_bool(signed, "signed")
        if isinstance(shape, int):
            shape = (shape,)
        try:
            shape = torch.Size(shape)
        except TypeError:
            raise TypeError(f"shape must be a sequence of ints, got {shape!r}") from None
        block_size = check_int(BLOCK_SIZES[kind] if block_size is None else block_size, "block_size", min=2)
        n = shape.numel()
        if n % block_size:
            raise ValueError(f"{n} elements do not split into blocks of {block_size}")
        if kind == "4bit" and block_size % 2:
            raise ValueError("4-bit codes are packed two per byte: block_size must be even")
        codes = torch.zeros(blockwise.codes_shape(kind, shape), dtype=FP8 if kind == "fp8" else torch.uint8,
                            device=device)
        scale = torch.zeros(n // block_size, dtype=torch.float32, device=device)
        q = blockwise.qmap_for(kind, signed)
        return cls._wrap(kind, signed, block_size, codes, scale, None if q is None else q.to(device), shape,
                         _check_dtype(dtype))

    @classmethod
    def zeros(cls, kind: str, shape, signed: bool = True, block_size: int | None = None, device=None,
              dtype: torch.dtype | None = None) -> "QuantizedState":
        """A zero state (torchao's ``OptimState8bit.zeros(shape, signed, block_size, device, dtype)``,
        with the kind first)."""
        return cls(kind, shape, signed=signed, block_size=block_size, device=device, dtype=dtype)

    @classmethod
    def _wrap(cls, kind, signed, block_size, codes, scale, qmap, shape, dtype) -> "QuantizedState":
        """The wrapper around given inner tensors (no copy): every op builds its result here."""
        self = torch.Tensor._make_wrapper_subclass(cls, tuple(shape), dtype=dtype, device=codes.device,
                                                   requires_grad=False)
        self.kind, self.signed, self.block_size = kind, signed, block_size
        self.codes, self.scale, self.qmap = codes, scale, qmap
        return self

    def _like(self, codes, scale, qmap=None, shape=None, dtype=None) -> "QuantizedState":
        return QuantizedState._wrap(self.kind, self.signed, self.block_size, codes, scale,
                                    self.qmap if qmap is None else qmap, self.shape if shape is None else shape,
                                    self.dtype if dtype is None else dtype)

    # --- the two directions --------------------------------------------------------------------
    def dequantize(self, output_dtype: torch.dtype | None = None) -> torch.Tensor:
        """The state as a plain tensor of its shape: fp32 (or ``output_dtype``)."""
        out = blockwise.dequantize(self.codes, self.scale, self.qmap, self.kind, self.block_size, self.shape)
        return out if output_dtype is None else out.to(output_dtype)

    # --- bookkeeping ---------------------------------------------------------------------------
    def tensors(self) -> list[torch.Tensor]:
        """The tensors this state really holds (codes, scale, and the code book if any)."""
        return [t for t in (self.codes, self.scale, self.qmap) if t is not None]

    @property
    def nbytes(self) -> int:
        """Bytes of :meth:`tensors` -- what is stored, unlike a plain tensor's ``nbytes`` (numel ×
        the element size of the dtype it appears as). Each state holds its own code book, as in
        torchao: 1 KiB for 8 bits, 64 B for 4 bits."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def __repr__(self, *, tensor_contents=None) -> str:
        return (f"QuantizedState({self.kind}, signed={self.signed}, block_size={self.block_size}, "
                f"shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})")

    # --- how PyTorch sees it -------------------------------------------------------------------
    __torch_function__ = torch._C._disabled_torch_function_impl   # every op goes straight to dispatch

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        handler = _HANDLERS.get(func) or (_collective if str(func) in _COLLECTIVES else None)
        if handler is None:
            names = sorted({str(op).split(".")[-2] for op in _HANDLERS}) + ["the c10d all-gather and wait"]
            raise UnsupportedOp(
                f"QuantizedState does not implement {func}: it answers {', '.join(names)}. "
                "For arithmetic, call .dequantize() first (an fp32 tensor).")
        return handler(func, args, kwargs or {})

    def __tensor_flatten__(self):
        """The inner tensors' names and what else rebuilds the wrapper (torch's subclass protocol)."""
        names = ["codes", "scale"] + ([] if self.qmap is None else ["qmap"])
        return names, (self.kind, self.signed, self.block_size, self.dtype)

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        kind, signed, block_size, dtype = ctx
        return QuantizedState._wrap(kind, signed, block_size, inner["codes"], inner["scale"], inner.get("qmap"),
                                    outer_size, dtype)

    def __reduce_ex__(self, proto):
        return (_rebuild, (self.kind, self.signed, self.block_size, self.codes, self.scale, self.qmap,
                           tuple(self.shape), self.dtype))


def _rebuild(kind, signed, block_size, codes, scale, qmap, shape, dtype) -> QuantizedState:
    """Unpickling: the wrapper around the loaded inner tensors, on their device."""
    _check_kind(kind)
    return QuantizedState._wrap(kind, bool(signed), int(block_size), codes, scale, qmap, torch.Size(shape), dtype)


def is_quantized_state(t) -> bool:
    return isinstance(t, QuantizedState)


# --- the ops ------------------------------------------------------------------------------------
@_implements(aten.detach.default, aten.alias.default)
def _view_same(func, args, kwargs):
    x = args[0]
    return x._like(x.codes.detach(), x.scale.detach(), None if x.qmap is None else x.qmap.detach())


@_implements(aten.clone.default)
def _clone(func, args, kwargs):
    x = args[0]
    return x._like(x.codes.clone(), x.scale.clone(), None if x.qmap is None else x.qmap.clone())


@_implements(aten._to_copy.default)
def _to_copy(func, args, kwargs):
    x = args[0]
    dtype = _check_dtype(kwargs.get("dtype") or x.dtype)
    device = kwargs.get("device")

    def move(t):
        return None if t is None else (t.clone() if device is None else t.to(device, copy=True))
    return x._like(move(x.codes), move(x.scale), move(x.qmap), dtype=dtype)


@_implements(aten.copy_.default)
def _copy(func, args, kwargs):
    dst, src = args[0], args[1]
    if isinstance(dst, QuantizedState) and isinstance(src, QuantizedState):
        if (dst.kind, dst.signed, dst.block_size, dst.shape) != (src.kind, src.signed, src.block_size, src.shape):
            raise ValueError(f"copy_ between states needs the same kind, signedness, block size and shape: "
                             f"{dst!r} <- {src!r}")
        dst.codes.copy_(src.codes)
        dst.scale.copy_(src.scale)             # the code book is the same one
    elif isinstance(dst, QuantizedState):
        if src.shape != dst.shape:
            raise ValueError(f"copy_ into a state of shape {tuple(dst.shape)} needs a tensor of that shape, "
                             f"got {tuple(src.shape)}")
        codes, scale = blockwise.quantize(src, dst.kind, dst.qmap, dst.block_size)
        dst.codes.copy_(codes)
        dst.scale.copy_(scale)
    else:
        dst.copy_(src.dequantize())
    return dst


@_implements(aten.view.default, aten._unsafe_view.default)
def _view(func, args, kwargs):
    x, size = args[0], args[1]
    shape = torch.empty(x.shape, device="meta").view(size).shape     # checks the size, resolves -1
    codes = x.codes if x.kind == "4bit" else x.codes.view(shape)
    return x._like(codes, x.scale, shape=shape)


@_implements(aten.slice.Tensor)
def _slice(func, args, kwargs):
    x = args[0]
    dim, start, end, step = list(args[1:]) + [0, None, None, 1][len(args) - 1:]     # the schema's defaults
    dim, start, end, step = (kwargs.get(k, v) for k, v in (("dim", dim), ("start", start), ("end", end),
                                                            ("step", step)))
    if dim % max(x.dim(), 1) != 0:
        raise ValueError(f"a QuantizedState slices only along its first dimension (its blocks run in memory "
                         f"order), got dim={dim}")
    if step != 1:
        raise ValueError(f"a QuantizedState slices only with step 1, got step={step}")
    start, end, _ = slice(start, end).indices(x.shape[0])
    end = max(end, start)
    row = math.prod(x.shape[1:])
    bs = x.block_size
    if (start * row) % bs or (end * row) % bs:
        raise ValueError(f"slice [{start}:{end}] of a state of shape {tuple(x.shape)} cuts a block of {bs} "
                         f"elements: start and end times {row} must be multiples of {bs}")
    if x.kind == "4bit":
        codes = x.codes[start * row // 2:end * row // 2]
    else:
        codes = x.codes[start:end]
    scale = x.scale[start * row // bs:end * row // bs]
    return x._like(codes, scale, shape=(end - start,) + tuple(x.shape[1:]))


@_implements(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(func, args, kwargs):
    args = [a.dequantize() if isinstance(a, QuantizedState) else a for a in args]
    return func(*args, **kwargs)


@_implements(aten.is_pinned.default)
def _is_pinned(func, args, kwargs):
    return all(t.is_pinned() for t in args[0].tensors())


def _collective(func, args, kwargs):
    """all-gather (or wait for) codes and scales separately; fp8 codes travel as bytes (gloo has no
    float8). A gathered state stacks the ranks' parts along the first dimension."""
    x = args[0]
    if not isinstance(x, QuantizedState):
        raise TypeError(f"expected a QuantizedState, got {type(x).__name__}")
    codes = func(x.codes.view(torch.uint8) if x.kind == "fp8" else x.codes, *args[1:], **kwargs)
    if x.kind == "fp8":
        codes = codes.view(FP8)
    scale = func(x.scale, *args[1:], **kwargs)
    first = x.shape[0] * codes.numel() // max(x.codes.numel(), 1) if x.dim() else 0
    shape = ((first,) + tuple(x.shape[1:])) if x.dim() else ()
    return x._like(codes, scale, x.qmap.clone() if x.qmap is not None else None, shape=shape)


# the functional collectives exist once torch.distributed is imported, so they are matched by name
_COLLECTIVES = {f"{ns}.{name}.default" for ns in ("c10d_functional", "_c10d_functional")
                for name in ("all_gather_into_tensor", "wait_tensor", "_wrap_tensor_autograd")}


torch.serialization.add_safe_globals([QuantizedState, _rebuild, torch.Size])   # torch.load(weights_only=True)
