"""Precision recipes as objects: what one training step does with fp16/bf16, each recipe in one place.

A training loop has the same shape whatever the precision. What differs from recipe to recipe
happens at a few moments of the loop, and a recipe is an object with one method per moment. The
names follow fastai's callback events (``before_fit``, ``before_batch``, ``before_backward``,
``after_backward``, ``before_step``, ``after_step``)::

    recipe = parse_recipe("amp_fp16")
    opt = recipe.before_fit(model, lambda params: torch.optim.AdamW(params, lr=1e-3))
    for x, y in batches:
        recipe.zero_grad()
        x = recipe.before_batch(x)                  # cast the inputs (pure fp16/bf16 recipes)
        with recipe.forward_context():              # the autocast region (AMP recipes)
            logits = model(x)
        recipe.backward(loss_fn(logits, y))         # backward from the (scaled) loss
        result = recipe.step(clip_grad_norm=1.0)    # unscale, check, clip, step (or skip)

Each event does the plain fp32 thing in :class:`Recipe`; a recipe overrides only the events it
changes:

=============================== ====================== ==========================================
recipe                          class                  what it changes
=============================== ====================== ==========================================
``fp32``                        :class:`Recipe`        nothing: the baseline
``fp16_pure`` / ``bf16_pure``   :class:`Pure`          ``model.to(dtype)`` and the inputs too:
                                                       weights, activations, gradients *and the
                                                       optimizer update* in 16 bits
``fp16_static_scale(S)``        :class:`StaticScale`   + backward from ``loss * S``; skip the step
                                                       if a gradient is inf/NaN, else × 1/S, step
``fp16_master``                 :class:`Master`        fp16 model, an **fp32 master copy** the
                                                       optimizer updates, fp16 weights copied back
``fp16_master_scale(S)``        :class:`Master`        + a constant loss scale, unscaled in fp32
                                                       (the 2018 mixed-precision paper's recipe)
``amp_fp16`` / ``amp_bf16``     :class:`Amp`           fp32 weights, ``torch.autocast`` forward,
                                                       a ``torch.amp.GradScaler`` — *enabled* for
                                                       fp16 and disabled (every call a no-op) for
                                                       bf16, which has fp32's exponent range
=============================== ====================== ==========================================

The events, in the order a loop calls them:

``before_fit(model, optimizer)``
    Once per run: casts the model if the recipe trains in 16 bits, picks the tensors the optimizer
    updates (the model's parameters, or an fp32 master copy) and returns the optimizer:
    ``optimizer`` is a factory ``optimizer(params)``, or an optimizer already built over the
    model's parameters (not possible with a master copy, which the optimizer must own).
``zero_grad()``
    Drops the model's gradients (``p.grad = None``).
``before_batch(x)``
    The input as the model's first layer needs it (cast to fp16/bf16 for the pure recipes).
``forward_context()``
    A context manager to run the forward in: ``torch.autocast`` for AMP, else a null context.
    Whether the loss is computed inside it is the caller's choice (``train`` computes it outside).
``backward(loss)``
    ``before_backward(loss)`` — the loss times the loss scale — then ``.backward()``.
``step(clip_grad_norm=None)``
    ``after_backward()`` brings the gradients of the weights the optimizer updates to their true,
    unscaled values; they are checked for inf/NaN; unless the step is skipped (only a recipe that
    scales the loss skips: the others step whatever the gradients hold, as a plain loop would, so
    NaN reaches the weights) they are clipped to ``clip_grad_norm`` (``before_step``), the
    optimizer steps, and ``after_step`` copies a master copy back into the model. Returns a
    :class:`StepResult` ``(finite, skipped)``.

A loss-scaled recipe skips exactly the steps whose unscaled gradients hold an inf or NaN; with a
dynamic scaler the scaler itself decides (``scaler.step`` skips on the inf it found while
unscaling, ``scaler.update`` adjusts the scale).

**Adding a recipe** (lesson 10's fp8 recipes, say) is one class: subclass :class:`Recipe` (or the
recipe it extends), override the events that differ, and register the names it answers to::

    @register("fp16_clipped_pure")
    class ClippedPure(Pure):
        ...

:func:`parse_recipe` then accepts the name, and ``amp_edu.train.train`` runs it.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import math
import re
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
import torch.nn as nn

from . import formats
from .validate import check_number

__all__ = ["Recipe", "Pure", "StaticScale", "Master", "Amp", "AmpWithoutScaler", "StepResult", "Family",
           "SETS", "Entry", "RECIPE_MODULES", "register", "entry", "specs", "names", "parse_recipe", "all_finite"]


class Family(enum.Enum):
    """What a recipe changes about fp32 training. A recipe's family is a class attribute
    (``Recipe.family``), and it is what :func:`amp_edu.viz.color_for` colours by, so a newly
    registered recipe always has a colour."""

    FP32 = "fp32"              # the baseline
    AMP = "amp"                # fp32 weights, an autocast forward
    PURE = "pure"              # the whole model in 16 bits
    SCALED = "scaled"          # pure fp16 + a constant loss scale
    MASTER = "master"          # fp16 model, fp32 master weights
    FP8 = "fp8"                # fp8 GEMMs in the linear layers (lesson 10)
    FP4 = "fp4"                # NVFP4 GEMMs in the linear layers, emulated (lesson 10)
    OPTIMIZER = "optimizer"    # low-precision weights or optimizer states (lesson 12)


class StepResult(NamedTuple):
    """What :meth:`Recipe.step` did: were the (unscaled) gradients finite, and was the step skipped."""

    finite: bool
    skipped: bool


def all_finite(tensors) -> bool:
    """``True`` if no tensor in ``tensors`` (``None`` entries ignored) holds an inf or NaN."""
    flags = [torch.isfinite(t).all() for t in tensors if t is not None]
    return bool(torch.stack(flags).all()) if flags else True


def _build_optimizer(optimizer, weights: list, model_params: list, recipe: str) -> torch.optim.Optimizer:
    if isinstance(optimizer, torch.optim.Optimizer):
        owned = {id(p) for g in optimizer.param_groups for p in g["params"]}
        if not {id(w) for w in weights} <= owned:
            what = ("the fp32 master copy, which does not exist yet: pass a factory optimizer(params)"
                    if weights is not model_params else "the model's parameters")
            raise ValueError(f"recipe {recipe!r}: the optimizer must update {what}")
        return optimizer
    if not callable(optimizer):
        raise TypeError("optimizer must be a torch.optim.Optimizer or a factory optimizer(params), "
                        f"got {type(optimizer).__name__}")
    return optimizer(weights)


class Recipe:
    """The ``fp32`` recipe, and the base class: every event does what a plain fp32 loop does.

    Its loss scaler is ``scaler`` when one is given (a GradScaler-like object, or a factory
    ``scaler(device_type)``), else a *disabled* ``torch.amp.GradScaler``: every call a no-op
    (``scale`` returns the loss, ``step`` just calls ``optimizer.step()``), as in nanoGPT's
    ``GradScaler(enabled=...)``, so a recipe without loss scaling needs no branch of its own.
    ``Recipe(scaler=torch.amp.GradScaler("cpu"))`` is fp32 with dynamic loss scaling.

    One recipe object serves one run at a time: :meth:`before_fit` (re)binds it to a model.
    """

    name = "fp32"
    family = Family.FP32
    param_dtype = torch.float32      # dtype of the model's weights in forward and backward
    scaler_spec = None               # the ``scaler`` argument

    def __init__(self, scaler=None) -> None:
        self.scaler_spec = scaler

    def __repr__(self) -> str:
        return f"<recipe {self.name}>"

    # --- once per run -------------------------------------------------------------------------
    def before_fit(self, model: nn.Module, optimizer) -> torch.optim.Optimizer:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        self.cast_model(model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.device_type = self.params[0].device.type if self.params else "cpu"
        self.weights = self.optimizer_weights(self.params)
        self.optimizer = _build_optimizer(optimizer, self.weights, self.params, self.name)
        spec = self.scaler_spec
        self.scaler = (self.default_scaler(self.device_type) if spec is None
                       else spec(self.device_type) if callable(spec) else spec)
        return self.optimizer

    def cast_model(self, model: nn.Module) -> None:
        """Put the model's weights in the dtype they train in (fp32: leave them)."""

    def optimizer_weights(self, params: list) -> list:
        """The tensors the optimizer updates: the model's own parameters."""
        return params

    def default_scaler(self, device_type: str):
        return torch.amp.GradScaler(device_type, enabled=False)

    # --- every step ---------------------------------------------------------------------------
    @property
    def scale(self) -> float:
        """The loss scale the next backward uses (1.0 without loss scaling)."""
        return float(self.scaler.get_scale())

    @property
    def input_dtype(self) -> torch.dtype | None:
        """The dtype float inputs are cast to before the forward, or ``None`` (left as they are)."""
        return None

    @property
    def scaler_enabled(self) -> bool:
        """Does the loss scaler do anything? A scaler without ``is_enabled`` (one built from
        scratch, with only ``scale``/``unscale_``/``step``/``update``/``get_scale``) is enabled."""
        is_enabled = getattr(self.scaler, "is_enabled", None)
        return bool(is_enabled()) if is_enabled is not None else True

    @property
    def skips_nonfinite(self) -> bool:
        """Whether a step with an inf/NaN gradient is skipped (only recipes that scale the loss)."""
        return self.scaler_enabled

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def before_batch(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def forward_context(self):
        return contextlib.nullcontext()

    def before_backward(self, loss: torch.Tensor) -> torch.Tensor:
        """The tensor to call ``backward`` on: the loss times the loss scale."""
        return self.scaler.scale(loss)

    def backward(self, loss: torch.Tensor) -> None:
        self.before_backward(loss).backward()

    def after_backward(self) -> None:
        """Make the gradients of :attr:`weights` the true (unscaled) gradients."""
        self.scaler.unscale_(self.optimizer)

    def step(self, clip_grad_norm: float | None = None) -> StepResult:
        """Unscale, check for inf/NaN, clip the unscaled gradients, step (or skip) — one place."""
        self.after_backward()
        finite = all_finite([w.grad for w in self.weights])
        skip = self.skips_nonfinite and not finite
        if clip_grad_norm is not None and not skip:          # before_step
            torch.nn.utils.clip_grad_norm_(self.weights, clip_grad_norm)
        self.optimizer_step(skip)
        self.after_step(skip)
        return StepResult(finite, skip)

    def optimizer_step(self, skip: bool) -> None:
        """Step the optimizer unless ``skip``. Through the scaler: it decides by itself (it skips
        on the inf it found in ``unscale_``; a disabled one always steps) and updates the scale."""
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def after_step(self, skip: bool) -> None:
        """After the optimizer step (or the skip): nothing to do when the model's weights stepped."""


class Pure(Recipe):
    """``fp16_pure`` / ``bf16_pure``: the model cast to ``dtype``; everything happens in it,
    including the optimizer's update (an update below 2^-11 of a weight rounds away in fp16)."""

    family = Family.PURE

    def __init__(self, dtype: torch.dtype = torch.float16) -> None:
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"Pure trains in torch.float16 or torch.bfloat16, got {dtype!r}")
        self.param_dtype = dtype
        self.name = f"{formats.name_of(dtype)}_pure"

    def cast_model(self, model: nn.Module) -> None:
        model.to(self.param_dtype)

    @property
    def input_dtype(self) -> torch.dtype:
        return self.param_dtype

    def before_batch(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.param_dtype) if x.is_floating_point() else x


def _check_scale(scale) -> float:
    return check_number(scale, "the loss scale", positive=True)   # TypeError for '8' or True, ValueError for 0 or inf


class StaticScale(Pure):
    """``fp16_static_scale(S)``: ``fp16_pure`` + a constant loss scale ``S``: backward from
    ``loss * S``; a step whose gradients overflowed is skipped, the others are multiplied by 1/S
    (in fp16) and stepped."""

    family = Family.SCALED

    def __init__(self, scale: float) -> None:
        super().__init__(torch.float16)
        self.loss_scale = _check_scale(scale)
        self.name = f"fp16_static_scale({self.loss_scale:g})"

    @property
    def scale(self) -> float:
        return self.loss_scale

    @property
    def skips_nonfinite(self) -> bool:
        return True

    def before_backward(self, loss):
        return loss * self.loss_scale

    def after_backward(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.mul_(1.0 / self.loss_scale)

    def optimizer_step(self, skip: bool) -> None:
        if not skip:
            self.optimizer.step()


class Master(StaticScale):
    """``fp16_master`` / ``fp16_master_scale(S)``: an fp16 model for forward and backward, and an
    fp32 **master copy** of the weights that the optimizer updates. The fp16 gradients are copied
    to fp32 and unscaled there (× 1/S); after the step the fp16 weights are re-copied from the
    master copy. ``scale=None``: no loss scaling (S = 1, and no skipped steps)."""

    family = Family.MASTER

    def __init__(self, scale: float | None = None) -> None:
        super().__init__(1.0 if scale is None else scale)
        self.scaled = scale is not None
        self.name = f"fp16_master_scale({self.loss_scale:g})" if self.scaled else "fp16_master"

    def optimizer_weights(self, params: list) -> list:
        return [p.detach().float().clone() for p in params]

    @property
    def skips_nonfinite(self) -> bool:
        return self.scaled

    # before_backward: loss * S (× 1.0 without a scale: exact, so no branch)

    def after_backward(self) -> None:
        for p, m in zip(self.params, self.weights):
            m.grad = None if p.grad is None else p.grad.float().mul_(1.0 / self.loss_scale)

    def after_step(self, skip: bool) -> None:
        if not skip:
            with torch.no_grad():
                for p, m in zip(self.params, self.weights):
                    p.copy_(m)


class Amp(Recipe):
    """``amp_fp16`` / ``amp_bf16``: fp32 weights, the forward under ``torch.autocast(device, dtype)``,
    and ``torch.amp.GradScaler(device, enabled=(dtype is torch.float16))`` unless ``scaler`` is
    given (e.g. the course's own :class:`amp_edu.scaler.GradScaler`). bf16 has fp32's exponent
    range, so its scaler is disabled and does nothing."""

    family = Family.AMP

    def __init__(self, dtype: torch.dtype = torch.float16, scaler=None) -> None:
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"autocast runs in torch.float16 or torch.bfloat16, got {dtype!r}")
        super().__init__(scaler)
        self.autocast_dtype = dtype
        self.name = f"amp_{formats.name_of(dtype)}"

    def default_scaler(self, device_type: str):
        return torch.amp.GradScaler(device_type, enabled=self.autocast_dtype == torch.float16)

    def forward_context(self):
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)


class AmpWithoutScaler(Amp):
    """``amp_fp16_noscaler``: fp16 autocast with the GradScaler left out (disabled), the way a loop
    copied from a bf16 recipe runs fp16. Gradients below fp16's 2^-24 flush to zero in backward."""

    def __init__(self) -> None:
        super().__init__(torch.float16)
        self.name = "amp_fp16_noscaler"

    def default_scaler(self, device_type: str):
        return torch.amp.GradScaler(device_type, enabled=False)


# --- the registry: recipe names -> objects ----------------------------------------------------
#: The named sets of recipes that studies and benchmarks run, each a tag a recipe registers with.
SETS = {
    "everyday": "the recipes a practitioner chooses between (lesson 08's study)",
    "precision": "the ones where precision visibly matters: 16-bit weights, fp16 without a scaler",
    "timed": "the ones the train-step benchmark times (bench.train_step)",
}


@dataclass(frozen=True)
class Entry:
    """One registered recipe: ``spec`` is what :func:`parse_recipe` accepts (``name`` or
    ``name(S)`` for a loss-scaled family), ``factory()`` / ``factory(S)`` builds it."""

    name: str
    factory: Callable
    family: Family
    scaled: bool
    sets: frozenset

    @property
    def spec(self) -> str:
        return f"{self.name}(S)" if self.scaled else self.name


_REGISTRY: dict[str, Entry] = {}
#: Modules that register recipes of their own (imported by the first registry query, so
#: ``train(task, model, "fp8_rowwise")`` works without importing :mod:`amp_edu.fp8` first):
#: lesson 10's fp8 recipes and lesson 12's optimizer-precision recipes.
RECIPE_MODULES = ("amp_edu.fp8", "amp_edu.optim")
_loaded = False


def register(spec: str, factory: Callable | None = None, *, family: Family | None = None, sets=()):
    """Make :func:`parse_recipe` build ``factory()`` for ``spec`` (``factory(S)`` for a spec
    written ``"name(S)"``, S being the loss scale). Usable as a class decorator.

    ``family`` defaults to the family of what the factory builds (a class's ``family`` attribute,
    or, for a function, of the object it returns: it is called once, here, which also proves it
    works). ``sets`` names the :data:`SETS` the recipe belongs to."""
    m = re.fullmatch(r"([a-z][a-z0-9_]*)(\(S\))?", spec) if isinstance(spec, str) else None
    if not m:
        raise ValueError(f"a recipe spec is a lower-case name, optionally followed by (S); got {spec!r}")
    sets = frozenset((sets,) if isinstance(sets, str) else sets)
    if not sets <= SETS.keys():
        raise ValueError(f"unknown recipe sets {sorted(sets - SETS.keys())}; accepted: {', '.join(SETS)}")
    if family is not None and not isinstance(family, Family):
        raise TypeError(f"family must be a recipes.Family ({', '.join(f.name for f in Family)}), got {family!r}")

    def add(f):
        if not callable(f):
            raise TypeError(f"a recipe factory must be callable, got {type(f).__name__}")
        fam = family
        if fam is None:
            built = f if isinstance(f, type) else (f(1.0) if m.group(2) else f())
            fam = getattr(built, "family", None)
            if not isinstance(fam, Family):
                raise TypeError(f"recipe {spec!r}: what its factory builds has no recipes.Family "
                                f"(got {fam!r}); give the class a `family` or pass family=")
        _REGISTRY[m.group(1)] = Entry(m.group(1), f, fam, bool(m.group(2)), sets)
        return f
    return add(factory) if factory is not None else add


def _entries() -> list[Entry]:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in RECIPE_MODULES:
            importlib.import_module(module)
    return list(_REGISTRY.values())


def entry(name: str) -> Entry:
    """The registered recipe called ``name`` (a spec's name, without ``(S)``)."""
    for e in _entries():
        if e.name == name:
            return e
    raise ValueError(f"unknown recipe {name!r}; accepted: {', '.join(specs())}")


def specs() -> tuple[str, ...]:
    """Every recipe spec :func:`parse_recipe` accepts, in registration order, at call time."""
    return tuple(e.spec for e in _entries())


def names(set: str | None = None, *, family: Family | None = None) -> tuple[str, ...]:
    """The names of the recipes in ``set`` (one of :data:`SETS`) and/or ``family``, at call time
    (so a recipe registered later is included), in registration order."""
    if set is not None and set not in SETS:
        raise ValueError(f"unknown recipe set {set!r}; accepted: {', '.join(SETS)}")
    if family is not None and not isinstance(family, Family):
        raise TypeError(f"family must be a recipes.Family, got {family!r}")
    return tuple(e.name for e in _entries()
                 if (set is None or set in e.sets) and (family is None or e.family is family))


# Registration order is the order studies, tables and plots list the recipes in.
register("fp32", Recipe, sets=("everyday", "precision", "timed"))
register("amp_fp16", lambda: Amp(torch.float16), sets=("everyday", "timed"))
register("amp_bf16", lambda: Amp(torch.bfloat16), sets=("everyday", "precision", "timed"))
register("amp_fp16_noscaler", AmpWithoutScaler, sets=("precision",))
register("bf16_pure", lambda: Pure(torch.bfloat16), sets=("precision",))
register("fp16_pure", lambda: Pure(torch.float16), sets=("everyday", "precision"))
register("fp16_static_scale(S)", StaticScale)
register("fp16_master", Master)
register("fp16_master_scale(S)", Master)

_SCALED_RE = re.compile(r"^([a-z][a-z0-9_]*)\(\s*([^)]+?)\s*\)$")


def parse_recipe(spec: "str | Recipe") -> Recipe:
    """``"fp32"``, ``"fp16_static_scale(1024)"``, ``"fp16_master_scale(2**10)"``, ... → a new
    :class:`Recipe` (a recipe object is returned as it is).

    The scale may be a number or ``2**k``; it must be finite and positive.
    """
    if isinstance(spec, Recipe):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"recipe must be a str or Recipe, got {type(spec).__name__}")
    s = spec.strip()
    known = {e.name: e for e in _entries()}
    if s in known and not known[s].scaled:
        return known[s].factory()
    m = _SCALED_RE.match(s)
    if not m or m.group(1) not in known or not known[m.group(1)].scaled:
        raise ValueError(f"unknown recipe {spec!r}; accepted: {', '.join(specs())} "
                         "(S a positive number or 2**k)")
    fam, arg = m.groups()
    pw = re.fullmatch(r"2\s*\*\*\s*(-?\d+)", arg)
    try:
        scale = 2.0 ** int(pw.group(1)) if pw else float(arg)
    except ValueError:
        raise ValueError(f"bad loss scale {arg!r} in recipe {spec!r}: give a number or 2**k") from None
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"the loss scale must be finite and > 0, got {scale} in {spec!r}")
    return known[fam].factory(scale)
