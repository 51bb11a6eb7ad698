"""``Accelerator(mixed_precision=...)`` in a plain loop: the same pieces as the Trainer, by hand.

Accelerate is the layer the Trainer stands on. Used directly, it asks you for four calls in your
own loop, and puts the mixed-precision pieces exactly where lesson 08's recipe puts them::

    acc = Accelerator(mixed_precision="fp16")            # decides: autocast? scaler?
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
                                                         # forward wrapped in autocast + fp32 outputs,
                                                         # opt.step() = scaler.step + scaler.update
    for batch in loader:
        loss = model(**batch).loss                       # inside the autocast region
        acc.backward(loss)                               # scaler.scale(loss).backward()
        acc.clip_grad_norm_(model.parameters(), 1.0)     # scaler.unscale_(opt), then clip
        opt.step(); sched.step(); opt.zero_grad()        # sched skips when opt.step_was_skipped

:func:`accelerate_run` runs that loop with the Trainer's choices (the matching points of
:mod:`amp_edu.hf.loop`, and accelerate's seedable sampler, which a plain ``Accelerator`` leaves
off unless ``DataLoaderConfiguration(use_seedable_sampler=True)`` asks for it) and returns a
:class:`~amp_edu.hf.loop.Run` that :func:`~amp_edu.hf.loop.diff_runs` can hold against the Trainer's.
"""

from __future__ import annotations

import torch

from ._lib import load, quiet
from .loop import Match, Plan, Run, _check_setting, _optimizer, _weights, trainer_device
from .tiny import Sizes, tiny_gpt2, zen_lm_dataset

__all__ = ["MIXED_PRECISION", "accelerate_run"]

MIXED_PRECISION = {"fp32": "no", "fp16": "fp16", "bf16": "bf16"}


def accelerate_run(setting: str, sizes: Sizes | None = None, *, seedable_sampler: bool = True) -> Run:
    """Train with ``Accelerator(mixed_precision=MIXED_PRECISION[setting])`` in a plain loop.

    ``seedable_sampler=False`` keeps a plain Accelerator's default (a RandomSampler drawing its
    permutation from the global RNG), which orders the batches differently from the Trainer."""
    _check_setting(setting)
    transformers, accelerate = load()
    from accelerate.state import AcceleratorState
    from accelerate.utils import DataLoaderConfiguration
    from torch.utils.data import DataLoader
    sizes = Sizes.default() if sizes is None else sizes
    if not isinstance(sizes, Sizes):
        raise TypeError(f"sizes must be an amp_edu.hf.Sizes, got {type(sizes).__name__}")
    if not isinstance(seedable_sampler, bool):
        raise TypeError(f"seedable_sampler must be a bool, got {seedable_sampler!r}")
    # one Accelerator state per process: start a fresh one, as TrainingArguments does
    AcceleratorState._reset_state(reset_partial_state=True)
    cpu = trainer_device().type == "cpu"
    with quiet():
        acc = accelerate.Accelerator(mixed_precision=MIXED_PRECISION[setting], cpu=cpu,
                                     dataloader_config=DataLoaderConfiguration(use_seedable_sampler=seedable_sampler))
        model = tiny_gpt2(sizes)
    model.config.use_cache = False        # as the Trainer sets it
    transformers.set_seed(sizes.seed)
    opt = _optimizer(model, sizes, Match())
    total = sizes.steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: max(0.0, float(total - k) / float(max(1, total))))
    loader = DataLoader(zen_lm_dataset(sizes.block_size, sizes.stride), batch_size=sizes.batch_size, shuffle=True,
                        collate_fn=transformers.default_data_collator)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    run = Run(plan=Plan.from_accelerator(acc))
    step = epoch = 0
    with quiet():
        while step < sizes.steps:
            loader.set_epoch(epoch)
            for batch in loader:
                if step >= sizes.steps:
                    break
                model.train()
                loss = model(**batch, num_items_in_batch=batch["labels"].ne(-100).sum()).loss
                acc.backward(loss)
                norm = acc.clip_grad_norm_(model.parameters(), 1.0)
                run.losses.append(loss.item())
                run.grad_norms.append(norm.item())
                run.lrs.append(opt.param_groups[0]["lr"])
                run.scales.append(None if acc.scaler is None else float(acc.scaler.get_scale()))
                opt.step()
                sched.step()
                opt.zero_grad()
                run.skipped.append(acc.scaler is not None and float(acc.scaler.get_scale()) < run.scales[-1])
                run.skip_seen.append(bool(opt.step_was_skipped))
                step += 1
            epoch += 1
    run.weights = _weights(acc.unwrap_model(model))
    return run
