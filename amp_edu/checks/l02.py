"""Graders for exercise 02 (where fp16 breaks): the underflow fraction; the lost weight updates.

Both answers are defined by what a cast to fp16 does, so the references come straight from torch's
casts (through :mod:`amp_edu.gradients`). The cases start with the lesson's kind of input and then
go for the edges a nearly-right answer gets wrong: the tie at 2^-25 (rounds to 0), values just
above it (round *up* to 2^-24), negative gradients, exact zeros, the loss scale, several tensors,
no non-zero value at all — and for updates, the half-ulp tie below a power of two, updates that
push a weight up, zero updates and zero weights, where the rule of thumb "update/weight < 2^-11"
is only approximately right.
"""

from __future__ import annotations

import math

import torch

from ..gradients import fp16_fractions
from .core import call_learner, check_cases, fail, passed, require_callable, same

__all__ = ["check_underflow_fraction", "check_lost_updates", "reference_underflow_fraction",
           "reference_lost_updates"]


def _f32(*vals) -> torch.Tensor:
    return torch.tensor(vals, dtype=torch.float32)


def _above(x: float) -> float:
    """The next float32 above ``x``."""
    return torch.nextafter(_f32(x), _f32(math.inf)).item()


# --- part A: underflow fraction -------------------------------------------------------------
def reference_underflow_fraction(grads, scale: float = 1.0) -> float:
    return fp16_fractions(list(grads), scale)["flush_of_nonzero"]


def _variants(grads, scale):
    """What the usual wrong answers return, each with the hint that fixes it."""
    x = torch.cat([g.reshape(-1) for g in grads]).float()
    a = (x * scale).abs()
    nz = x != 0
    n_nz = int(nz.sum())
    frac = lambda m, d=n_nz: (int(m.sum()) / d) if d else 0.0  # noqa: E731
    out = [
        (frac(nz & (a < 2.0 ** -25)),
         "2^-25 itself is a tie between 0 and 2^-24 and rounds to even, i.e. to 0: it flushes (use <=, or cast)"),
        (frac(nz & (a < 2.0 ** -24)),
         "values in (2^-25, 2^-24) round UP to 2^-24, they are not lost; only |g×S| <= 2^-25 becomes 0"),
        (frac((x * scale).half() == 0, x.numel()) if x.numel() else 0.0,
         "exact zeros were zero before fp16: leave them out of both the count and the total"),
        (frac(nz & ((x * scale).half() == 0), x.numel()) if x.numel() else 0.0,
         "divide by the number of NON-ZERO values, not by all values"),
        (frac(nz & (x.half() == 0)),
         "multiply by the loss scale S before casting: the question is about g × S in fp16"),
        (frac(nz & ((x * scale) <= 2.0 ** -25)),
         "take the magnitude: a negative gradient -1e-3 is not below the floor"),
        (frac(grads[0].reshape(-1).ne(0) & (grads[0].reshape(-1).float() * scale).half().eq(0),
              int(grads[0].ne(0).sum())) if len(grads) > 1 else None,
         "count over ALL the tensors in the list, not just the first"),
    ]
    return [(v, h) for v, h in out if v is not None]


def _cases_underflow():
    g = torch.Generator().manual_seed(2)
    lesson = [torch.randn(64, 32, generator=g) * torch.exp2(torch.randint(-34, -6, (64, 32), generator=g).float())]
    t25, up = 2.0 ** -25, _above(2.0 ** -25)
    return [
        (lesson, 1.0),                                                        # like the lesson's gradients
        ([_f32(t25, t25, 1e-3, 1e-3)], 1.0),                                  # the tie at 2^-25 flushes
        ([_f32(up, up, up, 1e-9)], 1.0),                                      # just above the tie: kept
        ([_f32(3e-8, 4e-8, 5e-8, 1.0)], 1.0),                                 # (2^-25, 2^-24) rounds up
        ([_f32(-1e-3, -2e-3, -1e-9, 1e-3)], 1.0),                             # negatives: magnitudes
        ([_f32(0.0, 0.0, 0.0, 1e-9, 1e-3, 0.0)], 1.0),                        # zeros are not underflow
        ([_f32(1e-9, 1e-9, 1e-4, 1e-4)], 2.0 ** 10),                          # the scale rescues them
        ([_f32(1e-4, 1e-3), _f32(1e-9, 1e-10, 1e-11), torch.zeros(2, 2)], 1.0),  # several tensors
        ([torch.zeros(5), torch.zeros(3)], 1.0),                              # nothing non-zero: 0.0
        ([_f32(1e-40, 1e-45, 1.0, 70000.0)], 1.0),                            # fp32 subnormals; overflow
        ([_f32(2.0 ** -35, 2.0 ** -36, 2.0 ** -30)], 2.0 ** 10),              # the tie after scaling
        (lesson + [torch.zeros(100)], 8.0),
    ]


def check_underflow_fraction(fn) -> str:
    """Grade ``underflow_fraction(grads, scale) -> float``."""
    name = "underflow_fraction"

    def hint(case, expected, got):
        grads, scale = case
        if isinstance(got, torch.Tensor):
            return "return a Python float (use .item() or float(...))"
        for v, h in _variants(grads, scale):
            if isinstance(got, (int, float)) and math.isclose(float(got), v, abs_tol=1e-12) \
                    and not math.isclose(v, expected, abs_tol=1e-12):
                return h
        return ("cast g × S to torch.float16 and count the non-zero g whose fp16 value is 0, "
                "divided by the number of non-zero g")

    def compare(got, expected):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and \
            math.isclose(float(got), expected, rel_tol=1e-9, abs_tol=1e-12)

    return check_cases(name, fn, _cases_underflow(), reference_underflow_fraction, hint=hint, compare=compare)


# --- part B: lost updates -------------------------------------------------------------------
def reference_lost_updates(weight: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    new = (weight.float() - update.float()).to(torch.float16)
    return (new == weight) & (update != 0)


def _cases_lost():
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(256, generator=g) * 0.1).half()
    u = torch.randn(256, generator=g) * 1e-4
    one = torch.ones(6, dtype=torch.float16)
    h = lambda *v: torch.tensor(v, dtype=torch.float16)  # noqa: E731
    return [
        (w, u),                                                              # like the lesson
        (one, _f32(2.0 ** -12, 2.0 ** -12 + 2.0 ** -24, 3e-4, 2.0 ** -11, 1e-5, 0.0)),  # below 1: half-ulp 2^-12
        (one, _f32(-(2.0 ** -11), -3e-4, -(2.0 ** -10), -6e-4, -1e-6, -5e-4)),     # above 1: half-ulp 2^-11
        (h(0.0, 0.0, 0.0, -0.0), _f32(2.0 ** -25, _above(2.0 ** -25), 1e-9, 1e-3)),  # zero weights
        (h(6e-8, 1e-6, 1e-5, 100.0), _f32(1e-8, 1e-8, 1e-9, 0.03)),            # subnormal and large
        (h(1.5, 1.5, 1.5, 1.5), _f32(0.0, 0.0, 1e-3, -1e-3)),                  # zero updates are not lost
        (h(0.25, 0.2, 3.0, -2.0), _f32(2.0 ** -14, 2.0 ** -14, 2.0 ** -10, 2.0 ** -11)),
        ((torch.rand(512, generator=g) + 0.5).half(), torch.randn(512, generator=g) * 3e-4),
    ]


def check_lost_updates(fn) -> str:
    """Grade ``lost_updates(weight_fp16, update_fp32) -> bool tensor``."""
    name = "lost_updates"
    require_callable(name, fn)
    n = 0
    for w, u in _cases_lost():
        expected = reference_lost_updates(w, u)
        got = call_learner(name, fn, (w.clone(), u.clone()), input=(w, u), expected=expected)
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or got.shape != w.shape:
            raise fail(name, input=(w, u), expected=expected, got=got,
                       hint="return a bool tensor of the weight's shape (True where the update is lost)")
        if not same(got, expected):
            bad = int((got != expected).nonzero()[0])
            wb, ub = float(w[bad]), float(u[bad])
            rule = abs(ub) < 2.0 ** -11 * abs(wb)
            if ub == 0:
                h = "an update of exactly 0 changes nothing, but nothing was lost either: require update != 0"
            elif same(got, ((w.float() + u.float()).half() == w) & (u != 0)):
                h = "the update is subtracted, as an optimizer does: new weight = float32(w) - update, not w + update"
            elif bool(got[bad]) == bool(((w.float() - u.half().float()).half() == w)[bad] & (u[bad] != 0)):
                h = "don't round the update to fp16 first: compute float32(w) - update, then round once"
            elif bool(got[bad]) == rule:
                h = ("the ratio rule |update| < 2^-11 |weight| is only a rule of thumb: round float(w) - update "
                     "to fp16 and see whether the weight changed (the half-ulp differs above and below 2^k)")
            else:
                h = "lost means: (float32(w) - update) rounded to fp16 equals w, although update != 0"
            raise fail(name, input=f"weight={wb!r} (fp16), update={ub!r}", expected=bool(expected[bad]),
                       got=bool(got[bad]), hint=h)
        n += 1
    return passed(name, f"{n} cases")
