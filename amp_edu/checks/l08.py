"""Grader for lesson 08's exercise: repair a broken AMP training loop.

The learner writes ``train_amp(model, optimizer, scaler, batches, *, accum_steps=1, max_norm=None,
device_type="cpu", dtype=torch.float16)``: one pass over ``batches`` (a list of ``(x, y)``) with
the loss ``F.cross_entropy(model(x), y)``, stepping after every ``accum_steps``-th micro-batch and
clipping the gradients' total norm to ``max_norm`` when it is given.

The grader *runs* it — on a fresh model, optimizer and ``torch.amp.GradScaler`` per situation,
built in the learner's kernel by :mod:`amp_edu.plans.l08` — and runs the reference loop below on
its own copies, built from the same description; it compares every parameter bit for bit, the
scale and the growth tracker. The situations are the ones that expose the classic mistakes: a
first scale so large that the first steps overflow and must be skipped, a batch whose forward
overflows fp16, clipping that actually clips, gradient accumulation, and all of them at once. The
model's weights and the batches are drawn from the check's seed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..device import num_threads
from ..plans import l08 as plan
from ..plans.l08 import setup as _setup  # noqa: F401 - the situations' objects, for tools
from ..recipes import Amp
from .core import SELF_CHECK_SEED, Check, fail, returned

__all__ = ["check_train_amp"]


def reference_train_amp(model, optimizer, scaler, batches, *, accum_steps=1, max_norm=None,
                        device_type="cpu", dtype=torch.float16):
    """The recipe: autocast around forward + loss; scaled backward every micro-batch; and only on
    the micro-batch that completes a group: unscale_ → clip → step → update → zero_grad
    (:meth:`amp_edu.recipes.Recipe.step`, the step ``amp_edu.train`` runs)."""
    recipe = Amp(dtype, scaler=scaler)
    recipe.before_fit(model, optimizer)
    recipe.device_type = device_type
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(batches, start=1):
        with recipe.forward_context():
            loss = F.cross_entropy(model(x), y) / accum_steps
        recipe.backward(loss)
        if i % accum_steps == 0:
            recipe.step(clip_grad_norm=max_norm)
            optimizer.zero_grad(set_to_none=True)


def situations(seed: int = SELF_CHECK_SEED):
    """``(label, description, setup kwargs, batches, loop kwargs)`` for every graded situation; the
    models' weights and the batches are drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    s = [int(v) for v in torch.randint(0, 2 ** 31 - 200, (7, 2), generator=g).flatten()]
    return [
        ("plain", "4 batches, accum_steps=1, no clipping, init_scale=2**10, growth_interval=2 (the scale grows)",
         dict(seed=s[0], init_scale=2.0 ** 10, growth_interval=2), plan.batches(s[1], 4), {}),
        ("first_steps_overflow", "init_scale=2**24: the scaled gradients overflow fp16 in backward, so the "
         "first steps must be skipped while the scale backs off", dict(seed=s[2], init_scale=2.0 ** 24, growth_interval=3),
         plan.batches(s[3], 6), {}),
        ("bad_batch", "batch 2 of 5 has inputs × 1e5: its forward overflows fp16 and the step must be skipped",
         dict(seed=s[4], init_scale=2.0 ** 10, growth_interval=100), plan.batches(s[5], 5, bad=(2,)), {}),
        ("clipping", "max_norm=0.05 (clipping engages), 4 batches", dict(seed=s[6], init_scale=2.0 ** 12, growth_interval=100),
         plan.batches(s[7], 4), dict(max_norm=0.05)),
        ("accumulation", "accum_steps=3 over 6 micro-batches (2 optimizer steps), growth_interval=1",
         dict(seed=s[8], init_scale=2.0 ** 10, growth_interval=1), plan.batches(s[9], 6), dict(accum_steps=3)),
        ("stale_gradients", "the model arrives with .grad left over from an earlier backward (a gradient "
         "check); 3 batches", dict(seed=s[10], init_scale=2.0 ** 10, growth_interval=100, stale=True),
         plan.batches(s[11], 3), {}),
        ("everything", "accum_steps=2, max_norm=0.05, init_scale=2**24, micro-batch 5 of 10 overflows in forward",
         dict(seed=s[12], init_scale=2.0 ** 24, growth_interval=2), plan.batches(s[13], 10, bad=(4,)),
         dict(accum_steps=2, max_norm=0.05)),
    ]


_HINTS = {
    "plain": "The recipe per step: forward and loss inside torch.autocast(device_type, dtype); "
             "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update(); gradients zeroed "
             "before the next step's backward (not between backward and step).",
    "first_steps_overflow": "Steps whose scaled gradients overflow must be skipped: only scaler.step(optimizer) "
                            "does that (never optimizer.step() directly), and scaler.update() must run once "
                            "per step so the scale backs off.",
    "bad_batch": "An overflowing batch is skipped by scaler.step and backs the scale off in scaler.update(); "
                 "the next step must start from zeroed gradients.",
    "clipping": "Call scaler.unscale_(optimizer) before clip_grad_norm_: clipping the *scaled* gradients "
                "measures a norm S times too large and clips S times too hard.",
    "accumulation": "Divide each micro-batch loss by accum_steps; unscale_/step/update/zero_grad only after "
                    "every accum_steps-th micro-batch (update() in between changes the scale mid-group).",
    "stale_gradients": "Zero the gradients before the first backward too (optimizer.zero_grad(set_to_none=True) "
                       "before the loop): the model may arrive with .grad from an earlier backward, and the "
                       "first step would include it.",
    "everything": "All of the above together: accumulate scaled gradients, then on the stepping micro-batch "
                  "unscale_ → clip → step → update → zero_grad.",
}

_ERRORS = {
    "step() has already been called": "call scaler.step(optimizer) once per optimizer step, then scaler.update()",
    "No inf checks were recorded for this optimizer": "scaler.step found no gradients at all: they were zeroed "
                                                       "(or never made) between backward and step",
    "No inf checks were recorded prior to update": "call scaler.update() only after scaler.step(optimizer), "
                                                   "on stepping micro-batches",
    "unscale_() has already been called": "call scaler.unscale_(optimizer) once per optimizer step, right before clipping",
    "unscale_() is being called after step()": "unscale_ goes before step, in the same iteration",
}


def _show(state, name) -> str:
    """The scale, the growth tracker and the first values of parameter ``name``."""
    params = state.get("params") if type(state.get("params")) is dict else {}
    p = params.get(name)
    vals = [float(f"{v:.6g}") for v in p.flatten()[:3].tolist()] if type(p) is torch.Tensor else p
    scale = state.get("scale")
    return (f"scale {scale:g}" if type(scale) is float else f"scale {scale!r}") + \
        f", growth tracker {state.get('growth_tracker')}, {name}[:3] = {vals}"


def _first_difference(exp, got) -> str | None:
    if type(got) is not dict or type(got.get("params")) is not dict:
        return next(iter(exp["params"]))
    if type(got.get("scale")) is not float or type(got.get("growth_tracker")) is not int \
            or exp["scale"] != got["scale"] or exp["growth_tracker"] != got["growth_tracker"]:
        return next(iter(exp["params"]))
    if got["params"].keys() != exp["params"].keys():
        return next((n for n in exp["params"] if n not in got["params"]), next(iter(exp["params"])))
    for name, p in exp["params"].items():
        q = got["params"][name]
        if type(q) is not torch.Tensor or q.dtype != p.dtype or q.shape != p.shape or not torch.equal(
                torch.nan_to_num(p, nan=1.5e38), torch.nan_to_num(q, nan=1.5e38)):
            return name
    return None


def _judge(cases, result) -> str:
    with num_threads(1):        # tiny models: one thread is faster, much faster on a busy machine
        return _judge_situations(cases, result)


def _judge_situations(cases, result) -> str:
    name = "train_amp"
    if type(result) is not list or len(result) != len(cases):
        raise fail(name, expected=f"{len(cases)} situations", got=result,
                   hint="the grader could not read what your function did")
    for (label, desc, setup, batches, kw), got in zip(cases, result):
        shown = f"situation {label!r}: {desc}"
        m_ref, o_ref, s_ref = plan.setup(**setup)
        reference_train_amp(m_ref, o_ref, s_ref, batches, device_type="cpu", dtype=torch.float16, **kw)
        expected = plan.state(m_ref, s_ref)
        if type(got) is not dict:
            raise fail(name, input=shown, expected=_show(expected, "0.weight"), got=got,
                       hint="the grader could not read what your function did")
        # a crash is a wrong answer; the hint says which rule the error message points at
        returned(name, got.get("outcome"), input=shown, expected=_show(expected, "0.weight"),
                 hint=lambda err, label=label: next((h for k, h in _ERRORS.items() if k in err["message"]),
                                                    _HINTS[label]))
        state = got.get("state")
        diff = _first_difference(expected, state)
        if diff is not None:
            raise fail(name, input=shown, expected=_show(expected, diff),
                       got=_show(state, diff) if type(state) is dict else state, hint=_HINTS[label])
    return f"{len(cases)} situations: parameters, scale and growth tracker bit-equal to the reference"


check_train_amp = Check("train_amp", cases=situations, plan=plan.train_amp, judge=_judge, echo=True)
"""Run the learner's loop and :func:`reference_train_amp` in every situation; compare bit for bit."""
