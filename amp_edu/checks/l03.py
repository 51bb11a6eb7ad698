"""Graders for exercise 03 (loss scaling by hand): choose S; write a loss-scaled training step.

``check_choose_scale`` compares with :func:`amp_edu.gradients.max_safe_scale` on gradients whose
largest magnitude sits exactly on a boundary, is negative, hides in a later tensor, or already
exceeds 65504 (so S < 1), on fp16/bf16 gradients, then on gradients drawn from the seed (some with
their largest magnitude exactly on a boundary 65504 / 2^k); the gradients must be left as they were.
``check_scaled_step`` *runs* the learner's step — fp16 model, fp32 master copy, static scale — next
to the reference, on a clean batch, a batch whose scaled gradients overflow (while the loss stays
finite), a batch with a NaN, a batch where a single gradient value overflows (to inf, in one
parameter only), a batch whose true gradients lie below fp16's floor (unscaling them *in fp16*
would flush or round them: the division belongs in fp32, where lesson 04's scaler does it too), a
model with a parameter the forward never uses, and sequences of them, then two scenarios drawn from
the seed — and compares the return value, every master weight, every fp16 weight and every master
gradient bit for bit. The model, master copy and optimizer are built where the step runs, from the
scenario's description (:mod:`amp_edu.plans.l03`); the judge builds its own the same way.
"""

from __future__ import annotations

import math

import torch

from ..gradients import max_safe_scale
from ..plans import l03 as plan
from ..plans.l02 import each_reading
from .core import Check, fail, returned, same
from .l02 import read_each, require_unchanged

__all__ = ["check_choose_scale", "check_scaled_step"]


def _randint(g: torch.Generator, lo: int, hi: int) -> int:
    """An int in [lo, hi) drawn from ``g``."""
    return int(torch.randint(lo, hi, (1,), generator=g))


# --- part A: choose S from the largest gradient -----------------------------------------------
def reference_choose_scale(grads) -> float:
    return max_safe_scale(list(grads))


def _cases_scale():
    """The named cases."""
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


def _drawn_scale(seed: int, n: int = 4) -> list[tuple[list]]:
    """``n`` cases drawn from ``seed``: 1-3 float32 tensors of gradients of magnitude around
    2^-30 .. 2^20; in every other case the largest magnitude is exactly 65504 / 2^k (a boundary)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        grads = []
        for _ in range(_randint(g, 1, 4)):
            size = _randint(g, 1, 50)
            grads.append(torch.randn(size, generator=g) * 2.0 ** _randint(g, -30, 20))
        if i % 2:
            t = grads[_randint(g, 0, len(grads))]
            m = max(float(x.abs().max()) for x in grads)
            edge = 65504.0 * 2.0 ** math.ceil(math.log2(m / 65504.0) + 1e-9)   # >= the largest
            t[_randint(g, 0, t.numel())] = -edge if _randint(g, 0, 2) else edge
        out.append((grads,))
    return out


def _scale_cases(seed: int):
    return _cases_scale() + [(_low_precision_case(),)] + _drawn_scale(seed)


_LOW_HINT = ("fp16/bf16 gradients: take float(...) of the max before you compute with it — in fp16, "
             "65504 / max|g| overflows to inf")


def _is_low(grads) -> bool:
    return any(t.dtype in (torch.float16, torch.bfloat16) for t in grads)


def _safe_scale_or_none(grads):
    try:
        return max_safe_scale(list(grads))
    except ValueError:                 # nothing non-zero to go by
        return None


def _scale_hint(case, expected, got) -> str:
    (grads,) = case
    m = max(float(t.abs().max()) for t in grads)
    if type(got) not in (int, float) or not got > 0:
        return "return a positive float, a power of two"
    if math.frexp(got)[0] != 0.5:
        return "S must be a power of two (then scaling and unscaling are exact): 2 ** k"
    if len(grads) > 1 and float(grads[0].abs().max()) != m and got == _safe_scale_or_none([grads[0]]):
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


def _judge_scale(cases, result) -> str:
    name = "choose_scale"
    for case, (outcome, after) in zip(cases, read_each(name, cases, result)):
        (grads,) = case
        low = _is_low(grads)
        expected = reference_choose_scale(grads)
        got = returned(name, outcome, input=grads, expected=expected,
                       hint=_LOW_HINT if low else "your function raised on this input")
        if not (type(got) in (int, float) and float(got) == expected):
            raise fail(name, input=grads, expected=expected, got=got,
                       hint=_LOW_HINT if low and type(got) is torch.Tensor else _scale_hint(case, expected, got))
        require_unchanged(name, case, after, ("grads",),
                          "the gradients are only read: don't change them in place (no g.abs_() ...)")
    return f"{len(cases)} cases"


check_choose_scale = Check("choose_scale", cases=_scale_cases, plan=each_reading, judge=_judge_scale, echo=True)
"""Grade ``choose_scale(grads) -> float``."""


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


_Net = plan.Net
_model = plan.model
_setup = plan.setup
_loss_fn = plan.mse_loss
_tilted_loss = plan.tilted_loss
_LOSS_NAMES = {plan.mse_loss: "mse", plan.tilted_loss: "tilted"}

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


# (description, [(batch kind, scale), ...], spare layer?[, loss]) — each scenario runs on a fresh
# model from seed = its index; call j of scenario i draws its batch from seed 100 i + j
_SCENARIOS = [
    ("one clean batch, S = 1024", [("clean", 1024.0)], False),
    ("a batch whose scaled gradients overflow fp16 (S = 2^14), the loss being finite", [("overflow", 2.0 ** 14)], False),
    ("a batch with a NaN in x, S = 8", [("nan", 8.0)], False),
    ("two clean batches in a row, S = 256", [("clean", 256.0), ("clean", 256.0)], False),
    ("overflow (S = 2^14), then a clean batch (S = 2^14)", [("overflow", 2.0 ** 14), ("clean", 2.0 ** 14)], False),
    ("NaN, then a clean batch, S = 32", [("nan", 32.0), ("clean", 32.0)], False),
    ("one clean batch, S = 1", [("clean", 1.0)], False),
    # only ONE gradient value overflows, to inf (no NaN anywhere), in a middle parameter: catches a
    # check that looks for NaN only, or at one parameter only (tests/checks/test_l03.py proves it)
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


def _scenario(desc: str, seed: int, seq, spare: bool, loss: str, batch_seeds) -> dict:
    """A scenario by value: the model's seed, the spare layer, the loss by name and each call's
    batch (``tiny`` targets are a hair from the outputs of the fresh model, so only first)."""
    fresh = _model(seed, spare) if any(kind == "tiny" for kind, _ in seq) else None
    calls = []
    for (kind, scale), b in zip(seq, batch_seeds):
        x, y = _batch(kind, b, fresh)
        calls.append({"kind": kind, "scale": float(scale), "x": x, "y": y})
    return {"desc": desc, "seed": seed, "spare": spare, "loss": loss, "calls": calls}


_KIND_SAYS = {"clean": "a clean batch", "overflow": "a batch whose gradients are huge",
              "nan": "a batch with a NaN in x", "tiny": "targets 2^-20 from the outputs"}


def _drawn_scenarios(seed: int, n: int = 2) -> list[dict]:
    """``n`` scenarios drawn from ``seed``: a fresh model (its seed drawn, a spare layer or not),
    two or three calls, the first a clean, overflowing, NaN or tiny batch, then clean, overflowing or
    NaN ones, each at S = 2^0 .. 2^18."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        model_seed = _randint(g, 1000, 2 ** 30)
        spare = bool(_randint(g, 0, 2))
        seq = []
        for j in range(_randint(g, 2, 4)):
            kinds = ("clean", "overflow", "nan", "tiny") if j == 0 else ("clean", "overflow", "nan")
            seq.append((kinds[_randint(g, 0, len(kinds))], 2.0 ** _randint(g, 0, 19)))
        desc = (f"a model drawn from seed {model_seed}" + (" with a layer the forward never uses" if spare else "")
                + ": " + ", then ".join(f"{_KIND_SAYS[kind]} at S = 2^{int(math.log2(s))}" for kind, s in seq))
        out.append(_scenario(desc, model_seed, seq, spare, "mse",
                             [_randint(g, 0, 2 ** 30) for _ in seq]))
    return out


def _step_cases(seed: int) -> list[dict]:
    named = [_scenario(desc, i, seq, spare, _LOSS_NAMES[loss[0]] if loss else "mse",
                       [100 * i + j for j in range(len(seq))])
             for i, (desc, seq, spare, *loss) in enumerate(_SCENARIOS)]
    return named + _drawn_scenarios(seed)


def _fp16_unscaled_differs(model, scale) -> bool:
    """Would dividing these fp16 gradients by ``scale`` in fp16 give other values than in fp32?"""
    for p in model.parameters():
        if p.grad is not None and not torch.equal((p.grad / scale).float(), p.grad.float() / scale):
            return True
    return False


_SPARE_HINT = ("pair each master tensor with ITS OWN fp16 parameter (zip the full lists): a parameter "
               "the forward does not use has .grad None — give its master .grad None, don't filter it out")


def _tensors_equal(got, ref: list) -> bool:
    """``got`` is a list of plain tensors equal to the reference's, one for one."""
    return (type(got) is list and len(got) == len(ref)
            and all(type(t) is torch.Tensor and same(t, r.detach()) for t, r in zip(got, ref)))


def _grads_equal(got, ref: list) -> bool:
    return (type(got) is list and len(got) == len(ref)
            and all((t is None and r.grad is None) or
                    (type(t) is torch.Tensor and r.grad is not None and same(t, r.grad))
                    for t, r in zip(got, ref)))


def _judge_step(cases, result) -> str:
    name = "scaled_step"
    if type(result) is not list or len(result) != len(cases):
        raise fail(name, expected=f"{len(cases)} scenarios", got=result,
                   hint="the grader could not read what your step did")
    for sc, done in zip(cases, result):
        desc, spare, tilted = sc["desc"], sc["spare"], sc["loss"] != "mse"
        loss_fn = plan.LOSSES[sc["loss"]]
        ref, ref_master, ref_opt = _setup(sc["seed"], spare)
        if type(done) is not list or len(done) != len(sc["calls"]):
            raise fail(name, input=desc, expected=f"{len(sc['calls'])} calls", got=done,
                       hint="the grader could not read what your step did")
        for j, (c, after) in enumerate(zip(sc["calls"], done)):
            kind, scale = c["kind"], c["scale"]
            want = reference_scaled_step(ref, ref_master, ref_opt, loss_fn, c["x"], c["y"], scale)
            fp16_division_matters = want and _fp16_unscaled_differs(ref, scale)
            where = f"{desc} — call {j + 1} ({kind} batch)"
            if type(after) is not dict:
                raise fail(name, input=where, expected=f"returns {want}", got=after,
                           hint="the grader could not read what your step did")
            got = returned(name, after.get("outcome"), input=where, expected=f"returns {want}",
                           hint=_SPARE_HINT if spare else "your step raised on this input")
            if type(got) is not bool or got is not want:
                hint = ("check EVERY gradient with torch.isfinite (inf and NaN), after backward from loss * scale; "
                        "return False and skip the step when one is not finite" if want is False else
                        "a clean batch must step and return True")
                raise fail(name, input=where, expected=want, got=got, hint=hint)
            master = after.get("master")
            if not _tensors_equal(master, ref_master):
                if type(master) is list and any(type(m) is torch.Tensor and m.is_floating_point()
                                                and not bool(torch.isfinite(m).all()) for m in master):
                    hint = "inf/NaN reached the master weights: do not call optimizer.step() when you skip"
                elif not want:
                    hint = "a skipped step must leave every master weight exactly as it was"
                elif spare:
                    hint = _SPARE_HINT
                elif tilted:
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
            if not _tensors_equal(after.get("fp16"), list(ref.parameters())):
                hint = ("after optimizer.step(), copy every master weight back into its fp16 parameter "
                        "(p.copy_(m) under torch.no_grad()): the fp16 model must follow the master copy"
                        if want else "a skipped step must leave the fp16 model exactly as it was")
                raise fail(name, input=where, expected="the reference's fp16 weights",
                           got="different fp16 weights", hint=hint)
            if want and not _grads_equal(after.get("master_grads"), ref_master):
                raise fail(name, input=where, expected="the reference's master gradients",
                           got="different master gradients",
                           hint="after a step, each master .grad must hold the UNSCALED float32 gradient "
                                "(fp16 grad converted to float32, divided by scale)")
    return f"{len(cases)} scenarios"


check_scaled_step = Check("scaled_step", cases=_step_cases, plan=plan.scaled_step, judge=_judge_step, echo=True)
"""Grade ``scaled_step(model, master, optimizer, loss_fn, x, y, scale) -> bool`` by running it."""
