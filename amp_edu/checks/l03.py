"""Graders for exercise 03 (loss scaling by hand): choose S; write a loss-scaled training step.

``check_choose_scale`` compares with :func:`amp_edu.gradients.max_safe_scale` on gradients whose
largest magnitude sits exactly on a boundary, is negative, hides in a later tensor, or already
exceeds 65504 (so S < 1). ``check_scaled_step`` *runs* the learner's step — fp16 model, fp32
master copy, static scale — next to the reference, on a clean batch, a batch whose scaled
gradients overflow (while the loss stays finite), a batch with a NaN, a batch where a single
gradient value overflows (to inf, in one parameter only), a batch whose true gradients lie below
fp16's floor (unscaling them *in fp16* would flush or round them: the division belongs in fp32,
where lesson 04's scaler does it too), a model with a parameter the forward never uses, and
sequences of them — and compares the return value, every master weight, every fp16 weight and
every master gradient bit for bit.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..gradients import max_safe_scale
from ..models import seeded
from .core import call_learner, fail, passed, require_callable, same

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


def _low_precision_case():
    """fp16 and bf16 gradients (a pure-fp16 model's): the arithmetic belongs in Python floats, not in
    the gradients' dtype, where 65504 / 1e-3 is already inf."""
    return [torch.tensor([1e-3, -2e-4], dtype=torch.float16), torch.tensor([5e-4], dtype=torch.bfloat16)]


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

    require_callable(name, fn)
    low = _low_precision_case()
    low_hint = ("fp16/bf16 gradients: take float(...) of the max before you compute with it — in fp16, "
                "65504 / max|g| overflows to inf")
    cases = [case[0] for case in _cases_scale()] + [low]
    for grads in cases:
        expected = reference_choose_scale(grads)
        got = call_learner(name, fn, (grads,), input=grads, expected=expected,
                           hint=low_hint if grads is low else "your function raised on this input")
        if not compare(got, expected):
            raise fail(name, input=grads, expected=expected, got=got,
                       hint=low_hint if grads is low and isinstance(got, torch.Tensor) else hint((grads,), expected, got))
    return passed(name, f"{len(cases)} cases")


# --- part B: a loss-scaled step with an fp32 master copy ---------------------------------------
def reference_scaled_step(model, master, optimizer, loss_fn, x, y, scale) -> bool:
    for p in model.parameters():
        p.grad = None
    loss = loss_fn(model(x), y)
    (loss * scale).backward()
    grads = [p.grad for p in model.parameters()]
    if not all(bool(torch.isfinite(g).all()) for g in grads if g is not None):
        return False
    for m, g in zip(master, grads):
        m.grad = None if g is None else g.float() / scale      # unscale in fp32, never in fp16
    optimizer.step()
    with torch.no_grad():
        for p, m in zip(model.parameters(), master):
            p.copy_(m)
    return True


class _Net(nn.Module):
    """A small fp16 model; with ``spare=True`` its FIRST parameters belong to a layer the forward
    never uses (their ``.grad`` stays None), so filtering the None gradients misaligns the zip."""

    def __init__(self, spare: bool):
        super().__init__()
        if spare:
            self.spare = nn.Linear(8, 1)
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x):
        return self.body(x)


def _model(seed: int, spare: bool = False) -> nn.Module:
    with seeded(seed):
        m = _Net(spare)
    return m.half()


def _setup(seed: int, spare: bool = False):
    model = _model(seed, spare)
    master = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()]
    return model, master, torch.optim.SGD(master, lr=0.05)


def _loss_fn(out, y):
    return ((out.float() - y) ** 2).mean()


def _tilted_loss(out, y):
    """A loss that is not symmetric in its arguments: loss_fn(y, model(x)) gives other gradients."""
    return ((out.float() - y) ** 2).mean() + 0.5 * out.float().mean()


TINY_OFFSET = 2.0 ** -20   # targets this close to the outputs: true gradients below fp16's 2^-24


def _batch(kind: str, seed: int, model=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 4, generator=g)
    y = torch.randn(16, 1, generator=g)
    if kind == "overflow":        # targets far away: huge gradients; the loss itself stays finite
        y = y * 0 + 300.0
    elif kind == "nan":
        x[3, 1] = float("nan")
    elif kind == "tiny":          # targets a hair from the outputs: tiny true gradients
        with torch.no_grad():
            y = model(x.half()).float() + TINY_OFFSET
    return x.half(), y


# (description, [(batch kind, scale), ...], spare layer?) — each scenario runs on a fresh model
_SCENARIOS = [
    ("one clean batch, S = 1024", [("clean", 1024.0)], False),
    ("a batch whose scaled gradients overflow fp16 (S = 2^14), the loss being finite", [("overflow", 2.0 ** 14)], False),
    ("a batch with a NaN in x, S = 8", [("nan", 8.0)], False),
    ("two clean batches in a row, S = 256", [("clean", 256.0), ("clean", 256.0)], False),
    ("overflow (S = 2^14), then a clean batch (S = 2^14)", [("overflow", 2.0 ** 14), ("clean", 2.0 ** 14)], False),
    ("NaN, then a clean batch, S = 32", [("nan", 32.0), ("clean", 32.0)], False),
    ("one clean batch, S = 1", [("clean", 1.0)], False),
    # only ONE gradient value overflows, to inf (no NaN anywhere), in a middle parameter: catches a
    # check that looks for NaN only, or at one parameter only (tests/test_checks_l03.py proves it)
    ("a clean batch at S = 2^18: one weight gradient overflows to inf, every other gradient is finite",
     [("clean", 2.0 ** 18)], False),
    # true gradients around 2^-27..2^-20: fine in fp16 once scaled by 2^16, ruined if divided back in fp16
    ("targets 2^-20 from the outputs, S = 2^16: the true gradients lie below fp16's smallest subnormal",
     [("tiny", 2.0 ** 16)], False),
    ("a model whose first layer the forward never uses (its .grad stays None), two clean batches, S = 64",
     [("clean", 64.0), ("clean", 64.0)], True),
    ("a loss that is not symmetric, loss_fn(out, y) = mean((out - y)^2) + 0.5 mean(out), one clean batch, "
     "S = 1024", [("clean", 1024.0)], False, _tilted_loss),
]


def _fp16_unscaled_differs(model, scale) -> bool:
    """Would dividing these fp16 gradients by ``scale`` in fp16 give other values than in fp32?"""
    for p in model.parameters():
        if p.grad is not None and not torch.equal((p.grad / scale).float(), p.grad.float() / scale):
            return True
    return False


_SPARE_HINT = ("pair each master tensor with ITS OWN fp16 parameter (zip the full lists): a parameter "
               "the forward does not use has .grad None — give its master .grad None, don't filter it out")


def check_scaled_step(fn) -> str:
    """Grade ``scaled_step(model, master, optimizer, loss_fn, x, y, scale) -> bool`` by running it."""
    name = "scaled_step"
    require_callable(name, fn)
    for i, (desc, seq, spare, *loss) in enumerate(_SCENARIOS):
        loss_fn = loss[0] if loss else _loss_fn
        model, master, opt = _setup(i, spare)
        ref, ref_master, ref_opt = _setup(i, spare)
        for j, (kind, scale) in enumerate(seq):
            x, y = _batch(kind, 100 * i + j, ref)
            want = reference_scaled_step(ref, ref_master, ref_opt, loss_fn, x, y, scale)
            fp16_division_matters = want and _fp16_unscaled_differs(ref, scale)
            where = f"{desc} — call {j + 1} ({kind} batch)"
            got = call_learner(name, fn, (model, master, opt, loss_fn, x.clone(), y.clone(), scale),
                               input=where, expected=f"returns {want}",
                               hint=lambda exc: (_SPARE_HINT if spare else "your step raised on this input"))
            if got is not want:
                hint = ("check EVERY gradient with torch.isfinite (inf and NaN), after backward from loss * scale; "
                        "return False and skip the step when one is not finite" if want is False else
                        "a clean batch must step and return True")
                raise fail(name, input=where, expected=want, got=got, hint=hint)
            master_ok = all(same(m.detach(), r.detach()) for m, r in zip(master, ref_master))
            if not master_ok:
                if any(not bool(torch.isfinite(m).all()) for m in master):
                    hint = "inf/NaN reached the master weights: do not call optimizer.step() when you skip"
                elif not want:
                    hint = "a skipped step must leave every master weight exactly as it was"
                elif spare:
                    hint = _SPARE_HINT
                elif loss:
                    hint = ("call loss_fn(model(x), y): the model's output first, then the target (this "
                            "loss is not symmetric, so swapped arguments give other gradients)")
                elif kind == "tiny" and fp16_division_matters:
                    hint = ("unscale in float32: convert the fp16 gradient to float32 FIRST, then divide by "
                            "scale — divided in fp16, these small gradients fall back under fp16's floor "
                            "(2^-24) and are flushed or rounded")
                elif j > 0:
                    hint = ("clear the fp16 model's old gradients before backward: .grad accumulates "
                            "across calls")
                elif scale != 1.0:
                    hint = ("the master weights moved differently: give each master tensor the fp16 gradient "
                            "as float32, divided by scale, before optimizer.step()")
                else:
                    hint = "clear the fp16 model's old gradients before backward: they accumulate"
                raise fail(name, input=where, expected="the reference's master weights",
                           got="different master weights", hint=hint)
            if not all(same(p.detach(), q.detach()) for p, q in zip(model.parameters(), ref.parameters())):
                hint = ("after optimizer.step(), copy every master weight back into its fp16 parameter "
                        "(p.copy_(m) under torch.no_grad()): the fp16 model must follow the master copy"
                        if want else "a skipped step must leave the fp16 model exactly as it was")
                raise fail(name, input=where, expected="the reference's fp16 weights",
                           got="different fp16 weights", hint=hint)
            if want and not all((m.grad is None and r.grad is None) or
                                (m.grad is not None and r.grad is not None and same(m.grad, r.grad))
                                for m, r in zip(master, ref_master)):
                raise fail(name, input=where, expected="the reference's master gradients",
                           got="different master gradients",
                           hint="after a step, each master .grad must hold the UNSCALED float32 gradient "
                                "(fp16 grad converted to float32, divided by scale)")
    return passed(name, f"{len(_SCENARIOS)} scenarios")
