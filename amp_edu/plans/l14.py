"""Exercise 14's plans: run the learner's Trainer-equal loop, and ask the learner's ``what_runs``.

A model, a dataset and a ``Trainer`` cannot travel to the judge, so a case *describes* them: the
sizes of the tiny GPT-2 (:class:`amp_edu.hf.Sizes` keyword arguments), the precision setting and
the ``TrainingArguments`` the Trainer was given. :func:`reproduce` builds the model and the
dataset from the description, calls the learner's ``reproduce_trainer(model, dataset, plan,
cfg)`` and hands back its outcome (the losses it returned) and every final weight; the judge runs
the real Trainer on the same description. :func:`what_runs` builds each described Trainer (on the
CPU), calls the learner's ``what_runs(trainer)`` and hands back the answer.
"""

from __future__ import annotations

import torch

from ..device import num_threads
from .runner import call

__all__ = ["build_trainer", "reproduce", "what_runs"]


def reproduce(cases, reproduce_trainer) -> list[dict]:
    """For each ``{"sizes", "setting", "cfg"}``: the outcome of ``reproduce_trainer(model, dataset,
    plan, cfg)`` on a fresh tiny GPT-2, and the model's final state dict."""
    from .. import hf
    out = []
    with num_threads(1), hf.quiet():
        for case in cases:
            sizes = hf.Sizes(**case["sizes"])
            model = hf.tiny_gpt2(sizes)
            dataset = hf.zen_lm_dataset(sizes.block_size, sizes.stride)
            plan = hf.Plan("cpu", torch.float16, True) if case.get("gpu_path") else hf.plan_for(case["setting"], "cpu")
            outcome = call(reproduce_trainer, model, dataset, plan, dict(case["cfg"]))
            weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            out.append({"outcome": outcome, "weights": weights})
    return out


def build_trainer(case: dict):
    """The Trainer a ``what_runs`` case describes, on the CPU: ``setting``, then ``gpu_path`` (the
    two attributes accelerate sets for fp16 on a GPU: ``native_amp`` and a GradScaler) or
    ``amp_off`` (``native_amp = False``, as accelerate leaves it where a dtype is not supported)."""
    from .. import hf
    sizes = hf.Sizes(**case["sizes"])
    trainer = hf.make_trainer(case["setting"], sizes, use_cpu=True)
    acc = trainer.accelerator
    if case.get("gpu_path"):
        acc.native_amp = True
        acc.scaler = torch.amp.GradScaler("cpu")
    if case.get("amp_off"):
        acc.native_amp = False
    return trainer


def what_runs(cases, what_runs_fn) -> list[dict]:
    """The outcome of ``what_runs(trainer)`` for each described Trainer."""
    from .. import hf
    out = []
    with num_threads(1), hf.quiet():
        for case in cases:
            out.append(call(what_runs_fn, build_trainer(case)))
    return out
