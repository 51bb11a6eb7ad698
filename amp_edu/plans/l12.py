"""Kernel side of exercise 12: the plans that run ``stochastic_round_fp16`` and the Kahan update.

:func:`stochastic_round_plan` calls the learner's ``stochastic_round_fp16(x, generator)`` on each
case's ``x`` with a fresh ``torch.Generator().manual_seed(s)`` for each of the case's seeds, and
hands back what each call returned and ``x`` after the calls (the function only reads ``x``; the
judge fails a changed one).

:func:`kahan_plan` calls ``init_compensation(params)`` and ``init_compensation(params, dtype)`` for
each dtype the cases name, then, for each run of the cases (weights of several dtypes with
compensation buffers of a given dtype), ``kahan_update_(p, comp, update)`` step after step on
copies of the case's weights, starting from the case's zero buffers, and hands back after every
call ``p`` and ``comp`` (updated in place) and ``update`` (read only).

Neither decides anything: the references and the hints are the judge's (``amp_edu.checks.l12``).
"""

from __future__ import annotations

from typing import Callable

import torch

from ..device import num_threads
from .runner import call

__all__ = ["stochastic_round_plan", "kahan_plan"]


def stochastic_round_plan(cases: list[dict], stochastic_round_fp16: Callable) -> list[dict]:
    """Per case ``{"x", "seeds", ...}``: ``{"rounded": [one outcome per seed], "x": x after the calls}``."""
    out = []
    with num_threads(1):           # elementwise work on a few million values: one thread, no pool to spin
        for case in cases:
            x = case["x"]
            rounded = [call(stochastic_round_fp16, x, torch.Generator().manual_seed(seed)) for seed in case["seeds"]]
            out.append({"rounded": rounded, "x": x})
    return out


def _after(outcome: dict, p, comp, update) -> dict:
    return {"call": outcome, "p": p.clone(), "comp": comp.clone(), "update": update}


def kahan_plan(cases: dict, init_compensation: Callable, kahan_update_: Callable) -> dict:
    """``{"init": outcome of init_compensation(params), "init_as": {dtype name: outcome of
    init_compensation(params, dtype)}, "runs": [[[per weight {"call", "p", "comp", "update"}] per
    step] per run], "tie": {"call", "p", "comp", "update"}}``: the state after each call."""
    params = cases["params"]
    init = call(init_compensation, [p.clone() for p in params])
    init_as = {name: call(init_compensation, [p.clone() for p in params], getattr(torch, name))
               for name in cases["init_dtypes"]}
    runs = []
    with num_threads(1):
        for run in cases["runs"]:
            ps = [p.clone() for p in run["params"]]
            cs = [c.clone() for c in run["comps"]]
            steps = []
            for updates in run["updates"]:
                steps.append([_after(call(kahan_update_, p, c, u), p, c, u) for p, c, u in zip(ps, cs, updates)])
            runs.append(steps)
        tie = cases["tie"]
        p, c, u = tie["p"].clone(), tie["comp"].clone(), tie["update"]
        tied = _after(call(kahan_update_, p, c, u), p, c, u)
    return {"init": init, "init_as": init_as, "runs": runs, "tie": tied}
