"""Lesson 14's graders: a loop equal to the real Trainer passes, each classic difference fails with
its hint; ``what_runs`` must read the objects (the flag, or the device, is not enough)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from amp_edu import hf
from amp_edu.checks import l14
from amp_edu.checks.core import CheckFailed
from amp_edu.plans import l14 as plan

transformers, _ = hf.load()


pytestmark = pytest.mark.usefixtures("one_thread")      # tests/conftest.py


def _loop(*, mean=False, decay_all=False, warmup=True, reseed=True, cache_off=True, clip=True, shuffle=False,
          scaled=True, ignored=-100, collate=True, train=True, always_scaler=False, schedule=None):
    """The Trainer's loop (written apart from the solution's), with one classic difference switchable.
    ``schedule``: a ``(steps, warmup) -> lr_lambda`` to use instead of transformers' own."""
    def reproduce_trainer(model, dataset, plan, cfg):
        model.to(plan.device)
        if cache_off:
            model.config.use_cache = False
        if reseed:
            transformers.set_seed(cfg["seed"])
        no_decay = {id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()}
        no_decay |= {id(p) for n, p in model.named_parameters() if n.endswith("bias")}
        params = list(model.parameters())
        groups = ([{"params": params, "weight_decay": cfg["weight_decay"]}] if decay_all else
                  [{"params": [p for p in params if id(p) not in no_decay], "weight_decay": cfg["weight_decay"]},
                   {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0}])
        opt = torch.optim.AdamW(groups, lr=cfg["lr"], fused=True)
        n, w = cfg["steps"], cfg["warmup_steps"] if warmup else 0
        sched = (transformers.get_linear_schedule_with_warmup(opt, w, n) if schedule is None else
                 torch.optim.lr_scheduler.LambdaLR(opt, schedule(n, w)))
        scaler = torch.amp.GradScaler(plan.device) if (plan.scaler and scaled) or always_scaler else None
        losses, epoch = [], 0
        while len(losses) < n:
            sampler = (None if shuffle else
                       RandomSampler(dataset, generator=torch.Generator().manual_seed(cfg["seed"] + epoch)))
            for batch in DataLoader(dataset, cfg["batch_size"], sampler=sampler, shuffle=shuffle or None,
                                    collate_fn=transformers.default_data_collator if collate else None):
                if len(losses) == n:
                    break
                if train:
                    model.train()
                kw = {} if mean else {"num_items_in_batch": batch["labels"].ne(ignored).sum()}
                with torch.autocast(plan.device, dtype=plan.dtype, enabled=plan.dtype is not None):
                    loss = model(**batch, **kw).loss.float()
                (scaler.scale(loss) if scaler else loss).backward()
                if scaler:
                    scaler.unscale_(opt)
                if clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["max_grad_norm"])
                if scaler:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                sched.step()
                opt.zero_grad()
                losses.append(loss.item())
            epoch += 1
        return losses
    return reproduce_trainer


def test_a_loop_equal_to_the_trainer_passes(capsys):
    l14.check_reproduce_trainer(_loop())
    assert "PASS reproduce_trainer" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (dict(mean=True), "mean over the predicted labels"),
    (dict(reseed=False), "set_seed"),
    (dict(shuffle=True), r"seed \+ epoch"),
    (dict(decay_all=True), "0.0 for biases and LayerNorm"),
    (dict(warmup=False), "warmup"),
    (dict(clip=False), "clip_grad_norm_"),
])
def test_each_classic_difference_fails_with_its_hint(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        l14.check_reproduce_trainer(_loop(**wrong))


def _late_denominator(n, w):          # the decay divides by max(2, steps - warmup): one step too gentle at the end
    return lambda k: k / max(1, w) if k < w else max(0.0, (n - k) / max(2, n - w))


def _zero_denominator(n, w):          # divides by steps - warmup: 0/0 at the last call when warmup == steps
    return lambda k: k / max(1, w) if k < w else max(0.0, (n - k) / (n - w))


@pytest.mark.parametrize("wrong, where, hint", [
    (dict(ignored=100), "padded windows", "not -100 in num_items_in_batch"),       # counts the padding
    (dict(collate=False), "padded windows", "default_data_collator"),              # torch's collate on lists
    (dict(train=False), "padded windows", r"model.train\(\)"),                   # the model came in eval mode
    (dict(always_scaler=True), "blows up", "GradScaler only when plan.scaler"),    # skips the NaN steps
    (dict(schedule=_late_denominator), "padded windows", "warmup_steps"),          # warmup = steps - 1 shows it
    (dict(schedule=_zero_denominator), "fp16 as on a GPU", r"max\(1, steps − warmup_steps\)"),  # warmup = steps
])
def test_what_only_padded_data_an_eval_model_a_nan_run_or_a_long_warmup_shows(wrong, where, hint):
    with pytest.raises(CheckFailed, match=hint) as info:
        l14.check_reproduce_trainer(_loop(**wrong))
    assert where in str(info.value)


def test_a_loop_that_never_stops_is_stopped_with_its_hint():
    def endless(model, dataset, plan, cfg):
        losses = _loop()(model, dataset, plan, {**cfg, "steps": 10 ** 9})     # its counter never reaches the end
        return losses[:cfg["steps"]]
    with pytest.raises(CheckFailed, match="did not stop"):
        l14.check_reproduce_trainer(endless)

    def no_batches(model, dataset, plan, cfg):
        step = epoch = 0
        while step < cfg["steps"]:           # forgets to iterate the loader: never trains, never ends
            RandomSampler(dataset, generator=torch.Generator().manual_seed(cfg["seed"] + epoch))
            epoch += 1
    with pytest.raises(CheckFailed, match="did not stop"):
        l14.check_reproduce_trainer(no_batches)


def test_lying_losses_fail():
    class Loss(float):
        def __eq__(self, other):
            return True
    def liar(model, dataset, plan, cfg):
        return [Loss(v) for v in _loop()(model, dataset, plan, cfg)]
    with pytest.raises(CheckFailed, match="Python floats"):
        l14.check_reproduce_trainer(liar)


def test_the_plan_builds_what_the_cases_describe():
    padded = next(c for c in l14.reproduce_cases() if "padded_seed" in c)        # also the eval-mode model's run
    data = plan.dataset_for(padded)
    assert all(type(w["input_ids"]) is list and len(w["labels"]) == padded["sizes"]["block_size"] for w in data)
    assert any(-100 in w["labels"] for w in data) and all(w["labels"][:2].count(-100) == 0 for w in data)
    assert all((w["labels"][i] == -100) == (w["attention_mask"][i] == 0) for w in data for i in range(len(w["labels"])))
    assert not plan.model_for(padded).training and plan.model_for(l14.reproduce_cases()[0]).training
    assert data == plan.dataset_for(padded)                     # drawn from the case's seed: the same for the judge
    blows = next(c for c in l14.reproduce_cases() if "blows up" in c["label"])
    ref = l14._trainer_reference(blows)
    assert any(v != v for v in ref.losses) and any(bool(w.isnan().any()) for w in ref.weights.values())
    warm = {c["cfg"]["steps"] - c["cfg"]["warmup_steps"] for c in l14.reproduce_cases()}
    assert {0, 1} <= warm                 # warmup over the whole run, and ending one step before the last


def test_a_loop_without_the_plans_scaler_fails_on_the_gpu_path_run():
    with pytest.raises(CheckFailed, match="fp16 as on a GPU"):
        l14.check_reproduce_trainer(_loop(scaled=False))


def test_unfinished_and_unreadable_answers():
    def todo(model, dataset, plan, cfg):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not done yet"):
        l14.check_reproduce_trainer(todo)

    def no_losses(model, dataset, plan, cfg):
        _loop()(model, dataset, plan, cfg)
    with pytest.raises(CheckFailed, match="list of .* floats"):
        l14.check_reproduce_trainer(no_losses)


def test_the_forbidden_helpers_are_refused():
    def cheat(model, dataset, plan, cfg):
        from amp_edu.hf import hand_run
        return hand_run(plan, hf.Sizes()).losses
    with pytest.raises(CheckFailed, match="rules"):
        l14.check_reproduce_trainer(cheat)


def _from_objects(trainer):
    acc = trainer.accelerator
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(acc.mixed_precision) if acc.native_amp else None
    return {"autocast": dtype, "scaler": acc.scaler is not None}


def test_what_runs_read_from_the_objects_passes(capsys):
    l14.check_what_runs(_from_objects)
    assert "PASS what_runs" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda t: {"autocast": torch.float16 if t.args.fp16 else torch.bfloat16 if t.args.bf16 else None,
                "scaler": bool(t.args.fp16)}, "fp16=True is a request"),
    (lambda t: {"autocast": {"fp16": torch.float16, "bf16": torch.bfloat16}.get(t.accelerator.mixed_precision),
                "scaler": t.accelerator.scaler is not None}, "fp16=True is a request"),
    (lambda t: {"autocast": torch.bfloat16 if t.args.bf16 else None, "scaler": False},   # "a CPU never does fp16"
     "native_amp=True and a scaler"),
    (lambda t: {**_from_objects(t), "scaler": t.accelerator.mixed_precision == "fp16"}, "fp16=True is a request"),
    (lambda t: {"autocast": "float16", "scaler": False}, "a torch dtype .* not a string"),
    (lambda t: None, "return a dict"),
])
def test_answers_from_the_flag_or_from_memory_fail(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        l14.check_what_runs(wrong)


def test_bf16_autocast_off_is_caught():
    def ignores_native_amp(t):
        return {"autocast": {"fp16": torch.float16, "bf16": torch.bfloat16}.get(t.accelerator.mixed_precision)
                if (t.accelerator.native_amp or t.args.bf16) else None, "scaler": t.accelerator.scaler is not None}
    with pytest.raises(CheckFailed, match="native_amp=False means no autocast"):
        l14.check_what_runs(ignores_native_amp)


def test_the_reference_rule_agrees_with_the_objects():
    for case in l14.what_runs_cases():
        acc = plan.build_trainer(case).accelerator
        p = hf.Plan.from_accelerator(acc)
        assert l14.expected_what_runs(case) == {"autocast": p.dtype, "scaler": p.scaler}, case["label"]


def test_cases_are_drawn_from_the_seed():
    a, b = l14.reproduce_cases(0), l14.reproduce_cases(1)
    assert a != b and a == l14.reproduce_cases(0)
    assert all(c["cfg"]["seed"] == c["sizes"]["seed"] for c in a)
