"""Grader for lesson 08's exercise: repair a broken AMP training loop.

The learner writes ``train_amp(model, optimizer, scaler, batches, *, accum_steps=1, max_norm=None,
device_type="cpu", dtype=torch.float16)``: one pass over ``batches`` (a list of ``(x, y)``) with
the loss ``F.cross_entropy(model(x), y)``, stepping after every ``accum_steps``-th micro-batch and
clipping the gradients' total norm to ``max_norm`` when it is given.

The grader *runs* it — on a fresh model, optimizer and ``torch.amp.GradScaler`` per situation —
next to the reference loop below, and compares every parameter bit for bit, the scale and the
growth tracker. The situations are the ones that expose the classic mistakes: a first scale so
large that the first steps overflow and must be skipped, a batch whose forward overflows fp16,
clipping that actually clips, gradient accumulation, and all of them at once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..models import mlp
from ..recipes import Amp
from ..device import num_threads
from .core import call_learner, fail, passed, require_callable

__all__ = ["reference_train_amp", "situations", "check_train_amp"]


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


def _setup(seed: int, init_scale: float, growth_interval: int, stale: bool = False):
    model = mlp([8, 16, 4], seed=seed)
    if stale:       # gradients left over from an earlier backward (a gradient check, an evaluation)
        x, y = _batches(seed + 100, 1)[0]
        F.cross_entropy(model(x), y).backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    return model, opt, scaler


def _batches(seed: int, n: int, bad: tuple = ()):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        x = torch.randn(16, 8, generator=g)
        y = torch.randint(0, 4, (16,), generator=g)
        out.append((x * 1e5 if i in bad else x, y))
    return out


def situations():
    """``(label, description, setup kwargs, batches, loop kwargs)`` for every graded situation."""
    return [
        ("plain", "4 batches, accum_steps=1, no clipping, init_scale=2**10, growth_interval=2 (the scale grows)",
         dict(seed=1, init_scale=2.0 ** 10, growth_interval=2), _batches(1, 4), {}),
        ("first_steps_overflow", "init_scale=2**24: the scaled gradients overflow fp16 in backward, so the "
         "first steps must be skipped while the scale backs off", dict(seed=2, init_scale=2.0 ** 24, growth_interval=3),
         _batches(2, 6), {}),
        ("bad_batch", "batch 2 of 5 has inputs × 1e5: its forward overflows fp16 and the step must be skipped",
         dict(seed=3, init_scale=2.0 ** 10, growth_interval=100), _batches(3, 5, bad=(2,)), {}),
        ("clipping", "max_norm=0.05 (clipping engages), 4 batches", dict(seed=4, init_scale=2.0 ** 12, growth_interval=100),
         _batches(4, 4), dict(max_norm=0.05)),
        ("accumulation", "accum_steps=3 over 6 micro-batches (2 optimizer steps), growth_interval=1",
         dict(seed=5, init_scale=2.0 ** 10, growth_interval=1), _batches(5, 6), dict(accum_steps=3)),
        ("stale_gradients", "the model arrives with .grad left over from an earlier backward (a gradient "
         "check); 3 batches", dict(seed=7, init_scale=2.0 ** 10, growth_interval=100, stale=True), _batches(7, 3), {}),
        ("everything", "accum_steps=2, max_norm=0.05, init_scale=2**24, micro-batch 5 of 10 overflows in forward",
         dict(seed=6, init_scale=2.0 ** 24, growth_interval=2), _batches(6, 10, bad=(4,)),
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


def _state(model, scaler) -> dict:
    sd = scaler.state_dict()
    return {"scale": float(sd["scale"]), "growth_tracker": int(sd["_growth_tracker"]),
            "params": {n: p.detach().clone() for n, p in model.named_parameters()}}


def _show(state, name) -> str:
    vals = state["params"][name].flatten()[:3].tolist()
    return (f"scale {state['scale']:g}, growth tracker {state['growth_tracker']}, "
            f"{name}[:3] = {[float(f'{v:.6g}') for v in vals]}")


def _first_difference(exp, got) -> str | None:
    if exp["scale"] != got["scale"] or exp["growth_tracker"] != got["growth_tracker"]:
        return next(iter(exp["params"]))
    for name, p in exp["params"].items():
        q = got["params"][name]
        if q.dtype != p.dtype or q.shape != p.shape or not torch.equal(
                torch.nan_to_num(p, nan=1.5e38), torch.nan_to_num(q, nan=1.5e38)):
            return name
    return None


def check_train_amp(fn) -> str:
    """Run ``fn`` next to :func:`reference_train_amp` in every situation; compare bit for bit."""
    require_callable("train_amp", fn)
    with num_threads(1):        # tiny models: one thread is faster, much faster on a busy machine
        return _check_train_amp(fn)


def _check_train_amp(fn) -> str:
    name = "train_amp"
    for label, desc, setup, batches, kw in situations():
        m_ref, o_ref, s_ref = _setup(**setup)
        reference_train_amp(m_ref, o_ref, s_ref, batches, device_type="cpu", dtype=torch.float16, **kw)
        expected = _state(m_ref, s_ref)
        model, opt, scaler = _setup(**setup)
        # a crash is a wrong answer; the hint says which rule the error message points at
        call_learner(name, fn, (model, opt, scaler, [(x.clone(), y.clone()) for x, y in batches]),
                     dict(device_type="cpu", dtype=torch.float16, **kw),
                     input=f"situation {label!r}: {desc}", expected=_show(expected, "0.weight"),
                     hint=lambda exc, label=label: next((h for k, h in _ERRORS.items() if k in str(exc)),
                                                        _HINTS[label]))
        got = _state(model, scaler)
        diff = _first_difference(expected, got)
        if diff is not None:
            raise fail(name, input=f"situation {label!r}: {desc}", expected=_show(expected, diff),
                       got=_show(got, diff), hint=_HINTS[label])
    return passed(name, f"{len(situations())} situations: parameters, scale and growth tracker bit-equal "
                        "to the reference")
