"""Where ``transformers`` and ``accelerate`` do each mixed-precision thing: file and line, checked.

Lesson 14 states what ``Trainer(fp16=True)`` does on a CUDA GPU without running one. Such a
sentence is only as good as its source, so every one cites the line of the library that does it,
at the versions the course pins (``constraints.txt``). A citation is a :class:`Cite`: the package,
the file inside it, the lines, and a piece of the text that must stand on those lines.
:func:`check` reads the installed files and says, per citation, whether the text is still there
(``tests/hf/test_hf.py`` asserts it for every citation) — so a version bump that moves or changes a
line fails a test instead of leaving a lesson pointing at the wrong code. :func:`where` formats
a citation for print, and says so when the installed version is not the pinned one.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PINNED", "Cite", "CITES", "where", "check", "installed_version"]

PINNED = {"transformers": "5.25.0", "accelerate": "1.16.0", "torch": "2.13.0"}


@dataclass(frozen=True)
class Cite:
    package: str      # "transformers", "accelerate" or "torch"
    path: str         # inside the package, e.g. "accelerator.py"
    lines: tuple      # (first, last), 1-based, inclusive
    text: str         # must appear on one of those lines
    says: str         # what the lines do, in one phrase

    def __str__(self) -> str:
        a, b = self.lines
        return f"{self.package}/{self.path}:{a}" + (f"-{b}" if b != a else "")


CITES: dict[str, Cite] = {c_key: c for c_key, c in [
    # --- accelerate: the precision decision, made once, in Accelerator.__init__ ---
    ("fp16_not_on_cpu", Cite("accelerate", "accelerator.py", (536, 539), 'and self.device.type != "cpu"',
                             "fp16 AMP is switched on only when the device is not the CPU")),
    ("fp16_scaler", Cite("accelerate", "accelerator.py", (548, 555),
                         "self.scaler = get_grad_scaler(self.distributed_type, **kwargs)",
                         "fp16 on a GPU: native_amp = True and a GradScaler")),
    ("grad_scaler_kind", Cite("accelerate", "utils/modeling.py", (2108, 2116),
                              "return torch.amp.GradScaler(device_type, **kwargs)",
                              "the scaler is torch.amp.GradScaler for the device, default arguments")),
    ("bf16_native", Cite("accelerate", "accelerator.py", (557, 566), 'if self.device.type in ["cpu", "xpu", "hpu"]:',
                         "bf16: native_amp on the CPU always, on a GPU if it has bf16; never a scaler")),
    # --- accelerate: where the pieces go ---
    ("wrap_forward", Cite("accelerate", "accelerator.py", (1791, 1801),
                          "model.forward = MethodType(convert_outputs_to_fp32(model.forward.__func__), model)",
                          "prepare() wraps model.forward in autocast, then in convert_outputs_to_fp32")),
    ("autocast_fp16", Cite("accelerate", "utils/modeling.py", (2066, 2067),
                           "return torch.autocast(device_type=device_type, dtype=torch.float16, **autocast_kwargs)",
                           "the fp16 region is torch.autocast(device, float16)")),
    ("autocast_bf16", Cite("accelerate", "utils/modeling.py", (2068, 2082),
                           "return torch.autocast(device_type=device_type, dtype=torch.bfloat16, **autocast_kwargs)",
                           "the bf16 region is torch.autocast(device, bfloat16)")),
    ("outputs_to_fp32", Cite("accelerate", "utils/operations.py", (913, 914),
                             "return convert_to_fp32(self.model_forward(*args, **kwargs))",
                             "every fp16/bf16 tensor that forward returns is cast to fp32")),
    ("backward_scaled", Cite("accelerate", "accelerator.py", (2762, 2763), "self.scaler.scale(loss).backward(**kwargs)",
                             "backward multiplies the loss by the scale")),
    ("clip_unscales", Cite("accelerate", "accelerator.py", (2950, 2951), "self.unscale_gradients()",
                           "clip_grad_norm_ unscales the gradients first")),
    ("unscale", Cite("accelerate", "accelerator.py", (2852, 2861), "self.scaler.unscale_(opt)",
                     "unscale_gradients calls scaler.unscale_ (fp16 only)")),
    ("optimizer_step", Cite("accelerate", "optimizer.py", (170, 174), "self.scaler.step(self.optimizer, closure)",
                            "optimizer.step() is scaler.step + scaler.update when there is a scaler")),
    ("seedable_sampler", Cite("accelerate", "data_loader.py", (81, 92), "seed = self.epoch + self.initial_seed",
                              "the sampler's permutation is seeded with seed + epoch")),
    # --- transformers ---
    ("flag_to_string", Cite("transformers", "training_args.py", (1614, 1618), 'self.mixed_precision = "fp16"',
                            "fp16=True / bf16=True become mixed_precision 'fp16' / 'bf16' for accelerate")),
    ("bf16_needs_use_cpu", Cite("transformers", "training_args.py", (1776, 1782),
                                "Your setup doesn't support bf16/gpu.",
                                "bf16=True without a bf16 GPU raises ValueError unless use_cpu=True")),
    ("trainer_no_autocast", Cite("transformers", "trainer.py", (2268, 2273), "return contextlib.nullcontext()",
                                 "the Trainer adds no autocast of its own: accelerate's wrapped forward is it")),
    ("set_seed_in_init", Cite("transformers", "trainer.py", (418, 419),
                              "enable_full_determinism(self.args.seed) if self.args.full_determinism else set_seed(self.args.seed)",
                              "Trainer.__init__ calls set_seed(args.seed), after you built the model")),
    ("use_cache_off", Cite("transformers", "trainer.py", (644, 646), "self.model.config.use_cache = self.args.use_cache",
                           "Trainer.__init__ sets model.config.use_cache to args.use_cache (default False)")),
    ("count_labels", Cite("transformers", "trainer.py", (2370, 2380),
                          "num_items_in_batch = sum(labels.ne(-100).sum() for labels in labels_for_count)",
                          "num_items_in_batch counts the labels (all of them unless the loss is known to shift)")),
    ("shift_known", Cite("transformers", "trainer.py", (543, 545), "self._loss_shifts_labels = LOSS_MAPPING.get(",
                         "the count skips position 0 only when loss_type maps to ForCausalLMLoss")),
    ("loss_type", Cite("transformers", "modeling_utils.py", (1277, 1285), "loss_type = self.__class__.__name__",
                       "loss_type comes from the class name (GPT2LMHeadModel: none)")),
    ("loss_divides", Cite("transformers", "loss/loss_utils.py", (42, 48), "loss = loss / num_items_in_batch",
                          "the loss is the sum over tokens divided by num_items_in_batch")),
    ("default_fused", Cite("transformers", "training_args.py", (806, 811), 'default_optim = "adamw_torch_fused"',
                           "the default optimizer is adamw_torch_fused with torch >= 2.8")),
    ("fused_kwarg", Cite("transformers", "trainer_optimizer.py", (200, 207), 'ctx.optimizer_kwargs.update({"fused": True})',
                         "adamw_torch_fused is torch.optim.AdamW(fused=True)")),
    ("two_groups", Cite("transformers", "trainer.py", (1286, 1301), '"weight_decay": self.args.weight_decay,',
                        "two parameter groups: weight_decay (default 0) and 0.0 for biases and norms")),
    ("random_sampler", Cite("transformers", "trainer.py", (1160, 1160), "return RandomSampler(train_dataset)",
                            "a RandomSampler, which accelerate replaces by its seedable one")),
    ("clip_call", Cite("transformers", "trainer.py", (2831, 2831),
                       "return self.accelerator.clip_grad_norm_(model.parameters(), self.args.max_grad_norm)",
                       "clipping to max_grad_norm (default 1.0) goes through accelerate")),
    ("step_order", Cite("transformers", "trainer.py", (1978, 1989), "if not self.accelerator.optimizer_step_was_skipped:",
                        "optimizer.step(), then lr_scheduler.step() unless the scaler skipped the step")),
    ("linear_schedule", Cite("transformers", "optimization.py", (101, 104),
                             "return max(0.0, float(num_training_steps - current_step)",
                             "the default schedule: linear from lr to 0 over the run, no warmup")),
    ("tensorboard_dir", Cite("transformers", "integrations/integration_utils.py", (602, 602),
                             'self.logging_dir = os.getenv("TENSORBOARD_LOGGING_DIR", None)',
                             "TensorBoard's folder now comes from the TENSORBOARD_LOGGING_DIR variable")),
    ("skip_detection", Cite("accelerate", "optimizer.py", (176, 181), "if not self._accelerate_step_called:",
                            "a step counts as skipped only if scaler.step never called optimizer.step")),
    # --- torch ---
    ("fused_always_called", Cite("torch", "amp/grad_scaler.py", (418, 465), "retval = optimizer.step(*args, **kwargs_)",
                                 "an optimizer with _step_supports_amp_scaling is always called; it skips inside")),
    ("fused_supports_scaling", Cite("torch", "optim/adam.py", (104, 107), "self._step_supports_amp_scaling = True",
                                    "fused Adam/AdamW has _step_supports_amp_scaling")),
    ("dataloader_draw", Cite("torch", "utils/data/dataloader.py", (690, 694), ".random_(generator=loader.generator)",
                             "each DataLoader iterator draws its base seed from the global RNG")),
]}


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def _file(cite: Cite) -> Path | None:
    spec = importlib.util.find_spec(cite.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / cite.path


def _get(key) -> Cite:
    if isinstance(key, Cite):
        return key
    if key not in CITES:
        raise ValueError(f"unknown citation {key!r}; accepted: {', '.join(CITES)}")
    return CITES[key]


def check(key) -> tuple[bool, str]:
    """``(ok, detail)``: whether the citation's text stands on its lines in the installed package."""
    cite = _get(key)
    path = _file(cite)
    if path is None or not path.exists():
        return False, f"{cite.package} is not installed, or has no {cite.path}"
    lines = path.read_text().splitlines()
    a, b = cite.lines
    if any(cite.text in ln for ln in lines[a - 1:b]):
        return True, "found"
    found = [i + 1 for i, ln in enumerate(lines) if cite.text in ln]
    return False, (f"not on lines {a}-{b} of the installed {cite.package} {installed_version(cite.package)}"
                   + (f"; found on line {found[0]}" if found else "; not in the file"))


def where(key) -> str:
    """``"accelerate 1.16.0, accelerate/accelerator.py:536-539"``, with a note when the installed
    version is not the pinned one or the text has moved."""
    cite = _get(key)
    pinned, have = PINNED[cite.package], installed_version(cite.package)
    s = f"{cite.package} {pinned}, {cite}"
    if have != pinned:
        ok, detail = check(cite)
        s += f" (you have {have}: {'same text there' if ok else detail})"
    return s
