"""The recipe registry: names → recipe objects, in one table that every lesson, study and benchmark reads.

Each family module of :mod:`amp_edu.recipes` calls :func:`register` for its recipes when it is
imported, and :mod:`amp_edu.recipes` imports them all, so the table is complete as soon as the
package is imported. Everything else asks it at call time: :func:`parse_recipe` (a spec such as
``"fp16_static_scale(2**10)"`` → a new :class:`~amp_edu.recipes.base.Recipe`), :func:`specs`,
:func:`names` (by set or family) and :func:`entry`. A recipe registered later, in a notebook or a
test, is included in every answer from then on.

The registry holds names; it does not own them all. A family derives its names from the package
that owns the fact (see :mod:`amp_edu.recipes`), so this table is never a second copy to keep in
step with a first.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from .base import Family, Recipe

__all__ = ["SETS", "Entry", "register", "entry", "specs", "names", "parse_recipe"]

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


def entry(name: str) -> Entry:
    """The registered recipe called ``name`` (a spec's name, without ``(S)``)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    raise ValueError(f"unknown recipe {name!r}; accepted: {', '.join(specs())}")


def specs() -> tuple[str, ...]:
    """Every recipe spec :func:`parse_recipe` accepts, in registration order, at call time."""
    return tuple(e.spec for e in _REGISTRY.values())


def names(set: str | None = None, *, family: Family | None = None) -> tuple[str, ...]:
    """The names of the recipes in ``set`` (one of :data:`SETS`) and/or ``family``, at call time
    (so a recipe registered later is included), in registration order."""
    if set is not None and set not in SETS:
        raise ValueError(f"unknown recipe set {set!r}; accepted: {', '.join(SETS)}")
    if family is not None and not isinstance(family, Family):
        raise TypeError(f"family must be a recipes.Family, got {family!r}")
    return tuple(e.name for e in _REGISTRY.values()
                 if (set is None or set in e.sets) and (family is None or e.family is family))


_SCALED_RE = re.compile(r"^([a-z][a-z0-9_]*)\(\s*([^)]+?)\s*\)$")


def parse_recipe(spec: "str | Recipe") -> Recipe:
    """``"fp32"``, ``"fp16_static_scale(1024)"``, ``"fp16_master_scale(2**10)"``, ... → a new
    :class:`~amp_edu.recipes.base.Recipe` (a recipe object is returned as it is).

    The scale may be a number or ``2**k``; it must be finite and positive.
    """
    if isinstance(spec, Recipe):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"recipe must be a str or Recipe, got {type(spec).__name__}")
    s = spec.strip()
    known = _REGISTRY
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
