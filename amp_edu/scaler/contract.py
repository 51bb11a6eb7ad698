"""Torch's argument checks for its two private loss-scaling kernels, with torch's messages.

``torch._amp_foreach_non_finite_check_and_unscale_`` and ``torch._amp_update_scale_`` refuse bad
arguments in their own words (a wrong device, a tensor of more than one element, a dtype they are
not written for, a Python type the argument parser does not take). The course's kernels
(:mod:`amp_edu.scaler.kernels`, and the fast versions in :mod:`amp_edu.scaler._fast`) run these
checks first, so a learner's mistake reads the same as it would with torch; ``tests/scaler/test_scaler.py``
compares every message with torch's.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["UNSCALABLE", "check_one_element", "first_bad_grad", "check_unscale_scalars", "check_update_args",
           "check_update_tensors"]

# The dtypes torch's kernel is written for (AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16)).
UNSCALABLE = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def check_one_element(tensor: torch.Tensor, name: str, kind: str, device_type: str) -> None:
    """torch's kernels take their scalars as 1-element float32 tensors of any shape (``()`` or
    ``(1,)``) on the gradients' device, and say so in these words."""
    if tensor.device.type != device_type:
        raise RuntimeError(f"{name} must be a {device_type.upper()} tensor.")
    if tensor.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if tensor.dtype != kind:
        raise RuntimeError(f"{name} must be a{'n int' if kind == torch.int32 else ' float'} tensor.")


def first_bad_grad(grads: list[torch.Tensor], device_type: str,
                    uniform: bool = False) -> tuple[int, Exception | None]:
    """Index and error of the first gradient torch's kernel would refuse (it walks the list in
    order, so the gradients before it are already unscaled when it raises), or ``(len, None)``.
    A sparse tensor anywhere is refused before any work, by torch's dispatcher. ``uniform``: the
    caller grouped ``grads`` by device and dtype, so the first one speaks for all of them."""
    for g in grads:
        if g.layout != torch.strided:
            backend = {torch.sparse_coo: "Sparse", torch.sparse_csr: "SparseCsr"}.get(g.layout, str(g.layout))
            return 0, NotImplementedError(
                f"Could not run 'aten::_amp_foreach_non_finite_check_and_unscale_' with arguments from the "
                f"'{backend}{device_type.upper()}' backend.")
    for i, g in enumerate(grads[:1] if uniform else grads):
        if g.device.type != device_type:
            return i, RuntimeError(f"one of scaled_grads was not a {device_type.upper()} tensor.")
        if g.dtype not in UNSCALABLE:
            name = g.type().removeprefix("torch.").removeprefix("cuda.").removesuffix("Tensor")  # C++ name: 'Long'
            return i, NotImplementedError(
                f'"_amp_foreach_non_finite_check_and_unscale_{device_type}" not implemented for \'{name}\'')
    return len(grads), None


def check_unscale_scalars(found_inf: torch.Tensor, inv_scale: torch.Tensor, device_type: str) -> None:
    """``found_inf`` and ``inv_scale``: one-element float32 tensors on the gradients' device."""
    for tensor, name in ((inv_scale, "inv_scale"), (found_inf, "found_inf")):
        check_one_element(tensor, name, torch.float32, device_type)


def check_update_tensors(scale: torch.Tensor, growth_tracker: torch.Tensor, found_inf: torch.Tensor) -> None:
    """``_amp_update_scale_``'s tensors: all on one device, one element each, ``growth_tracker``
    int32 and the others float32 -- checked in torch's order (devices, then sizes, then dtypes)."""
    device_type = scale.device.type
    named = ((growth_tracker, "growth_tracker", torch.int32), (scale, "current_scale", torch.float32),
             (found_inf, "found_inf", torch.float32))
    for tensor, name, _ in named:
        if tensor.device.type != device_type:
            raise RuntimeError(f"{name} must be a {device_type.upper()} tensor.")
    for tensor, name, _ in named:
        if tensor.numel() != 1:
            raise RuntimeError(f"{name} must be a 1-element tensor.")
    for tensor, name, kind in named:
        check_one_element(tensor, name, kind, device_type)


def check_update_args(growth_factor, backoff_factor, growth_interval) -> None:
    """Reject what torch's argument parser rejects for ``_amp_update_scale_``, with its message:
    a float argument takes a Python or NumPy number or a 0-dim tensor that does not require grad; an int argument an integer
    (not a bool) or a 0-dim integer tensor. So ``set_growth_interval(1e3)`` fails at ``update()``."""
    for pos, name, value, is_int in ((4, "scale_growth_factor", growth_factor, False),
                                     (5, "scale_backoff_factor", backoff_factor, False),
                                     (6, "growth_interval", growth_interval, True)):
        if isinstance(value, torch.Tensor):        # a 0-dim tensor that does not require grad
            ok = value.dim() == 0 and not value.requires_grad and (not is_int or not (value.is_floating_point() or value.is_complex()
                                                          or value.dtype == torch.bool))
        elif is_int:
            ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float, np.integer, np.floating, np.bool_))
        if not ok:
            kind = type(value)
            shown = kind.__name__ if kind.__module__ == "builtins" or kind.__flags__ & (1 << 9) \
                else f"{kind.__module__}.{kind.__name__}"   # C types show their module, like torch
            raise TypeError(f"_amp_update_scale_(): argument '{name}' (position {pos}) must be "
                            f"{'int' if is_int else 'float'}, not {shown}")
