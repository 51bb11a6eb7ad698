"""Grader for lesson 14's exercise: a loop equal to a Trainer run, and what a flag really does.

``reproduce_trainer(model, dataset, plan, cfg)``: train ``model`` (a tiny GPT-2 fresh from its
config) on ``dataset`` as ``Trainer`` would with ``TrainingArguments(learning_rate=cfg["lr"],
max_steps=cfg["steps"], per_device_train_batch_size=cfg["batch_size"], seed=cfg["seed"],
weight_decay=cfg["weight_decay"], warmup_steps=cfg["warmup_steps"],
max_grad_norm=cfg["max_grad_norm"])`` and the precision ``plan`` (autocast dtype or None, a
scaler or not), and return the loss of every step. The reference is the real Trainer, run by the
judge on the same description (:func:`amp_edu.hf.trainer_run`, the model and data built by the
plan's :func:`~amp_edu.plans.l14.model_for` and :func:`~amp_edu.plans.l14.dataset_for`); losses and
every final weight are compared bit for bit (a NaN equal to a NaN). The runs are drawn so that each
part of the Trainer's loop shows: more than one epoch, weight decay, a warmup that ends one step
before the end and one that lasts the whole run, padded windows given as Python lists (labels of
-100, an attention mask), a model handed over in eval mode, accelerate's fp16 GPU path with its
GradScaler, and a bf16 run that blows up — where no scaler skips the NaN steps, so a loop that
builds a GradScaler the plan does not ask for is seen. The grader runs every case on the CPU, the
Trainer's reference run too, so ``plan.device`` is always ``"cpu"``: moving the model and the
batches to it, which matters on a GPU, is not graded (``tools/mutation_equivalents.py`` says so).
A loop that would never end is stopped by the plan (:class:`amp_edu.plans.l14.Windows`) and fails
with its own hint.

``what_runs(trainer)``: ``{"autocast": torch.float16 | torch.bfloat16 | None, "scaler": bool}``,
read from the Trainer's objects. The cases include Trainers whose accelerator was changed after
construction (the attributes accelerate sets on a GPU; autocast switched off), so an answer from
the flag or from memory fails; the reference is accelerate's rule for the description
(:func:`expected_what_runs`, which ``tests/checks/test_l14.py`` holds against the objects).
"""

from __future__ import annotations

import torch

from ..device import num_threads
from ..plans import l14 as plan
from .core import SELF_CHECK_SEED, Check, fail, returned, same_bits
from .rules import Rule

__all__ = ["check_reproduce_trainer", "check_what_runs"]       # only checks: see amp_edu.course.kernelpackage

RULES = (Rule("amp_edu.hf", ("hand_run", "trainer_run", "make_trainer", "accelerate_run", "Plan", "plan_for",
                             "inspect_flag", "precision_warning"),
              says="write the loop and read the objects yourself: the checks compare with these"),)

_SIZES = dict(batch_size=8, block_size=8, stride=24, n_layer=1, n_embd=16, n_head=2)


def reproduce_cases(seed: int = SELF_CHECK_SEED) -> list[dict]:
    """Five Trainer runs, described (seeds drawn from ``seed``):

    * fp32 with weight decay, a warmup and tight clipping, over more than one epoch;
    * bf16 autocast with the defaults (no warmup);
    * fp16 on accelerate's GPU path (autocast fp16 and a GradScaler, set on this CPU as accelerate
      sets them on a GPU), warming up over the whole run, so the scaler's branch is graded too;
    * fp32 on padded windows given as Python lists (labels of -100 at the padding, an attention
      mask: :func:`amp_edu.plans.l14.padded_windows`), the model handed over in eval mode, the
      warmup ending one step before the last;
    * bf16 with a learning rate that blows the run up: the loss is NaN from the second step, and
      with no GradScaler (bf16 has none) nothing skips those steps — the NaN reaches the weights.
    """
    g = torch.Generator().manual_seed(seed)
    s = [int(v) for v in torch.randint(0, 10_000, (6,), generator=g)]
    out = []
    for label, setting, steps, seed_, lr, wd, warm, clip, extra in (
            ("fp32", "fp32", 7, s[0], 2e-3, 0.1, 2, 0.5, {}),
            ("bf16", "bf16", 4, s[1], 1e-3, 0.0, 0, 1.0, {}),
            ("fp16 as on a GPU", "fp16", 5, s[2], 2e-3, 0.1, 5, 0.5, {"gpu_path": True}),
            ("fp32 on padded windows (Python lists, labels -100 at the padding), the model in eval mode",
             "fp32", 5, s[3], 2e-3, 0.1, 4, 1.0, {"padded_seed": s[5], "eval_mode": True}),
            ("bf16 that blows up (learning rate 1e10)", "bf16", 3, s[4], 1e10, 0.0, 0, 1.0, {})):
        out.append({"label": label, "setting": setting, "sizes": {**_SIZES, "steps": steps, "seed": seed_, "lr": lr},
                    "cfg": {"lr": lr, "steps": steps, "batch_size": _SIZES["batch_size"], "seed": seed_,
                            "weight_decay": wd, "warmup_steps": warm, "max_grad_norm": clip}, **extra})
    return out


_REFERENCES: dict[str, object] = {}


def _trainer_reference(case):
    """The real Trainer's run for ``case``, made once per process: a run is a function of its
    description alone (one thread, every seed in the description), so answers judged one after
    another in the same process (a notebook rerun, a mutation sweep) are compared with one run."""
    import json
    key = json.dumps(case, sort_keys=True)
    if key not in _REFERENCES:
        from .. import hf
        c = case["cfg"]
        if len(_REFERENCES) >= 32:
            _REFERENCES.clear()
        with num_threads(1), hf.quiet():
            _REFERENCES[key] = hf.trainer_run(
                case["setting"], hf.Sizes(**case["sizes"]), use_cpu=True, weight_decay=c["weight_decay"],
                warmup_steps=c["warmup_steps"], max_grad_norm=c["max_grad_norm"], gpu_path=bool(case.get("gpu_path")),
                model=plan.model_for(case), dataset=plan.dataset_for(case))
    return _REFERENCES[key]


_FIRST = ("the first loss depends only on the batch, the dropout masks and the normalisation: the loss is "
          "model(**batch, num_items_in_batch=batch['labels'].ne(-100).sum()).loss (the Trainer divides by every "
          "label); the batches come from a DataLoader whose RandomSampler has a generator seeded with seed + epoch; "
          "set_seed(seed) is called after the model is built; model.config.use_cache = False")
_LATER = ("the update differs: AdamW(fused=True) over two groups — weight_decay=cfg['weight_decay'] for the "
          "weights, 0.0 for biases and LayerNorm weights; the learning rate of step k is lr·k/warmup_steps during "
          "warmup, then lr·(steps − k)/(steps − warmup_steps); clip_grad_norm_(params, max_grad_norm) right "
          "before the optimizer step; scheduler.step() after optimizer.step()")
_PADDED = ("this run's windows are padded, as Python lists: collate them with transformers.default_data_collator, "
           "pass the attention_mask on (model(**batch)), count only the labels that are not -100 in "
           "num_items_in_batch, and call model.train() before the forward, as the Trainer's training_step does "
           "(this model was handed over in eval mode: no dropout)")
_BLOWS_UP = ("this run blows up: the Trainer's loss is NaN from the second step. A bf16 (or fp32) Trainer has no "
             "GradScaler, so nothing skips a step whose gradients are inf/NaN: they go through clipping into the "
             "weights. Build a GradScaler only when plan.scaler is True")


def _raised_hint(case, err) -> str:
    c = case["cfg"]
    if err["message"].startswith(plan.STOPPED):
        return ("your loop did not stop: run exactly cfg['steps'] optimizer steps (count them, and end the epoch "
                "loop once the count is reached); each epoch's batches come from that epoch's DataLoader")
    if "padded_seed" in case:
        return ("your loop raised on padded windows given as Python lists: collate them with "
                "transformers.default_data_collator (torch's default collate makes a list of lists into a list of "
                "columns), and pass every key of the batch to the model")
    if c["warmup_steps"] >= c["steps"]:
        return ("your loop raised on a run that warms up over all its steps: the scheduler's last call is at "
                "k = steps, where steps − warmup_steps is 0 — the Trainer divides by max(1, steps − warmup_steps)")
    return "your loop raised; run it in your notebook on the same cfg"


def _same_float(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def _has_nan(values) -> bool:
    return any(v != v for v in values)


def _judge_reproduce(cases, result) -> str:
    name = "reproduce_trainer"
    if type(result) is not list or len(result) != len(cases):
        raise fail(name, expected=f"{len(cases)} runs", got=result, hint="the grader could not read what your function did")
    for case, got in zip(cases, result):
        shown = f"run {case['label']!r}: setting {case['setting']}, cfg {case['cfg']}"
        steps = case["cfg"]["steps"]
        if type(got) is not dict:
            raise fail(name, input=shown, got=got, hint="the grader could not read what your function did")
        losses = returned(name, got.get("outcome"), input=shown, expected=f"{steps} losses",
                          hint=lambda err: _raised_hint(case, err))
        if type(losses) is not list or len(losses) != steps or not all(type(v) is float for v in losses):
            raise fail(name, input=shown, expected=f"a list of {steps} floats (loss.item() per step)",
                       got=losses, hint="return the loss of every optimizer step, as Python floats")
        ref = _trainer_reference(case)                   # the real Trainer, on the same description
        k = next((i for i, (a, b) in enumerate(zip(losses, ref.losses)) if not _same_float(a, b)), None)
        if k is not None:
            ratio = losses[0] / ref.losses[0] if ref.losses[0] else float("nan")
            T = case["sizes"]["block_size"]
            hint = _FIRST if k == 0 else _LATER
            if _has_nan(ref.losses) and not _has_nan(losses):
                hint = _BLOWS_UP
            elif "padded_seed" in case:
                hint = _PADDED + "; " + hint
            elif k == 0 and abs(ratio - T / (T - 1)) < 1e-3:
                hint = (f"your loss is {ratio:.4f} × the Trainer's = {T}/{T - 1}: the mean over the predicted labels. "
                        "The Trainer divides the summed loss by num_items_in_batch, every label that is not -100")
            raise fail(name, input=f"{shown}, step {k}", expected=ref.losses[k], got=losses[k], hint=hint)
        weights = got.get("weights")
        if type(weights) is not dict or weights.keys() != ref.weights.keys():
            raise fail(name, input=shown, expected="the model's state dict", got=type(weights).__name__,
                       hint="train the model you are given, in place")
        for key, w in ref.weights.items():
            mine = weights[key]
            if type(mine) is not torch.Tensor or not same_bits(mine, w):
                shown_w = mine.flatten()[:3].tolist() if type(mine) is torch.Tensor else mine
                hint = "every loss matched, so the last step differs (no loss sees it): " + _LATER
                if bool(w.isnan().any()) and not (type(mine) is torch.Tensor and bool(mine.isnan().any())):
                    hint = _BLOWS_UP
                raise fail(name, input=f"{shown}, final {key}", expected=w.flatten()[:3].tolist(), got=shown_w,
                           hint=hint)
    return f"{len(cases)} Trainer runs: every loss and every final weight bit-equal"


check_reproduce_trainer = Check("reproduce_trainer", cases=reproduce_cases, plan=plan.reproduce,
                                judge=_judge_reproduce, rules=RULES)
"""Run the learner's loop and the real Trainer on the same descriptions; compare bit for bit."""


def what_runs_cases(seed: int = SELF_CHECK_SEED) -> list[dict]:
    """Trainers described: each setting as built on a CPU, fp16 with the attributes accelerate sets
    on a GPU, and bf16 with autocast switched off. (No drawn inputs: ``seed`` is unused.)"""
    sizes = {**_SIZES, "steps": 1}
    return [{"label": "fp32", "setting": "fp32", "sizes": sizes},
            {"label": "fp16 on this CPU", "setting": "fp16", "sizes": sizes},
            {"label": "bf16 (use_cpu=True)", "setting": "bf16", "sizes": sizes},
            {"label": "fp16 with accelerate's GPU attributes (native_amp=True, a GradScaler)", "setting": "fp16",
             "sizes": sizes, "gpu_path": True},
            {"label": "bf16 with native_amp switched off", "setting": "bf16", "sizes": sizes, "amp_off": True}]


def expected_what_runs(case: dict) -> dict:
    """accelerate's rule for a described Trainer: autocast only where ``native_amp`` is on, in the
    requested dtype; a scaler only where one was built."""
    if case.get("amp_off") or case["setting"] == "fp32" or (case["setting"] == "fp16" and not case.get("gpu_path")):
        return {"autocast": None, "scaler": False}
    if case["setting"] == "fp16":
        return {"autocast": torch.float16, "scaler": True}
    return {"autocast": torch.bfloat16, "scaler": False}


def _what_hint(case, exp, got) -> str:
    if got.get("autocast") is not None and type(got.get("autocast")) is not torch.dtype:
        return "autocast is a torch dtype (torch.float16 or torch.bfloat16) or None, not a string or a name"
    if case["setting"] == "fp16" and not case.get("gpu_path"):
        return ("fp16=True is a request: on a CPU accelerate leaves native_amp=False and builds no scaler. "
                "Read trainer.accelerator.native_amp and trainer.accelerator.scaler, not trainer.args.fp16")
    if case.get("gpu_path"):
        return ("this Trainer's accelerator has native_amp=True and a scaler (as on a GPU): answer from those "
                "attributes, not from the device or the flag")
    if case.get("amp_off"):
        return "native_amp=False means no autocast, whatever accelerator.mixed_precision says"
    if got.get("scaler") != exp["scaler"]:
        return "scaler: whether trainer.accelerator.scaler is not None"
    return ("autocast: None unless trainer.accelerator.native_amp; then torch.float16 for mixed_precision 'fp16', "
            "torch.bfloat16 for 'bf16'")


def _judge_what_runs(cases, result) -> str:
    name = "what_runs"
    if type(result) is not list or len(result) != len(cases):
        raise fail(name, expected=f"{len(cases)} answers", got=result, hint="the grader could not read your answers")
    for case, outcome in zip(cases, result):
        exp = expected_what_runs(case)
        got = returned(name, outcome, input=case["label"], expected=exp)
        ok = (type(got) is dict and got.keys() == {"autocast", "scaler"} and type(got["scaler"]) is bool
              and (got["autocast"] is None or type(got["autocast"]) is torch.dtype)
              and got["autocast"] == exp["autocast"] and got["scaler"] == exp["scaler"])
        if not ok:
            hint = (_what_hint(case, exp, got) if type(got) is dict else
                    'return a dict {"autocast": torch.float16 | torch.bfloat16 | None, "scaler": True | False}')
            raise fail(name, input=case["label"], expected=exp, got=got, hint=hint)
    return f"{len(cases)} Trainers read from their objects"


check_what_runs = Check("what_runs", cases=what_runs_cases, plan=plan.what_runs, judge=_judge_what_runs, rules=RULES)
"""Ask the learner's ``what_runs`` about each described Trainer; compare with accelerate's rule."""
