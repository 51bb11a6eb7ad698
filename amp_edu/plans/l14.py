"""Exercise 14's plans: run the learner's Trainer-equal loop, and ask the learner's ``what_runs``.

A model, a dataset and a ``Trainer`` cannot travel to the judge, so a case *describes* them: the
sizes of the tiny GPT-2 (:class:`amp_edu.hf.Sizes` keyword arguments), the precision setting, the
``TrainingArguments`` the Trainer was given, and for some runs how the data and the model come:
``padded_seed`` (windows of drawn lengths, padded as a tokenizer pads them, as Python lists:
:func:`padded_windows`) and ``eval_mode`` (the model handed over in eval mode, as
``from_pretrained`` leaves one). :func:`model_for` and :func:`dataset_for` build them from the
description — here for the learner, and in the judge for the real Trainer, so both get the same.
:func:`reproduce` calls the learner's ``reproduce_trainer(model, dataset, plan, cfg)`` and hands back
its outcome (the losses it returned) and every final weight; a loop that would never end is stopped
with an error (:data:`STOPPED`, see :class:`Windows`). :func:`what_runs` builds each described
Trainer (on the CPU), calls the learner's ``what_runs(trainer)`` and hands back the answer.
"""

from __future__ import annotations

import torch

from ..device import num_threads
from .runner import call

__all__ = ["STOPPED", "Windows", "build_trainer", "dataset_for", "model_for", "padded_windows", "reproduce",
           "what_runs"]


def padded_windows(block_size: int, stride: int, seed: int) -> list[dict]:
    """The Zen windows (:func:`amp_edu.hf.zen_lm_dataset`), each cut to a length drawn from ``seed``
    (2 to ``block_size`` characters) and right-padded to ``block_size`` as a tokenizer pads a batch:
    ``{"input_ids", "attention_mask", "labels"}`` as Python lists of ints (what a tokenised
    ``datasets.Dataset`` hands out), token 0 and mask 0 at the padding, and label -100 there — the
    index every Hugging Face loss ignores."""
    from .. import hf
    g = torch.Generator().manual_seed(seed)
    out = []
    for w in hf.zen_lm_dataset(block_size, stride):
        n = int(torch.randint(2, block_size + 1, (1,), generator=g))
        ids, pad = w["input_ids"][:n].tolist(), block_size - n
        out.append({"input_ids": ids + [0] * pad, "attention_mask": [1] * n + [0] * pad, "labels": ids + [-100] * pad})
    return out


def dataset_for(case: dict) -> list[dict]:
    """The dataset a case describes: the Zen windows, or :func:`padded_windows` for ``padded_seed``."""
    from .. import hf
    sizes = hf.Sizes(**case["sizes"])
    if "padded_seed" in case:
        return padded_windows(sizes.block_size, sizes.stride, case["padded_seed"])
    return hf.zen_lm_dataset(sizes.block_size, sizes.stride)


def model_for(case: dict):
    """The fresh tiny GPT-2 a case describes (built with its seed), in eval mode for ``eval_mode``."""
    from .. import hf
    model = hf.tiny_gpt2(hf.Sizes(**case["sizes"]))
    if case.get("eval_mode"):
        model.eval()
    return model


STOPPED = "the grader stopped your loop"
"""How the error that stops a never-ending loop begins (the judge's hint looks for it)."""


class Windows(list):
    """The dataset as :func:`reproduce` hands it over: a plain list of windows that also stops a
    loop which would never end. A right loop reads ``steps · batch_size`` windows and asks the
    length a few times per epoch; past ``reads`` windows read or ``lengths`` lengths asked (many
    times what any loop that stops needs) it raises ``RuntimeError`` (:data:`STOPPED` ...) — so a
    loop whose step counter never reaches ``cfg["steps"]`` fails at once, in the notebook and in the
    grader, instead of running until something kills the kernel."""

    def __init__(self, items, reads: int, lengths: int):
        super().__init__(items)
        self.reads, self.lengths, self.read, self.asked = reads, lengths, 0, 0

    def __getitem__(self, i):
        self.read += 1
        if self.read > self.reads:
            raise RuntimeError(f"{STOPPED}: it read more than {self.reads} windows from the dataset, many times what "
                               "cfg['steps'] steps of cfg['batch_size'] windows need")
        return super().__getitem__(i)

    def __len__(self):
        self.asked += 1
        if self.asked > self.lengths:
            raise RuntimeError(f"{STOPPED}: it asked the dataset its length more than {self.lengths} times "
                               "(a loop over epochs that never trains a step?)")
        return super().__len__()


def _forward_limit(model, limit: int):
    """A hook on ``model`` that stops the loop past ``limit`` forward passes; returns its handle."""
    count = [0]

    def check(module, args):
        count[0] += 1
        if count[0] > limit:
            raise RuntimeError(f"{STOPPED}: the model ran more than {limit} forward passes, many times "
                               "cfg['steps']")
    return model.register_forward_pre_hook(check)


def reproduce(cases, reproduce_trainer) -> list[dict]:
    """For each ``{"sizes", "setting", "cfg", ...}``: the outcome of ``reproduce_trainer(model, dataset,
    plan, cfg)`` on the model and dataset the case describes (the dataset as :class:`Windows`, the
    model with a hook that stops it past as many forward passes), and the model's final state dict."""
    from .. import hf
    out = []
    with num_threads(1), hf.quiet():
        for case in cases:
            cfg = case["cfg"]
            limit = 4 * cfg["steps"] + 8
            model = model_for(case)
            dataset = Windows(dataset_for(case), reads=limit * cfg["batch_size"], lengths=100 * limit)
            plan = hf.Plan("cpu", torch.float16, True) if case.get("gpu_path") else hf.plan_for(case["setting"], "cpu")
            hook = _forward_limit(model, limit)
            try:
                outcome = call(reproduce_trainer, model, dataset, plan, dict(cfg))
            finally:
                hook.remove()
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
