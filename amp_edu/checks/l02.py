"""Graders for exercise 02 (where fp16 breaks): the underflow fraction; the lost weight updates.

Both answers are defined by what a cast to fp16 does, so the references come straight from torch's
casts (through :mod:`amp_edu.gradients`). The cases start with the lesson's kind of input and then
go for the edges a nearly-right answer gets wrong: the tie at 2^-25 (rounds to 0), values just
above it (round *up* to 2^-24), negative gradients, exact zeros, the loss scale, several tensors,
no non-zero value at all — and for updates, the half-ulp tie below a power of two, updates that
push a weight up, zero updates and zero weights, where the rule of thumb "update/weight < 2^-11"
is only approximately right. Then cases drawn from the seed: gradients around fp16's floor (ties
included) at drawn loss scales, and fp16 weights with updates near half an ulp (ties included).

Both functions only read their tensors: the plan (:func:`amp_edu.plans.l02.each_reading`) hands
them back after each call, and a changed input fails.
"""

from __future__ import annotations

import math

import torch

from ..gradients import fp16_fractions
from ..plans.l02 import each_reading
from .core import Check, bits, fail, returned, same

__all__ = ["check_underflow_fraction", "check_lost_updates"]


def _f32(*vals) -> torch.Tensor:
    return torch.tensor(vals, dtype=torch.float32)


def _above(x: float) -> float:
    """The next float32 above ``x``."""
    return torch.nextafter(_f32(x), _f32(math.inf)).item()


def _randint(g: torch.Generator, lo: int, hi: int) -> int:
    """An int in [lo, hi) drawn from ``g``."""
    return int(torch.randint(lo, hi, (1,), generator=g))


# --- reading what the plan each_reading sent ----------------------------------------------------
def _identical(a, b) -> bool:
    """``a`` is ``b`` to the last bit: same exact types, tensors of the same dtype, shape and bits."""
    if type(b) is torch.Tensor:
        if type(a) is not torch.Tensor or a.dtype != b.dtype or a.shape != b.shape:
            return False
        if b.is_floating_point() and b.element_size() in (2, 4, 8):
            return bool(torch.equal(bits(a), bits(b)))
        return bool(torch.equal(a, b))
    if type(b) is list or type(b) is tuple:
        return type(a) is list and len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and same(a, b)


def read_each(name: str, cases: list, result) -> list[tuple[dict, list]]:
    """``(outcome, arguments after the call)`` per case from :func:`~amp_edu.plans.l02.each_reading`."""
    outcomes = result.get("outcomes") if type(result) is dict else None
    after = result.get("after") if type(result) is dict else None
    if type(outcomes) is not list or type(after) is not list or not len(outcomes) == len(after) == len(cases):
        raise fail(name, expected=f"{len(cases)} answers", got=result,
                   hint="the grader could not read your function's answers")
    return list(zip(outcomes, after))


def require_unchanged(name: str, case: tuple, after, names: tuple[str, ...], hint: str) -> None:
    """Fail when the learner's function changed one of the arguments it should only read."""
    if type(after) is not list or len(after) != len(case):
        raise fail(name, input=case, expected="the arguments as they were", got=after,
                   hint="the grader could not read your function's arguments after the call")
    for arg, before, now in zip(names, case, after):
        if not _identical(now, before):
            raise fail(name, input=case, expected=f"`{arg}` left as it was",
                       got=f"`{arg}` changed by your function{_change(before, now)}", hint=hint)


def _change(before, now, where: str = "") -> str:
    """Where ``now`` first differs from ``before``, e.g. ``": [0][3] was 1e-3, is now 2e-3"``."""
    if type(before) is torch.Tensor and type(now) is torch.Tensor and before.shape == now.shape \
            and before.dtype == now.dtype:
        b, n = before.reshape(-1), now.reshape(-1)
        diff = (bits(b) != bits(n)) if b.is_floating_point() and b.element_size() in (2, 4, 8) else (b != n)
        if bool(diff.any()):
            i = int(diff.nonzero()[0])
            inside = f"in tensor {where}, " if where else ""
            return f": {inside}element {i} (flattened) was {b[i].item()!r}, is now {n[i].item()!r}"
        return ""
    if type(before) in (list, tuple) and type(now) is list and len(before) == len(now):
        for i, (x, y) in enumerate(zip(before, now)):
            if not _identical(y, x):
                return _change(x, y, f"{where}[{i}]")
        return ""
    if type(before) in (list, tuple) and type(now) is list:
        return f": it held {len(before)} items, now {len(now)}"
    return f": was {before!r}, is now {now!r}" if type(before) is not torch.Tensor else ""


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
    """The named cases: the lesson's kind of gradients, then each edge."""
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
        ([t.clone() for t in lesson] + [torch.zeros(100)], 8.0),
    ]


def _drawn_underflow(seed: int, n: int = 4) -> list[tuple[list, float]]:
    """``n`` cases drawn from ``seed``: 1-3 tensors of gradients whose |g × S| lies around fp16's
    floor (2^-28 .. 2^-20, either sign), with exact zeros and exact ties at 2^-25 / S mixed in, at
    a loss scale S = 2^0 .. 2^16."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        scale = 2.0 ** _randint(g, 0, 17)
        grads = []
        for _ in range(_randint(g, 1, 4)):
            size = _randint(g, 1, 40)
            sign = torch.where(torch.rand(size, generator=g) < 0.5, -1.0, 1.0)
            x = sign * torch.exp2(torch.empty(size).uniform_(-28.0, -20.0, generator=g)) / scale
            pick = torch.rand(size, generator=g)
            x = torch.where(pick < 0.1, torch.zeros(()), x)                                 # exact zeros
            x = torch.where((pick >= 0.1) & (pick < 0.25), sign * (2.0 ** -25 / scale), x)  # the tie
            grads.append(x.float())
        out.append((grads, scale))
    return out


def _underflow_cases(seed: int):
    return _cases_underflow() + _drawn_underflow(seed)


def _underflow_hint(case, expected, got) -> str:
    grads, scale = case
    if type(got) is torch.Tensor:
        return "return a Python float (use .item() or float(...))"
    for v, h in _variants(grads, scale):
        if type(got) in (int, float) and math.isclose(float(got), v, abs_tol=1e-12) \
                and not math.isclose(v, expected, abs_tol=1e-12):
            return h
    return ("cast g × S to torch.float16 and count the non-zero g whose fp16 value is 0, "
            "divided by the number of non-zero g")


def _same_fraction(got, expected) -> bool:
    return type(got) in (int, float) and math.isclose(float(got), expected, rel_tol=1e-9, abs_tol=1e-12)


_READ_ONLY_GRADS = ("the gradients are only read: don't change them in place (no g.mul_(scale), "
                    "g.abs_() ...); compute with new tensors, e.g. g.float() * scale")


def _judge_underflow(cases, result) -> str:
    name = "underflow_fraction"
    for case, (outcome, after) in zip(cases, read_each(name, cases, result)):
        expected = reference_underflow_fraction(*case)
        got = returned(name, outcome, input=case, expected=expected)
        if not _same_fraction(got, expected):
            raise fail(name, input=case, expected=expected, got=got, hint=_underflow_hint(case, expected, got))
        require_unchanged(name, case, after, ("grads", "scale"), _READ_ONLY_GRADS)
    return f"{len(cases)} cases"


check_underflow_fraction = Check("underflow_fraction", cases=_underflow_cases, plan=each_reading,
                                 judge=_judge_underflow, echo=True)
"""Grade ``underflow_fraction(grads, scale) -> float``."""


# --- part B: lost updates -------------------------------------------------------------------
def reference_lost_updates(weight: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    new = (weight.float() - update.float()).to(torch.float16)
    return (new == weight) & (update != 0)


def _cases_lost():
    """The named cases: the lesson's kind of weights and updates, then each edge."""
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(256, generator=g) * 0.1).half()
    u = torch.randn(256, generator=g) * 1e-4
    one = torch.ones(6, dtype=torch.float16)
    h = lambda *v: torch.tensor(v, dtype=torch.float16)  # noqa: E731
    return [
        (w, u),                                                              # like the lesson
        (one, _f32(2.0 ** -12, 2.0 ** -12 + 2.0 ** -24, 3e-4, 2.0 ** -11, 1e-5, 0.0)),  # below 1: half-ulp 2^-12
        (one.clone(), _f32(-(2.0 ** -11), -3e-4, -(2.0 ** -10), -6e-4, -1e-6, -5e-4)),  # above 1: half-ulp 2^-11
        (h(0.0, 0.0, 0.0, -0.0), _f32(2.0 ** -25, _above(2.0 ** -25), 1e-9, 1e-3)),  # zero weights
        (h(6e-8, 1e-6, 1e-5, 100.0), _f32(1e-8, 1e-8, 1e-9, 0.03)),            # subnormal and large
        (h(1.5, 1.5, 1.5, 1.5), _f32(0.0, 0.0, 1e-3, -1e-3)),                  # zero updates are not lost
        (h(0.25, 0.2, 3.0, -2.0), _f32(2.0 ** -14, 2.0 ** -14, 2.0 ** -10, 2.0 ** -11)),
        ((torch.rand(512, generator=g) + 0.5).half(), torch.randn(512, generator=g) * 3e-4),
    ]


def _drawn_lost(seed: int, n: int = 2, size: int = 128) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` cases drawn from ``seed``: fp16 weights of magnitude 2^-8 .. 2^8, either sign, with
    updates of 2^-13 .. 2^-10 of the weight (around half an ulp, either direction), a third of them
    exactly a power of two of it (the ties), one in nine exactly 0."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        w = (torch.randn(size, generator=g) * torch.exp2(torch.randint(-8, 9, (size,), generator=g).float())).half()
        rel = torch.exp2(torch.randint(-13, -9, (size,), generator=g).float())
        wobble = 1 + (torch.rand(size, generator=g) - 0.5) * 2.0 ** -6
        rel = torch.where(torch.rand(size, generator=g) < 1 / 3, rel, rel * wobble)
        sign = torch.where(torch.rand(size, generator=g) < 0.5, -1.0, 1.0)
        u = w.float() * rel * sign
        u[::9] = 0.0
        out.append((w, u))
    return out


def _lost_cases(seed: int):
    return _cases_lost() + _drawn_lost(seed)


_READ_ONLY_LOST = ("weight and update are only read: don't change them in place (no weight.sub_(update)); "
                   "compute weight.float() - update into a new tensor")


def _judge_lost(cases, result) -> str:
    name = "lost_updates"
    for (w, u), (outcome, after) in zip(cases, read_each(name, cases, result)):
        expected = reference_lost_updates(w, u)
        got = returned(name, outcome, input=(w, u), expected=expected)
        if type(got) is not torch.Tensor or got.dtype != torch.bool or got.shape != w.shape:
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
        require_unchanged(name, (w, u), after, ("weight", "update"), _READ_ONLY_LOST)
    return f"{len(cases)} cases"


check_lost_updates = Check("lost_updates", cases=_lost_cases, plan=each_reading, judge=_judge_lost, echo=True)
"""Grade ``lost_updates(weight_fp16, update_fp32) -> bool tensor``."""
