"""The Trainer's loop, and a hand-written loop equal to it bit for bit — with each difference a switch.

``Trainer.train()`` is, for one process and no accumulation, this loop (lesson 14 §3 runs both and
compares every loss, gradient norm, learning rate and final weight)::

    model = build()                      # your code, with your seed
    set_seed(seed)                       # Trainer.__init__ does this, AFTER the model exists
    model.config.use_cache = False       # and this (TrainingArguments.use_cache defaults to False)
    opt = AdamW([decay_group, no_decay_group], lr, weight_decay=0.0, fused=True)
    sched = LambdaLR(opt, linear from 1 to 0 over the run)
    for epoch ...:
        loader = DataLoader(ds, batch, sampler=randperm seeded with seed + epoch)
        for batch in loader:
            with autocast (if the Accelerator decided so):  # accelerate wraps model.forward
                loss = model(**batch, num_items_in_batch=labels.ne(-100).sum()).loss
            scaler.scale(loss).backward()    # or loss.backward() without a scaler
            scaler.unscale_(opt); clip_grad_norm_(params, 1.0)
            scaler.step(opt); scaler.update()
            if opt.step was not skipped: sched.step()   # never "skipped" with fused AdamW
            model.zero_grad()

:class:`Match` names the six things a typical hand loop does differently; each field's
alternative values are what a hand loop usually does instead. :func:`hand_run` runs the loop above
with any of them switched; :func:`trainer_run` runs the real Trainer and records the same values;
:func:`diff_runs` says whether two runs are bit-identical and, if not, how far they drifted.

:class:`Plan` is the precision part: autocast dtype or none, a GradScaler or not — read from the
Trainer's own ``accelerator`` (:meth:`Plan.from_accelerator`) or predicted from accelerate's rule
(:func:`plan_for`, cited in :mod:`amp_edu.hf.sources`).
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field, fields, replace

import torch

from ._lib import load, quiet
from .tiny import Sizes, tiny_gpt2, zen_lm_dataset

__all__ = ["SETTINGS", "Match", "OFF", "Plan", "plan_for", "Run", "Diff", "training_args", "make_trainer",
           "trainer_run", "hand_run", "diff_runs", "ScaleRecorder", "trainer_device"]

# The three ways to ask the Trainer for a precision (fp32 is asking for none).
SETTINGS = {"fp32": {}, "fp16": {"fp16": True}, "bf16": {"bf16": True}}

_CHOICES = {
    "loss": ("num_items", "mean"),
    "optimizer": ("trainer", "torch_default"),
    "sampler": ("seedable", "shuffle", "no_dataloader"),
    "clip": ("after_unscale", "none", "before_unscale"),
    "schedule": ("linear_after", "constant", "linear_before"),
    "set_seed": ("after_model", "never"),
    "cache": ("off", "on"),
}


@dataclass(frozen=True)
class Match:
    """The six matching points; the defaults are the Trainer's.

    ``loss``       ``"num_items"``: sum of token losses / ``num_items_in_batch`` as the Trainer
                   counts it (every label that is not -100); ``"mean"``: the model's own mean over
                   the labels it really predicts (what ``model(**batch).loss`` gives).
    ``optimizer``  ``"trainer"``: ``AdamW(two groups, weight_decay=0.0, fused=True)``;
                   ``"torch_default"``: ``torch.optim.AdamW(model.parameters(), lr)`` (weight
                   decay 0.01, the for-each kernel).
    ``sampler``    ``"seedable"``: a ``DataLoader`` whose sampler is ``randperm`` seeded with
                   seed + epoch; ``"shuffle"``: ``DataLoader(shuffle=True)`` (global RNG);
                   ``"no_dataloader"``: the same permutation, batches stacked by hand — no
                   DataLoader iterator, so no draw of its base seed from the global RNG.
    ``clip``       ``"after_unscale"``: ``clip_grad_norm_(…, 1.0)`` on true gradients; ``"none"``;
                   ``"before_unscale"``: on the scaled gradients (differs only with a scaler).
    ``schedule``   ``"linear_after"``: linear to 0, stepped after the optimizer unless accelerate
                   saw the step skipped (with the fused AdamW it never does, see
                   :func:`_step_called`); ``"constant"``: no schedule; ``"linear_before"``:
                   stepped before the optimizer.
    ``set_seed``   ``"after_model"``: ``set_seed(seed)`` once the model is built, as
                   ``Trainer.__init__`` does; ``"never"``: the RNG goes on from the model's init.

    A seventh, found while testing: ``cache`` — ``"off"``: ``model.config.use_cache = False``, as
    ``Trainer.__init__`` sets it; ``"on"``: the config's default. GPT-2's forward gives the same
    bits either way, but at some sizes a few gradient elements differ in their last bits.
    """

    loss: str = "num_items"
    optimizer: str = "trainer"
    sampler: str = "seedable"
    clip: str = "after_unscale"
    schedule: str = "linear_after"
    set_seed: str = "after_model"
    cache: str = "off"

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, str):
                raise TypeError(f"Match.{f.name} must be a str, one of {_CHOICES[f.name]}, got {v!r}")
            if v not in _CHOICES[f.name]:
                raise ValueError(f"Match.{f.name} must be one of {_CHOICES[f.name]}, got {v!r}")

    def off(self, name: str) -> "Match":
        """This match with point ``name`` set to what a typical hand loop does (:data:`OFF`)."""
        if name not in OFF:
            raise ValueError(f"unknown matching point {name!r}; accepted: {', '.join(OFF)}")
        return replace(self, **{name: OFF[name]})


# What a hand loop typically does instead, one per matching point (the lesson's drift table).
OFF = {"loss": "mean", "optimizer": "torch_default", "sampler": "shuffle", "clip": "none",
       "schedule": "constant", "set_seed": "never"}


@dataclass(frozen=True)
class Plan:
    """The precision of a run: ``device``, the autocast ``dtype`` around forward (None: no
    autocast) and whether a GradScaler scales the loss."""

    device: str = "cpu"
    dtype: torch.dtype | None = None
    scaler: bool = False

    def __post_init__(self):
        if not isinstance(self.device, str):
            raise TypeError(f"Plan.device must be a str such as 'cpu' or 'cuda', got {self.device!r}")
        if self.dtype not in (None, torch.float16, torch.bfloat16):
            raise ValueError(f"Plan.dtype must be None, torch.float16 or torch.bfloat16, got {self.dtype!r}")
        if not isinstance(self.scaler, bool):
            raise TypeError(f"Plan.scaler must be a bool, got {self.scaler!r}")

    @classmethod
    def from_accelerator(cls, acc) -> "Plan":
        """What an ``accelerate.Accelerator`` will really do — read from its attributes, the way
        ``prepare`` and ``backward`` read them (``native_amp``, ``mixed_precision``, ``scaler``)."""
        dtype = None
        if acc.native_amp:
            dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(acc.mixed_precision)
        return cls(acc.device.type, dtype, acc.scaler is not None)

    def describe(self) -> str:
        if self.dtype is None:
            return f"fp32 on {self.device}: no autocast, no scaler"
        return (f"autocast({self.device!r}, {str(self.dtype).replace('torch.', '')}) around forward, "
                + ("a GradScaler" if self.scaler else "no scaler"))


def trainer_device() -> torch.device:
    """The device ``TrainingArguments`` picks by default: CUDA when there is one (unless
    ``AMP_EDU_DEVICE=cpu``, which the course turns into ``use_cpu=True``), else the CPU."""
    from ..device import pick_device
    return pick_device()


def _check_setting(setting) -> str:
    if not isinstance(setting, str):
        raise TypeError(f"setting must be a str, one of {list(SETTINGS)}, got {setting!r}")
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {list(SETTINGS)}, got {setting!r}")
    return setting


def plan_for(setting: str, device=None) -> Plan:
    """accelerate 1.16's rule (``Accelerator.__init__``, cited in :mod:`amp_edu.hf.sources`):
    fp16 → autocast fp16 + GradScaler, but only off the CPU (on the CPU: nothing at all);
    bf16 → autocast bf16, no scaler; fp32 → nothing."""
    _check_setting(setting)
    dev = torch.device(device) if device is not None else trainer_device()
    if setting == "fp16" and dev.type != "cpu":
        return Plan(dev.type, torch.float16, True)
    if setting == "bf16":
        return Plan(dev.type, torch.bfloat16, False)
    return Plan(dev.type, None, False)


def training_args(setting: str, sizes: Sizes, *, output_dir: str | None = None, use_cpu: bool | None = None,
                  **overrides):
    """``TrainingArguments`` for ``setting`` with ``sizes``: one step per ``max_steps``, a log
    line per step, nothing saved or reported. ``use_cpu`` (default: only where it is needed — bf16
    on a CPU, or a CPU run on a machine that has a GPU) is passed through."""
    _check_setting(setting)
    transformers, _ = load()
    if use_cpu is None:
        dev = trainer_device()
        use_cpu = dev.type == "cpu" and (setting == "bf16" or torch.cuda.is_available())
    kw = dict(output_dir=output_dir or tempfile.mkdtemp(prefix="amp_edu_hf_"), per_device_train_batch_size=sizes.batch_size,
              max_steps=sizes.steps, learning_rate=sizes.lr, seed=sizes.seed, report_to="none",
              save_strategy="no", logging_steps=1, disable_tqdm=True, **SETTINGS[setting])
    if use_cpu:
        kw["use_cpu"] = True
    kw.update(overrides)
    return transformers.TrainingArguments(**kw)


class ScaleRecorder:
    """A ``TrainerCallback`` (built lazily, so this module imports without transformers) that
    records, per optimizer step, the scale used, whether the scaler skipped the step (the scale
    went down) and whether accelerate *saw* it skipped (``optimizer.step_was_skipped``) — read
    from the optimizer the Trainer hands every callback (accelerate's ``AcceleratedOptimizer``
    carries the scaler)."""

    def __new__(cls):
        transformers, _ = load()

        class _Rec(transformers.TrainerCallback):
            def __init__(self):
                self.scales, self.skipped, self.skip_seen = [], [], []

            def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kw):
                s = getattr(optimizer, "scaler", None)
                self.scales.append(None if s is None else float(s.get_scale()))

            def on_step_end(self, args, state, control, optimizer=None, **kw):
                s = getattr(optimizer, "scaler", None)
                self.skipped.append(s is not None and float(s.get_scale()) < self.scales[-1])
                self.skip_seen.append(bool(getattr(optimizer, "step_was_skipped", False)))

        return _Rec()


@dataclass
class Run:
    """What one run produced, per optimizer step: ``losses`` (the loss backward saw, unscaled),
    ``grad_norms`` (before clipping), ``lrs`` (the rate the step used), ``scales`` (the loss scale,
    or None without a scaler), ``skipped`` (the scaler found inf/NaN: the weights did not move),
    ``skip_seen`` (accelerate's ``step_was_skipped``: what decides the scheduler step); and
    ``weights`` (the final state dict) and ``plan``."""

    losses: list = field(default_factory=list)
    grad_norms: list = field(default_factory=list)
    lrs: list = field(default_factory=list)
    scales: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    skip_seen: list = field(default_factory=list)
    weights: dict = field(default_factory=dict)
    plan: Plan | None = None


def make_trainer(setting: str, sizes: Sizes | None = None, *, model=None, dataset=None, callbacks=(), **arg_overrides):
    """A ``Trainer`` for ``setting`` on the tiny GPT-2 and the Zen windows (or ``model``/``dataset``),
    whose ``training_step`` records the loss it returns in ``trainer.recorded_losses``."""
    transformers, _ = load()
    sizes = Sizes.default() if sizes is None else sizes
    if not isinstance(sizes, Sizes):
        raise TypeError(f"sizes must be an amp_edu.hf.Sizes, got {type(sizes).__name__}")

    class RecordingTrainer(transformers.Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            loss = super().training_step(model, inputs, num_items_in_batch)
            self.recorded_losses.append(loss.item())
            return loss

    with quiet():
        model = tiny_gpt2(sizes) if model is None else model
        dataset = zen_lm_dataset(sizes.block_size, sizes.stride) if dataset is None else dataset
        trainer = RecordingTrainer(model=model, args=training_args(setting, sizes, **arg_overrides),
                                   train_dataset=dataset, callbacks=list(callbacks))
    trainer.recorded_losses = []
    # the Trainer prints every log line (PrinterCallback with disable_tqdm=True); the Run has them
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
    return trainer


def _weights(model) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def trainer_run(setting: str, sizes: Sizes | None = None, *, scaler=None, autocast=None, gpu_path: bool = False,
                **arg_overrides) -> Run:
    """Train with the real ``Trainer`` and record a :class:`Run`.

    ``gpu_path=True`` (fp16 only) runs accelerate's GPU code path on whatever device this is: it
    sets the two attributes that ``Accelerator.__init__`` sets for fp16 off the CPU —
    ``native_amp = True`` and a ``scaler`` — before ``train()`` prepares the model and the
    optimizer; on a GPU they are already set. ``scaler`` (a zero-argument callable returning a
    GradScaler, e.g. ``lambda: amp_edu.scaler.GradScaler("cpu")``) replaces accelerate's scaler;
    ``autocast`` (a callable ``(device_type, dtype) -> context manager``, e.g. amp_edu's) replaces
    the ``torch.autocast`` that accelerate wraps ``forward`` in.
    """
    _check_setting(setting)
    if gpu_path and setting != "fp16":
        raise ValueError(f"gpu_path=True only means something for setting='fp16', got {setting!r}")
    _, accelerate = load()
    rec = ScaleRecorder()
    trainer = make_trainer(setting, sizes, callbacks=[rec], **arg_overrides)
    acc = trainer.accelerator
    if gpu_path and not acc.native_amp:
        acc.native_amp = True
        acc.scaler = torch.amp.GradScaler(acc.device.type)
    if scaler is not None:
        if acc.scaler is None:
            raise ValueError("scaler=... replaces accelerate's GradScaler, but this run has none "
                             "(fp16 on a GPU has one; on a CPU pass gpu_path=True)")
        acc.scaler = scaler()
    patch = contextlib.nullcontext()
    if autocast is not None:
        import accelerate.accelerator as acc_mod
        dtype = Plan.from_accelerator(acc).dtype
        if dtype is None:
            raise ValueError("autocast=... replaces accelerate's autocast, but this run has none")
        patch = _patched(acc_mod, "get_mixed_precision_context_manager",
                         lambda native_amp=False, autocast_kwargs=None: autocast(acc.device.type, dtype))
    with quiet(), patch:
        trainer.train()
    logs = [h for h in trainer.state.log_history if "grad_norm" in h]
    return Run(losses=list(trainer.recorded_losses), grad_norms=[h["grad_norm"] for h in logs],
               lrs=[h["learning_rate"] for h in logs], scales=rec.scales, skipped=rec.skipped, skip_seen=rec.skip_seen,
               weights=_weights(trainer.model), plan=Plan.from_accelerator(acc))


@contextlib.contextmanager
def _patched(module, name, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def _optimizer(model, sizes: Sizes, match: Match):
    if match.optimizer == "torch_default":
        return torch.optim.AdamW(model.parameters(), lr=sizes.lr)
    # the Trainer's two groups (get_decay_parameter_names): no decay for biases and LayerNorms
    no_decay = set()
    for mod_name, mod in model.named_modules():
        for p_name, _ in mod.named_parameters(recurse=False):
            if isinstance(mod, torch.nn.LayerNorm) or "bias" in p_name:
                no_decay.add(f"{mod_name}.{p_name}" if mod_name else p_name)
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if n not in no_decay], "weight_decay": 0.0},
              {"params": [p for n, p in named if n in no_decay], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=sizes.lr, betas=(0.9, 0.999), eps=1e-8, fused=True)


def _batches(dataset, sizes: Sizes, epoch: int, match: Match, collate):
    from torch.utils.data import DataLoader, RandomSampler
    if match.sampler == "shuffle":
        return DataLoader(dataset, batch_size=sizes.batch_size, shuffle=True, collate_fn=collate)
    gen = torch.Generator().manual_seed(sizes.seed + epoch)         # accelerate's SeedableRandomSampler
    if match.sampler == "no_dataloader":
        perm = torch.randperm(len(dataset), generator=gen).tolist()
        return [collate([dataset[i] for i in perm[k:k + sizes.batch_size]])
                for k in range(0, len(perm), sizes.batch_size)]
    return DataLoader(dataset, batch_size=sizes.batch_size, sampler=RandomSampler(dataset, generator=gen),
                      collate_fn=collate)


def _step_called(opt, do) -> bool:
    """Run ``do()`` and tell whether it called ``opt.step`` — the way accelerate's
    ``AcceleratedOptimizer`` decides that a GradScaler skipped the step. A fused AdamW is always
    called (``_step_supports_amp_scaling``: the kernel itself skips on inf), so no skip is seen."""
    called = []
    original = opt.step
    own = opt.__dict__.get("step")           # an lr scheduler wraps the instance's step: keep it

    def step(*args, **kwargs):
        called.append(True)
        return original(*args, **kwargs)

    opt.step = step
    try:
        do()
    finally:
        if own is None:
            del opt.step
        else:
            opt.step = own
    return bool(called)


def hand_run(setting_or_plan, sizes: Sizes | None = None, match: Match = Match(), *, scaler=None) -> Run:
    """The hand-written loop of the module docstring, with ``match``'s switches; precision from a
    setting name (through :func:`plan_for`) or a :class:`Plan`. ``scaler``: a zero-argument callable
    returning the GradScaler to use when the plan has one (default ``torch.amp.GradScaler``)."""
    transformers, _ = load()
    plan = setting_or_plan if isinstance(setting_or_plan, Plan) else plan_for(setting_or_plan)
    sizes = Sizes.default() if sizes is None else sizes
    if not isinstance(sizes, Sizes):
        raise TypeError(f"sizes must be an amp_edu.hf.Sizes, got {type(sizes).__name__}")
    if not isinstance(match, Match):
        raise TypeError(f"match must be an amp_edu.hf.Match, got {type(match).__name__}")
    dev = torch.device(plan.device)
    with quiet():
        model = tiny_gpt2(sizes).to(dev)
    if match.cache == "off":
        model.config.use_cache = False    # as Trainer.__init__ sets it (TrainingArguments.use_cache=False)
    dataset = zen_lm_dataset(sizes.block_size, sizes.stride)
    if match.set_seed == "after_model":
        transformers.set_seed(sizes.seed)
    opt = _optimizer(model, sizes, match)
    sched = None
    if match.schedule != "constant":
        total = sizes.steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: max(0.0, float(total - k) / float(max(1, total))))
    gs = None
    if plan.scaler:
        gs = scaler() if scaler is not None else torch.amp.GradScaler(dev.type)
    run = Run(plan=plan)
    step = epoch = 0
    with quiet():
        while step < sizes.steps:
            for batch in _batches(dataset, sizes, epoch, match, transformers.default_data_collator):
                if step >= sizes.steps:
                    break
                batch = {k: v.to(dev) for k, v in batch.items()}
                model.train()
                kw = {"num_items_in_batch": batch["labels"].ne(-100).sum()} if match.loss == "num_items" else {}
                region = (torch.autocast(dev.type, dtype=plan.dtype) if plan.dtype is not None
                          else contextlib.nullcontext())
                with region:
                    loss = model(**batch, **kw).loss
                loss = loss.float()                                  # convert_outputs_to_fp32
                (gs.scale(loss) if gs is not None else loss).backward()
                if gs is not None and match.clip != "before_unscale":
                    gs.unscale_(opt)
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                      float("inf") if match.clip == "none" else 1.0)
                run.losses.append(loss.item())
                run.grad_norms.append(norm.item())
                if match.schedule == "linear_before":
                    sched.step()
                run.lrs.append(opt.param_groups[0]["lr"])                # the rate this step uses
                if gs is not None:
                    run.scales.append(float(gs.get_scale()))
                    seen = _step_called(opt, lambda: gs.step(opt))   # accelerate's skip test
                    gs.update()
                    run.skipped.append(bool(gs.get_scale() < run.scales[-1]))
                    run.skip_seen.append(not seen)
                else:
                    run.scales.append(None)
                    opt.step()
                    run.skipped.append(False)
                    run.skip_seen.append(False)
                if match.schedule == "linear_after" and not run.skip_seen[-1]:
                    sched.step()
                model.zero_grad()
                step += 1
            epoch += 1
    run.weights = _weights(model)
    return run


@dataclass
class Diff:
    """How two :class:`Run` s compare: ``equal`` (losses, gradient norms, learning rates and every
    final weight bit-identical), per part, and the largest differences."""

    losses_equal: bool
    grad_norms_equal: bool
    lrs_equal: bool
    weights_equal: bool
    max_loss_diff: float
    max_weight_diff: float
    first_loss_diff_step: int | None

    @property
    def equal(self) -> bool:
        return self.losses_equal and self.grad_norms_equal and self.lrs_equal and self.weights_equal


def _same(xs, ys) -> bool:
    """Equal lists of floats, a NaN equal to a NaN (a skipped step's gradient norm may be one)."""
    return len(xs) == len(ys) and all(x == y or (x != x and y != y) for x, y in zip(xs, ys))


def diff_runs(a: Run, b: Run) -> Diff:
    """Compare two runs value by value (bits, not tolerances)."""
    if not isinstance(a, Run) or not isinstance(b, Run):
        raise TypeError(f"diff_runs needs two amp_edu.hf.Run objects, got {type(a).__name__} and {type(b).__name__}")
    n = min(len(a.losses), len(b.losses))
    first = next((i for i in range(n) if not _same(a.losses[i:i + 1], b.losses[i:i + 1])), None)
    if first is None and len(a.losses) != len(b.losses):
        first = n
    keys = a.weights.keys() & b.weights.keys()
    wdiff = max(((a.weights[k].float() - b.weights[k].float()).abs().max().item() for k in keys), default=0.0)
    weights_equal = a.weights.keys() == b.weights.keys() and all(torch.equal(a.weights[k], b.weights[k]) for k in keys)
    return Diff(_same(a.losses, b.losses), _same(a.grad_norms, b.grad_norms), _same(a.lrs, b.lrs), weights_equal,
                max((abs(x - y) for x, y in zip(a.losses, b.losses)), default=0.0), wdiff, first)
