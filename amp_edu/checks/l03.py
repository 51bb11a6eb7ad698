"""Graders for exercise 03 (loss scaling by hand): choose S; write a loss-scaled training step.

``check_choose_scale`` compares with :func:`amp_edu.gradients.max_safe_scale` on gradients whose
largest magnitude sits exactly on a boundary, is negative, hides in a later tensor, or already
exceeds 65504 (so S < 1). ``check_scaled_step`` *runs* the learner's step on a small fp16 model
next to the reference, on a clean batch, a batch whose scaled gradients overflow (while the loss
stays finite), a batch with a NaN, a batch where a single gradient value overflows (to inf, in
one parameter only), and sequences of them — and compares the return value, every parameter and
every gradient bit for bit.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..gradients import max_safe_scale
from .core import call_learner, check_cases, fail, passed, require_callable, same

__all__ = ["check_choose_scale", "check_scaled_step", "reference_choose_scale", "reference_scaled_step"]


# --- part A: choose S from the largest gradient -----------------------------------------------
def reference_choose_scale(grads) -> float:
    return max_safe_scale(list(grads))


def _cases_scale():
    f = lambda *v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    g = torch.Generator().manual_seed(4)
    return [
        ([torch.randn(100, generator=g) * 1e-3],),          # a typical set of gradients
        ([f(1.0, 0.5)],),                                   # 2^16 * 1 = 65536 > 65504: S = 2^15
        ([f(65504.0 / 1024, 1.0)],),                        # exactly on the limit: S = 1024 is safe
        ([f(1e-3, 2e-3), f(-3.0, 0.1)],),                   # the largest is negative, in a later tensor
        ([f(1e6, 2.0)],),                                   # already above 65504: S < 1
        ([f(3e-9, -1e-10)],),                               # tiny gradients: a large S
        ([f(0.0, 0.0), f(5.0)],),                           # zeros don't matter
        ([f(4000.0)],),                                     # log2(65504/4000) = 4.03: floor, not round
        ([f(2900.0)],),                                     # log2(65504/2900) = 4.50: round would overflow
    ]


def check_choose_scale(fn) -> str:
    """Grade ``choose_scale(grads) -> float``."""
    name = "choose_scale"

    def hint(case, expected, got):
        (grads,) = case
        m = max(float(t.abs().max()) for t in grads)
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not got > 0:
            return "return a positive float, a power of two"
        if math.frexp(got)[0] != 0.5:
            return "S must be a power of two (then scaling and unscaling are exact): 2 ** k"
        if len(grads) > 1 and float(grads[0].abs().max()) != m and got == max_safe_scale([grads[0]]):
            return "take the largest |g| over ALL tensors"
        if expected < 1 and got == 1.0:
            return "when gradients already exceed 65504 the safe power of two is below 1: don't clamp at 1"
        if got * m > 65504:
            return (f"S = {got:g} makes the largest |g| = {m:g} overflow: {got * m:g} > 65504 "
                    "(use the magnitude |g|, and floor, not round)")
        if got == expected / 2 and expected * m == 65504.0:
            return "landing exactly on 65504 is fine (it is fp16's max): use <=, not <"
        if got < expected:
            return f"2 × {got:g} still keeps {m:g} × S <= 65504: pick the LARGEST such power of two"
        return "S = 2 ** floor(log2(65504 / max|g|)), the max taken over the magnitudes of every tensor"

    def compare(got, expected):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and float(got) == expected

    res = check_cases(name, fn, _cases_scale(), reference_choose_scale, hint=hint, compare=compare)
    return res


# --- part B: a loss-scaled step that skips non-finite gradients --------------------------------
def reference_scaled_step(model, optimizer, loss_fn, x, y, scale) -> bool:
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    (loss * scale).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        optimizer.zero_grad(set_to_none=True)
        return False
    for g in grads:
        g.div_(scale)
    optimizer.step()
    return True


def _model(seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    return m.half()


def _loss_fn(out, y):
    return ((out.float() - y) ** 2).mean()


def _batch(kind: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 4, generator=g)
    y = torch.randn(16, 1, generator=g)
    if kind == "overflow":        # targets far away: huge gradients; the loss itself stays finite
        y = y * 0 + 300.0
    elif kind == "nan":
        x[3, 1] = float("nan")
    return x.half(), y


# (description, [(batch kind, scale), ...]) — each scenario runs on a fresh model
_SCENARIOS = [
    ("one clean batch, S = 1024", [("clean", 1024.0)]),
    ("a batch whose scaled gradients overflow fp16 (S = 2^14), the loss being finite", [("overflow", 2.0 ** 14)]),
    ("a batch with a NaN in x, S = 8", [("nan", 8.0)]),
    ("two clean batches in a row, S = 256", [("clean", 256.0), ("clean", 256.0)]),
    ("overflow (S = 2^14), then a clean batch (S = 2^14)", [("overflow", 2.0 ** 14), ("clean", 2.0 ** 14)]),
    ("NaN, then a clean batch, S = 32", [("nan", 32.0), ("clean", 32.0)]),
    ("one clean batch, S = 1", [("clean", 1.0)]),
    # only ONE gradient value overflows, to inf (no NaN anywhere), in a middle parameter: catches a
    # check that looks for NaN only, or at one parameter only (tests/test_checks_l03.py proves it)
    ("a clean batch at S = 2^18: one weight gradient overflows to inf, every other gradient is finite",
     [("clean", 2.0 ** 18)]),
]


def _grads_equal(got_model, ref_model, stepped: bool) -> bool:
    for p, q in zip(got_model.parameters(), ref_model.parameters()):
        if stepped:
            if p.grad is None or not same(p.grad, q.grad):
                return False
        elif p.grad is not None and bool((p.grad != 0).any()):
            return False
    return True


def check_scaled_step(fn) -> str:
    """Grade ``scaled_step(model, optimizer, loss_fn, x, y, scale) -> bool`` by running it."""
    name = "scaled_step"
    require_callable(name, fn)
    for i, (desc, seq) in enumerate(_SCENARIOS):
        mine, ref = _model(i), _model(i)
        opt_mine = torch.optim.SGD(mine.parameters(), lr=0.05)
        opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05)
        for j, (kind, scale) in enumerate(seq):
            x, y = _batch(kind, 100 * i + j)
            want = reference_scaled_step(ref, opt_ref, _loss_fn, x, y, scale)
            got = call_learner(name, fn, (mine, opt_mine, _loss_fn, x.clone(), y.clone(), scale),
                               input=desc, expected=f"returns {want}", hint="your step raised on this input")
            where = f"{desc} — call {j + 1} ({kind} batch)"
            if got is not want:
                hint = ("check EVERY gradient with torch.isfinite (inf and NaN), after backward from loss * scale; "
                        "return False and skip the step when one is not finite" if want is False else
                        "a clean batch must step and return True")
                raise fail(name, input=where, expected=want, got=got, hint=hint)
            params_ok = all(same(p.detach(), q.detach()) for p, q in zip(mine.parameters(), ref.parameters()))
            if not params_ok:
                nonfinite = any(not bool(torch.isfinite(p).all()) for p in mine.parameters())
                if nonfinite:
                    hint = "inf/NaN reached the weights: do not call optimizer.step() when you skip"
                elif want and j > 0:
                    hint = ("clear old gradients (optimizer.zero_grad()) before backward: they accumulate "
                            "across calls")
                elif want and scale != 1.0:
                    hint = "the weights moved differently: divide every gradient by scale before optimizer.step()"
                elif not want:
                    hint = "a skipped step must leave every weight exactly as it was"
                else:
                    hint = "clear old gradients (optimizer.zero_grad()) before backward: they accumulate"
                raise fail(name, input=where, expected="the reference's weights",
                           got="different weights", hint=hint)
            if not _grads_equal(mine, ref, want):
                hint = ("after a step, .grad must hold the UNSCALED gradients (grad / scale)" if want else
                        "after a skipped step clear the gradients (optimizer.zero_grad()), or the next "
                        "step would add to inf/NaN")
                raise fail(name, input=where, expected="the reference's gradients", got="different gradients",
                           hint=hint)
    return passed(name, f"{len(_SCENARIOS)} scenarios")
