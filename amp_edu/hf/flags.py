"""What a ``TrainingArguments`` precision flag does on *this* device — asked of the objects.

A flag is a request. What the Trainer then does is decided by ``accelerate.Accelerator`` when the
Trainer builds it, from the flag *and the device*, and it leaves the decision in plain attributes:

* ``trainer.accelerator.mixed_precision`` — the request, as a string (``"no"``, ``"fp16"``, ``"bf16"``);
* ``trainer.accelerator.native_amp`` — whether autocast will really be switched on;
* ``trainer.accelerator.scaler`` — the GradScaler, or ``None``;
* after ``train()`` has prepared the model, ``model.forward`` is wrapped (accelerate keeps the
  original as ``model._original_forward``), and what runs inside shows in the dtypes: a layer's
  output inside the region (read with a forward hook) and the logits ``forward`` returns.

:func:`inspect_flag` trains one step and reads all of these into a :class:`FlagReport`;
:func:`precision_warning` turns a report (or a Trainer) into a loud sentence when what was asked
for is not what runs — ``fp16=True`` on a CPU, above all, which trains in fp32 without a word.

The widely copied call (:data:`COPIED_CALL`) no longer constructs at all; :func:`try_training_args`
shows the error and :func:`fix_copied_call` the spelling of today's transformers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ._lib import load, quiet
from .loop import SETTINGS, Plan, _check_setting, make_trainer, training_args
from .tiny import Sizes, zen_lm_dataset

__all__ = ["COPIED_CALL", "RENAMED", "REMOVED", "try_training_args", "fix_copied_call", "FlagReport",
           "inspect_flag", "precision_warning"]

# The call as a widely copied tutorial writes it.
COPIED_CALL = dict(output_dir="./results", fp16=True, evaluation_strategy="epoch", save_strategy="epoch",
                   per_device_train_batch_size=32, logging_dir="./logs")

RENAMED = {"evaluation_strategy": "eval_strategy"}          # rejected since transformers 4.51
REMOVED = {"logging_dir": "TensorBoard's folder now comes from the TENSORBOARD_LOGGING_DIR environment "
                          "variable (default: a run folder under output_dir)"}


def try_training_args(**kwargs):
    """``(args, None)`` if ``TrainingArguments(**kwargs)`` constructs, else ``(None, error)`` with the
    ``TypeError`` / ``ValueError`` it raised."""
    transformers, _ = load()
    try:
        with quiet():
            return transformers.TrainingArguments(**kwargs), None
    except (TypeError, ValueError) as exc:
        return None, exc


def fix_copied_call(kwargs: dict) -> tuple[dict, list[str]]:
    """``kwargs`` rewritten for the installed transformers, and one note per change. Renamed
    arguments get their new name, removed ones are dropped with what replaces them; a name that is
    neither a ``TrainingArguments`` field nor one of those raises ``ValueError``."""
    if not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict of TrainingArguments arguments, got {type(kwargs).__name__}")
    transformers, _ = load()
    known = {f.name for f in dataclasses.fields(transformers.TrainingArguments) if f.init}
    fixed, notes = {}, []
    for k, v in kwargs.items():
        if k in known:
            fixed[k] = v
        elif k in RENAMED:
            fixed[RENAMED[k]] = v
            notes.append(f"{k}= is now {RENAMED[k]}=")
        elif k in REMOVED:
            notes.append(f"{k}= is gone: {REMOVED[k]}")
        else:
            raise ValueError(f"{k!r} is not a TrainingArguments argument in transformers {transformers.__version__}, "
                             f"and not one whose replacement is known here ({', '.join([*RENAMED, *REMOVED])})")
    return fixed, notes


@dataclass
class FlagReport:
    """What one precision setting does here. ``error`` is set (and the rest None) when the
    ``TrainingArguments`` refused it."""

    setting: str
    request: dict
    error: str | None = None
    device: str | None = None
    mixed_precision: str | None = None
    native_amp: bool | None = None
    scaler: str | None = None                 # the scaler's class, e.g. "torch.amp.grad_scaler.GradScaler"
    forward_wrapped: bool | None = None
    inside_dtype: torch.dtype | None = None   # the output of the last Linear inside forward
    logits_dtype: torch.dtype | None = None   # what forward returns
    plan: Plan | None = None

    def summary(self) -> str:
        req = ", ".join(f"{k}={v!r}" for k, v in self.request.items()) or "no precision flag"
        if self.error:
            return f"TrainingArguments({req}): {self.error}"
        dt = lambda d: str(d).replace("torch.", "")  # noqa: E731
        return (f"TrainingArguments({req}) on {self.device}: mixed_precision={self.mixed_precision!r}, "
                f"native_amp={self.native_amp}, scaler={self.scaler}, forward wrapped={self.forward_wrapped}; "
                f"lm_head computes in {dt(self.inside_dtype)}, forward returns {dt(self.logits_dtype)} logits"
                f" → {self.plan.describe()}")


def _scaler_name(s) -> str | None:
    return None if s is None else f"{type(s).__module__}.{type(s).__qualname__}"


def inspect_flag(setting: str, sizes: Sizes | None = None, *, use_cpu: bool | None = None) -> FlagReport:
    """Train one step with ``setting`` (``"fp32"``, ``"fp16"`` or ``"bf16"``) and read what the
    Trainer's Accelerator and the prepared model say. ``use_cpu`` is passed to
    ``TrainingArguments`` (default: only where needed); ``use_cpu=False`` with bf16 on a CPU
    shows the ``ValueError`` in ``error``."""
    _check_setting(setting)
    sizes = Sizes.default() if sizes is None else sizes
    request = dict(SETTINGS[setting])
    if use_cpu is not None:
        request["use_cpu"] = use_cpu
    try:
        with quiet():
            training_args(setting, sizes, use_cpu=use_cpu)
    except ValueError as exc:
        return FlagReport(setting, request, error=f"{type(exc).__name__}: {exc}")
    trainer = make_trainer(setting, sizes, use_cpu=use_cpu, max_steps=1)
    with quiet():
        trainer.train()
    acc, model = trainer.accelerator, trainer.model
    seen = {}
    def record(module, inputs, output):          # returns None: a hook that returns replaces the output
        seen.setdefault("dtype", output.dtype)

    hook = model.lm_head.register_forward_hook(record)
    batch = zen_lm_dataset(sizes.block_size, sizes.stride)[0]
    try:
        with torch.no_grad():
            out = model(input_ids=batch["input_ids"][None].to(acc.device))
    finally:
        hook.remove()
    return FlagReport(setting, request, None, acc.device.type, acc.mixed_precision, bool(acc.native_amp),
                      _scaler_name(acc.scaler), hasattr(model, "_original_forward"), seen.get("dtype"),
                      out.logits.dtype, Plan.from_accelerator(acc))


def precision_warning(obj) -> str | None:
    """A loud sentence when the precision asked for is not the one that runs, else None.

    ``obj`` is a :class:`FlagReport` or a ``transformers.Trainer`` (after it was built; the
    decision is made in its constructor)."""
    if isinstance(obj, FlagReport):
        if obj.error:
            return None
        asked = obj.mixed_precision
        plan, device = obj.plan, obj.device
    elif hasattr(obj, "accelerator") and hasattr(obj, "args"):
        asked = "fp16" if obj.args.fp16 else "bf16" if obj.args.bf16 else "no"
        plan, device = Plan.from_accelerator(obj.accelerator), obj.accelerator.device.type
    else:
        raise TypeError(f"precision_warning needs a FlagReport or a transformers.Trainer, got {type(obj).__name__}")
    want = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(asked)
    if want is None or plan.dtype == want:
        return None
    return (f"WARNING: {asked}=True was accepted, but on this {device} accelerate switched {asked} autocast OFF "
            f"(native_amp=False, scaler={'yes' if plan.scaler else 'None'}): this run trains in fp32, and nothing "
            f"else says so. On a CPU ask for bf16=True, use_cpu=True, or write the autocast yourself.")
