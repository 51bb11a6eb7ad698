"""Precision recipes as objects: what one training step does with fp16, bf16, fp8, NVFP4 or a low-precision optimizer.

A training loop has the same shape whatever the precision. What differs from recipe to recipe
happens at a few moments of the loop, its *events*, and a recipe is an object with one method per
event, named as fastai names its callback events (fastai's mixed-precision callback intervenes at
the same ones). :func:`amp_edu.train.train` runs this loop::

    recipe = parse_recipe("amp_fp16")
    opt = recipe.before_fit(model, lambda params: torch.optim.AdamW(params, lr=1e-3))
    for x, y in batches:
        recipe.zero_grad()
        x = recipe.before_batch(x)                   # cast the inputs (pure fp16/bf16 recipes)
        with recipe.forward_context():               # the autocast region (AMP recipes)
            logits = model(x)
        recipe.before_backward(loss_fn(logits, y)).backward()   # backward from the (scaled) loss
        recipe.after_backward()                      # the true, unscaled gradients
        finite, skipped = recipe.before_step(clip_grad_norm=1.0)   # inf/NaN? skip? clip
        recipe.optimizer_step(skipped)               # the step (or nothing)
        recipe.after_step(skipped)                   # the scaler's update; master copy → model

:mod:`~amp_edu.recipes.base` says what each event does; ``recipe.backward(loss)`` and
``recipe.step(clip_grad_norm)`` run the backward line and the last four lines in one call each.
Each event does the plain fp32 thing in :class:`Recipe`; a recipe overrides only the events it
changes. The recipes come in families, one module each:

================  ==============================================================================
module            recipes
================  ==============================================================================
``base``          :class:`Recipe` (``fp32``, every event), :class:`Family`, :class:`StepResult`
``registry``      names → recipes: :func:`register`, :func:`parse_recipe`, :func:`specs`,
                  :func:`names`, :func:`entry`, :data:`SETS`
``amp``           ``fp32``, ``amp_fp16``/``amp_bf16``, ``bf16_pure``/``fp16_pure``,
                  ``fp16_static_scale(S)``, ``fp16_master``, ... (lessons 02-08)
``fp8``           ``fp8_tensorwise``, ``fp8_rowwise``, ... : fp8 GEMMs (lesson 10)
``fp4``           ``nvfp4``, ``nvfp4_sr``, ``nvfp4_sr_rht``, ``nvfp4_te``: NVFP4 GEMMs (lesson 10)
``optim``         ``bf16_nearest``/``_stochastic``/``_kahan``, ``states_8bit``/``_4bit``/``_fp8``:
                  the optimizer's storage (lesson 12)
================  ==============================================================================

Importing this package imports the four family modules in that order, and each registers its
recipes as it is imported: registration order is the order studies, tables and plots list them.
The family modules import :mod:`amp_edu.fp8`, :mod:`amp_edu.fp4` and :mod:`amp_edu.optim`, which
sit below recipes in the course's layers and know nothing of them.

**Who owns which name.** The registry lists every recipe, but a name has one owner. The amp
family's names are written in :mod:`~amp_edu.recipes.amp`. The others are derived from the
package that owns the fact: ``fp8_`` + each of :func:`amp_edu.fp8.config_names` (the named fp8
configurations), each of :func:`amp_edu.fp4.config_names` as it is (the named NVFP4
configurations), and ``bf16_`` + each of :data:`amp_edu.optim.WEIGHT_ROUNDINGS` and ``states_`` +
each of :data:`amp_edu.optim.QUANTIZED_STATES`. A configuration added there is a recipe here.

**Adding a recipe** is one class: subclass :class:`Recipe` (or the recipe it extends), override
the events that differ, and register the names it answers to::

    @register("fp16_clipped_pure")
    class ClippedPure(Pure):
        ...

:func:`parse_recipe` then accepts the name, and ``amp_edu.train.train`` runs it.
"""

from .base import Family, Recipe, StepResult, all_finite
from .registry import SETS, Entry, entry, names, parse_recipe, register, specs
from .amp import Amp, AmpWithoutScaler, Master, Pure, StaticScale       # registers first: lessons 02-08
from .fp8 import Fp8                                                    # then lesson 10's fp8 ...
from .fp4 import Nvfp4                                                  # ... and NVFP4
from .optim import Bf16Weights, OptimRecipe, QuantizedStates, adam_settings   # then lesson 12's

__all__ = ["Recipe", "Pure", "StaticScale", "Master", "Amp", "AmpWithoutScaler", "Fp8", "Nvfp4", "OptimRecipe",
           "Bf16Weights", "QuantizedStates", "adam_settings", "StepResult", "Family", "SETS", "Entry", "register",
           "entry", "specs", "names", "parse_recipe", "all_finite"]
