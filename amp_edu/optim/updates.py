"""Which updates a bf16 weight loses: each update against half an ulp of its weight, per layer.

A weight ``w`` stored in bf16 changes only if ``|w + u|`` rounds to a different bf16 number. With
round-to-nearest that needs ``|u| >= ulp(w) / 2`` (ties aside): half an ulp is between 2^-9 and
2^-8 of ``|w|`` (bf16 keeps 8 significant bits; ``formats.lost_update_band`` owns the rule), so an update smaller than about 0.2 % of its
weight is rounded away **every time**, however often it is applied.

:func:`replay` measures what that costs over a run. It records the exact fp32 updates of a real
training run (the fp32 run's weight changes, step by step), then applies the *same* updates to the
bf16 copy of the starting weights three ways — round to nearest, stochastic rounding, Kahan
compensation — and compares where each copy ends with where the exact sum of the updates leads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..validate import check_int
from .kahan import compensation_like, kahan_add_
from .stochastic import stochastic_round

__all__ = ["half_ulp_bf16", "record_updates", "LayerReplay", "replay", "MODES"]

MODES = ("nearest", "stochastic", "kahan")


def half_ulp_bf16(w: torch.Tensor) -> torch.Tensor:
    """Half the bf16 spacing at each ``|w|`` (fp32): ``2^(e - 8)`` for ``2^e <= |w| < 2^(e+1)``
    (normal numbers, which weights are; at 0, half the smallest subnormal)."""
    a = w.detach().float().abs()
    e = torch.frexp(a).exponent - 1                          # a = 1.xxx × 2^e
    tiny = torch.finfo(torch.bfloat16).smallest_normal * torch.finfo(torch.bfloat16).eps
    return torch.where(a > 0, torch.ldexp(torch.ones_like(a), e - 8), torch.full_like(a, tiny / 2))


def record_updates(model: nn.Module, step_fn, steps: int) -> tuple[dict, list[dict]]:
    """``(start, updates)``: the fp32 weights before the run and, for each of ``steps`` calls of
    ``step_fn()`` (one training step of ``model``, fp32), the change of every weight by name."""
    steps = check_int(steps, "steps", min=1)
    start = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    prev = {n: t.clone() for n, t in start.items()}
    updates = []
    for _ in range(steps):
        step_fn()
        now = {n: p.detach().float().clone() for n, p in model.named_parameters()}
        updates.append({n: now[n] - prev[n] for n in now})
        prev = now
    return start, updates


@dataclass(frozen=True)
class LayerReplay:
    """One weight tensor: how its updates compare with half an ulp, and what each mode kept."""

    name: str
    numel: int
    ratio_median: float      # median |update| / |weight| over elements and steps
    below_half_ulp: float    # fraction of (element, step) updates below half an ulp of the bf16 weight
    kept: dict               # mode -> <moved, exact> / <exact, exact>: 1 all of the exact change arrived
    error: dict              # mode -> |moved - exact| / |exact|


def replay(start: dict, updates: list[dict], *, generator: torch.Generator | None = None) -> list[LayerReplay]:
    """Apply ``updates`` (from :func:`record_updates`) to bf16 copies of ``start`` in each of
    :data:`MODES`; one :class:`LayerReplay` per weight tensor."""
    if not updates:
        raise ValueError("updates is empty: record at least one step")
    out = []
    for name, w0 in start.items():
        b0 = w0.bfloat16()
        ws = {m: b0.clone() for m in MODES}
        comp = compensation_like(b0)
        total = torch.zeros_like(w0, dtype=torch.float64)      # the exact sum of the updates
        below, ratios = 0, []
        for upd in updates:
            u = upd[name]
            below += int((u.abs() < half_ulp_bf16(ws["nearest"])).sum())
            ratios.append((u.abs() / ws["nearest"].float().abs().clamp_min(1e-30)).flatten())
            total += u.double()
            ws["nearest"] = (ws["nearest"].float() + u).bfloat16()
            ws["stochastic"] = stochastic_round(ws["stochastic"].float() + u, generator=generator)
            kahan_add_(ws["kahan"], comp, u)
        t = total.flatten()
        tt = float(t @ t)
        kept, err = {}, {}
        for m in MODES:
            moved = (ws[m].double() - b0.double()).flatten()
            kept[m] = float(moved @ t) / tt if tt else float("nan")
            err[m] = float((moved - t).norm()) / tt ** 0.5 if tt else float("nan")
        out.append(LayerReplay(name, w0.numel(), float(torch.cat(ratios).median()),
                               below / (w0.numel() * len(updates)), kept, err))
    return out
