"""Where training memory goes, and what mixed precision actually shrinks — measured on any device.

Training holds four kinds of tensors:

* **parameters** and their **gradients** (fp32 under autocast: autocast never changes a parameter's
  dtype, and ``p.grad`` has the parameter's dtype);
* **optimizer state** (Adam: two fp32 tensors per parameter);
* **saved activations**: the tensors the forward pass keeps for backward (a Linear keeps its input
  to compute the weight gradient, a ReLU its output, ...). They grow with the batch size.

Autocast runs matmul-like ops in fp16/bf16, so their saved inputs are 2-byte copies instead of
4-byte ones: *this* is the saving. It also makes a low-precision copy of each weight for the
matmul, and keeps that copy for backward when the layer's input needs a gradient — memory that
fp32 training does not spend, constant in the batch size. So weights do not shrink; they gain a
copy.

:func:`saved_tensors` counts the saved tensors of a forward pass with
``torch.autograd.graph.saved_tensors_hooks`` (every tensor autograd saves passes through the pack
hook): unique storages, attributed to the innermost module running, sorted into ``activation``,
``weight_copy`` (a cast of a parameter) and ``parameter`` (the parameter itself, which is in
memory anyway and is therefore not counted in :attr:`SavedReport.total_bytes`). This works on a
CPU as well as a GPU. On a GPU, :func:`peak_cuda_bytes` adds the allocator's own view,
``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn as nn

from . import models
from .hooks import module_stack
from .validate import check_int, check_number

__all__ = ["SavedTensor", "SavedReport", "saved_tensors", "saved_bytes", "relu_mlp", "relu_mlp_saved_bytes",
           "relu_mlp_line", "fit_line",
           "largest_batch", "training_state_bytes", "peak_cuda_bytes"]

# autograd nodes that only cast or re-view their single input: following them from a saved tensor
# back to a parameter's AccumulateGrad shows that the tensor is a copy of that parameter.
_CAST_OR_VIEW = {"ToCopyBackward0", "TBackward0", "TransposeBackward0", "TransposeBackward1",
                 "ViewBackward0", "UnsafeViewBackward0", "PermuteBackward0", "ExpandBackward0",
                 "AliasBackward0", "ReshapeAliasBackward0", "AsStridedBackward0", "CloneBackward0"}


@dataclass
class SavedTensor:
    """One unique storage saved for backward."""

    module: str          # innermost module that was running ("" outside any module)
    op: str              # the grad_fn class that produced it ("" for a leaf or a non-grad tensor)
    shape: tuple
    dtype: torch.dtype
    nbytes: int          # bytes of the whole storage (what memory actually holds)
    kind: str            # "activation", "weight_copy" or "parameter"


@dataclass
class SavedReport:
    """The saved tensors of one forward pass. ``total_bytes`` excludes parameters."""

    tensors: list[SavedTensor] = field(default_factory=list)

    def bytes_of(self, kind: str) -> int:
        if kind not in ("activation", "weight_copy", "parameter"):
            raise ValueError(f"kind must be 'activation', 'weight_copy' or 'parameter', got {kind!r}")
        return sum(t.nbytes for t in self.tensors if t.kind == kind)

    @property
    def activation_bytes(self) -> int:
        return self.bytes_of("activation")

    @property
    def weight_copy_bytes(self) -> int:
        return self.bytes_of("weight_copy")

    @property
    def total_bytes(self) -> int:
        """Saved bytes that exist only because of this forward: activations + weight copies."""
        return self.activation_bytes + self.weight_copy_bytes

    def by_module(self) -> dict[str, dict[str, int]]:
        """``{module: {kind: bytes}}`` in the order modules first saved something."""
        out: dict[str, dict[str, int]] = {}
        for t in self.tensors:
            row = out.setdefault(t.module or "(outside modules)", {})
            row[t.kind] = row.get(t.kind, 0) + t.nbytes
        return out


def _copy_of_parameter(t: torch.Tensor, params: set[int]) -> bool:
    node = t.grad_fn
    for _ in range(8):
        if node is None:
            return False
        name = type(node).__name__
        if name == "AccumulateGrad":
            return id(node.variable) in params
        if name not in _CAST_OR_VIEW:
            return False
        nxt = [f for f, _ in node.next_functions if f is not None]
        if len(nxt) != 1:
            return False
        node = nxt[0]
    return False


def saved_tensors(fn: Callable[[], object], model: nn.Module | None = None) -> SavedReport:
    """Run ``fn()`` (a forward pass, with its loss) and report what autograd saved for backward.

    ``model`` names the modules (for :meth:`SavedReport.by_module`) and its parameters are told
    apart from activations. Each storage is counted once, however many ops saved it (a ReLU's
    output is also the next Linear's input: one storage).
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable that runs the forward pass, got {type(fn).__name__}")
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module or None, got {type(model).__name__}")
    params = list(model.parameters()) if model is not None else []
    param_ids = {id(p) for p in params}
    param_storages = {(p.device, p.untyped_storage().data_ptr()) for p in params}
    seen: dict[tuple, SavedTensor] = {}
    keep: list[torch.Tensor] = []   # hold every saved tensor so no storage is freed and reused

    def pack(t: torch.Tensor):
        keep.append(t)
        key = (t.device, t.untyped_storage().data_ptr())
        if key not in seen:
            if key in param_storages:
                kind = "parameter"
            elif _copy_of_parameter(t, param_ids):
                kind = "weight_copy"
            else:
                kind = "activation"
            seen[key] = SavedTensor(where() or "", type(t.grad_fn).__name__ if t.grad_fn else "",
                                    tuple(t.shape), t.dtype, t.untyped_storage().nbytes(), kind)
        return t

    # which module is running when autograd saves a tensor (the model itself by its class name)
    with module_stack(model, lambda name, mod: name or type(mod).__name__) as where:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn()
    del out, keep
    return SavedReport(list(seen.values()))


def _autocast(device_type: str, dtype: torch.dtype | None, policy: str | None = None):
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float32 (no autocast), torch.float16 or torch.bfloat16, got {dtype}")
    if policy is None:
        return torch.autocast(device_type, dtype=dtype)
    from .autocast import autocast   # the course's autocast can apply either op table on any device

    return autocast(device_type, dtype=dtype, policy=policy)


def saved_bytes(model: nn.Module, x: torch.Tensor, *, dtype: torch.dtype | None = None,
                loss_fn: Callable | None = None, target: torch.Tensor | None = None,
                policy: str | None = None) -> SavedReport:
    """Saved tensors of ``model(x)`` — under autocast for fp16/bf16, plain for fp32/None — plus
    ``loss_fn(output, target)`` when given.

    ``policy=None`` uses ``torch.autocast`` on ``x``'s device, i.e. that device's op table. The
    two tables keep different ops in fp32 (the CUDA one: softmax, layer norm, sums, exp; the CPU
    one: mostly losses), so the saving differs: ``policy="cuda"`` or ``"cpu"`` runs
    ``amp_edu.autocast`` with that table instead, on whatever device ``x`` is — the way to see on a
    CPU what a GPU would save.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if policy not in (None, "cpu", "cuda"):
        raise ValueError(f"policy must be None (torch.autocast on x's device), 'cpu' or 'cuda', got {policy!r}")

    def forward():
        with _autocast(x.device.type, dtype, policy):
            out = model(x)
            return loss_fn(out, target) if loss_fn is not None else out

    return saved_tensors(forward, model)


def relu_mlp(widths: Sequence[int], *, seed: int = 0, device="cpu") -> nn.Sequential:
    """``Linear(w0, w1) → ReLU → Linear(w1, w2) → ... → Linear(w_{n-2}, w_{n-1})`` (no final ReLU),
    its weights from ``seed`` (:func:`amp_edu.models.mlp`)."""
    return models.mlp(widths, activation=nn.ReLU, seed=seed, device=device)


def relu_mlp_saved_bytes(widths: Sequence[int], batch: int, dtype: torch.dtype | None = None) -> int:
    """Measured saved bytes (:attr:`SavedReport.total_bytes`) of ``relu_mlp(widths)`` on a random
    ``batch`` — under autocast for fp16/bf16 — on the CPU."""
    batch = check_int(batch, "batch", min=1)
    model = relu_mlp(widths)
    return saved_bytes(model, torch.randn(batch, widths[0]), dtype=dtype).total_bytes


def relu_mlp_line(widths: Sequence[int], dtype: torch.dtype | None = None) -> tuple[int, int]:
    """``(fixed, per_sample)``: saved bytes of ``relu_mlp(widths)`` are exactly
    ``fixed + batch × per_sample`` (weight copies + activations), measured at batch 1 and 2."""
    one, two = relu_mlp_saved_bytes(widths, 1, dtype), relu_mlp_saved_bytes(widths, 2, dtype)
    return 2 * one - two, two - one


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = intercept + slope·x``; returns ``(intercept, slope)``.

    For saved bytes over batch sizes: the slope is bytes per sample, the intercept what does not
    grow with the batch (weight copies).
    """
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("need at least two (x, y) points of equal length")
    for what, vals in (("xs", xs), ("ys", ys)):
        for i, v in enumerate(vals):
            check_number(v, f"{what}[{i}]")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("the x values must not all be equal")
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def largest_batch(budget_bytes: float, fixed_bytes: float, per_sample_bytes: float) -> int:
    """The largest batch ``B`` with ``fixed + B·per_sample <= budget`` (0 if even B = 1 does not fit)."""
    for name, v in (("budget_bytes", budget_bytes), ("fixed_bytes", fixed_bytes),
                    ("per_sample_bytes", per_sample_bytes)):
        check_number(v, name, min=0)
    if per_sample_bytes == 0:
        raise ValueError("per_sample_bytes must be > 0")
    return max(0, math.floor((budget_bytes - fixed_bytes) / per_sample_bytes))


def training_state_bytes(model: nn.Module, *, optimizer_states: int = 2) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state (``optimizer_states`` tensors per
    parameter: 2 for Adam, 1 for SGD with momentum). The same under autocast as in fp32."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    optimizer_states = check_int(optimizer_states, "optimizer_states")
    if optimizer_states < 0:
        raise ValueError(f"optimizer_states must be an int >= 0 (2 for Adam, 1 for SGD with momentum, "
                         f"0 for plain SGD), got {optimizer_states!r}")
    p = sum(t.numel() * t.element_size() for t in model.parameters())
    return {"parameters": p, "gradients": p, "optimizer": optimizer_states * p}


def peak_cuda_bytes(fn: Callable[[], object], device=None) -> int | None:
    """Peak bytes allocated on the GPU while ``fn()`` ran, ``torch.cuda.max_memory_allocated``
    after a reset — everything live at that moment, parameters included (``None`` without a GPU)."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable that runs the step to measure, got {type(fn).__name__}")
    if not torch.cuda.is_available():
        return None
    dev = torch.device(device) if device is not None else torch.device("cuda")
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    fn()
    torch.cuda.synchronize(dev)
    return int(torch.cuda.max_memory_allocated(dev))
