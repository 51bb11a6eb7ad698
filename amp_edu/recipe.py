"""Deprecated name of :mod:`amp_edu.checkpoint` (checkpoint/restore for a bit-exact resume).

The module was called ``recipe`` when it was lesson 08's only library code; ``amp_edu.recipes``
now holds the precision recipes, so checkpointing has its own name. ``amp_edu.recipe.checkpoint``
and ``amp_edu.recipe.restore`` keep working; new code imports ``amp_edu.checkpoint``.
"""

import warnings

from .checkpoint import __all__, checkpoint, restore  # noqa: F401

warnings.warn("amp_edu.recipe is a deprecated alias: import amp_edu.checkpoint instead",
              PendingDeprecationWarning, stacklevel=2)
