"""Kahan-compensated bf16 weights: a second bf16 tensor holds what rounding took away.

With bf16 weights, ``w + u`` is rounded to bf16 every step, and an update below half an ulp of
``w`` rounds away entirely. Kahan summation keeps the lost part in a *compensation* buffer ``c``
(bf16 too, one per weight) and adds it back next time::

    y = c + u              # the update plus what was lost before      (computed in fp32)
    w_new = bf16(w + y)    # the rounded weight
    c = bf16(y - (w_new - w))   # what this rounding lost; w_new - w is exact

``w_new - w`` is exact (both are bf16 numbers close together: Sterbenz's lemma), so the only loss
is rounding ``c`` itself to bf16: 8 significant bits of a leftover that is below half an ulp of
``w``. The weight follows the exact sum of its updates closely (the tests and lesson 12 measure
how closely), at 2 + 2 bytes per parameter instead of an fp32 master copy's 4 (+ a bf16 copy for
compute) — with one limit: an update below half an ulp of ``c`` is lost in ``c`` as it would be in
``w``, so once ``c`` holds about 2^8 updates it stops growing. Updates below about 2^-17 of the
weight (2^-9 for ``w``'s half ulp, times 2^-8 for ``c``'s) are lost even with Kahan; lesson 12's
weight-decay pitfall is one. This is the recipe of Zamirai et al. 2020, "Revisiting BFloat16 Training"
(arXiv:2010.06192), and of optimizers such as optimi's ``kahan_sum=True`` (see the lesson's
further reading).
"""

from __future__ import annotations

import torch

__all__ = ["compensation_like", "kahan_add_"]


def compensation_like(p: torch.Tensor) -> torch.Tensor:
    """A zero compensation buffer for weight ``p``: same shape, device and dtype (bf16 for bf16)."""
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"p must be a torch.Tensor, got {type(p).__name__}")
    return torch.zeros_like(p, memory_format=torch.contiguous_format)


def kahan_add_(p: torch.Tensor, comp: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    """``p += update`` in ``p``'s dtype with compensation ``comp`` (updated in place; returns ``p``).

    ``update`` is the exact step (fp32); ``p`` and ``comp`` are the stored weight and its buffer
    (same dtype). The sums are formed in fp32, and each result is rounded once to ``p``'s dtype."""
    for t, name in ((p, "p"), (comp, "comp"), (update, "update")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if comp.dtype != p.dtype or comp.shape != p.shape:
        raise ValueError(f"comp must match p (dtype {p.dtype}, shape {tuple(p.shape)}), "
                         f"got {comp.dtype} {tuple(comp.shape)}")
    w = p.float()
    y = comp.float() + update.float()
    new = (w + y).to(p.dtype)
    comp.copy_(y - (new.float() - w))
    p.copy_(new)
    return p
