"""Does mixed precision change what a model learns? A multi-seed convergence study.

One run proves little: two fp32 runs that differ only in their seed already end at different
losses. So the study trains every precision recipe with several seeds, and the seed fixes the
initial weights and the batch order *the same for every recipe*: seed 3 of AMP and seed 3 of fp32
start from the same weights and see the same batches. The runs are **paired**, so the study
compares them seed for seed (:func:`amp_edu.measure.stats.paired_test`): the per-seed differences
``recipe − fp32``, their mean, a paired t-test (is the mean difference zero?) with its two-sided
p-value, and a sign test (does the recipe come out above on more seeds than chance gives?), with
the number of seeds.
Luck of the seed, which moves both runs of a pair alike, cancels in the difference; comparing a
mean gap with fp32's unpaired seed-to-seed spread would count it as noise.

:func:`verdict` turns the numbers into sentences with that rule (:func:`compare_to_baseline`, which
grades each difference with :func:`amp_edu.measure.verdict.paired_call`), so no conclusion is
written before the run. The same test serves any paired samples, e.g. the interleaved rounds of a
benchmark (:func:`amp_edu.measure.verdict.paired_speed_verdict`). The loop is
:func:`amp_edu.train.train`; this module only repeats it over recipes and seeds, summarises and
plots::

    study = run_study("blobs", steps=300, seeds=(0, 1, 2), lr=0.05, optimizer="sgd", momentum=0.9)
    for row in summary(study): print(row)
    print("\\n".join(verdict(study)))
    plot_curves(study, ax, "eval_loss")

Step times come from :func:`step_times`, which times short runs of every recipe side by side
(:func:`amp_edu.measure.timing.compare`), so a slow drift of the machine touches every recipe
alike; :func:`amp_edu.measure.verdict.verdict_table` prints them with a verdict per recipe, or
none when the repeats spread so much that the machine was busy.

A recipe is a name :func:`amp_edu.train.train` accepts, or a zero-argument factory returning an
:class:`amp_edu.recipes.Recipe` (a class works), called afresh for every run. Without a list, a
study runs the registry's everyday set, read when it is called (``amp_edu.recipes.names("everyday")``);
``names("precision")`` is the set where precision visibly matters: pure bf16 and fp16 weights
(updates below about half an ulp of a weight round away, so small steps stall) and fp16 autocast
*without* a scaler (``amp_fp16_noscaler``), next to AMP bf16, whose fp32 weights take every update.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from . import data as _data
from .device import num_threads   # re-exported: the study's threads= argument
from .measure.stats import Paired, paired_test
from .measure.timing import Timing, compare
from .measure.verdict import paired_call
from .recipes import Recipe
from . import recipes as registry   # (`recipes` is the argument name of the functions below)
from .train import parse_recipe, train
from .validate import check_int
from .viz import color_for

__all__ = ["METRICS", "num_threads", "Study", "run_study",
           "smooth", "stats", "summary", "Comparison", "compare_to_baseline", "verdict", "step_times",
           "plot_curves", "plot_finals"]


METRICS = {"eval_loss": "held-out loss", "eval_accuracy": "held-out accuracy", "train_loss": "training loss"}
_HIGHER_IS_BETTER = {"eval_loss": False, "eval_accuracy": True, "train_loss": False}


@dataclass
class Study:
    """Every run of a study: ``runs[recipe][i]`` is the :class:`~amp_edu.train.History` of seed ``seeds[i]``."""

    task: str
    model: str | None
    steps: int
    seeds: tuple
    recipes: tuple
    runs: dict = field(default_factory=dict)
    train_kwargs: dict = field(default_factory=dict)

    def finals(self, recipe: str, metric: str = "eval_loss") -> list[float]:
        """The final value of ``metric`` for each seed (nan where the run diverged)."""
        _check_metric(metric)
        out = []
        for h in self.runs[recipe]:
            if metric == "train_loss":
                out.append(h.final_loss())
            else:
                out.append(h.final_eval["loss" if metric == "eval_loss" else "accuracy"])
        return [float(v) if v is not None and math.isfinite(v) else math.nan for v in out]

    def curves(self, recipe: str, metric: str = "eval_loss") -> tuple[list[int], list[list[float]]]:
        """``(steps, values)``: ``values[i]`` is seed ``i``'s curve of ``metric`` at those steps."""
        _check_metric(metric)
        hs = self.runs[recipe]
        if metric == "train_loss":
            return list(range(1, self.steps + 1)), [smooth(h.loss) for h in hs]
        key = "eval_loss" if metric == "eval_loss" else "eval_accuracy"
        return list(hs[0].eval_steps), [list(getattr(h, key)) for h in hs]


def _check_metric(metric):
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; accepted: {', '.join(METRICS)}")


def _check_study(study):
    if not isinstance(study, Study):
        raise TypeError(f"study must be an amp_edu.study.Study (what run_study returns), got {type(study).__name__}")


def smooth(values, window: int = 10) -> list[float]:
    """Trailing mean over the last ``window`` values, one per value (the first ones average fewer).

    A per-step loss curve is noisy (each step sees one batch); the mean of the last few steps shows
    the trend. A nan anywhere in the window makes that point nan, so a diverged run stays visible."""
    window = check_int(window, "window", min=1)
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out




def _recipe_specs(recipes) -> dict:
    """``{name: spec}`` where ``spec`` is what to hand :func:`train` for one run: the name itself,
    or a factory called afresh per run (a recipe object carries a run's state, e.g. its scaler).
    ``None``: the registry's everyday set (:func:`amp_edu.recipes.names`), read at call time."""
    if recipes is None:
        recipes = registry.names("everyday")
    if isinstance(recipes, (str, Recipe)) or callable(recipes):
        recipes = (recipes,)
    specs = {}
    for r in recipes:
        if isinstance(r, str):
            name, spec = parse_recipe(r).name, r
        elif isinstance(r, Recipe):
            raise TypeError(f"pass a recipe name or a factory (e.g. the class {type(r).__name__}), not a recipe "
                            "object: each run needs a fresh one")
        elif callable(r):
            made = r()
            if not isinstance(made, Recipe):
                raise TypeError(f"a recipe factory must return an amp_edu.recipes.Recipe, got {type(made).__name__}")
            name, spec = made.name, r
        else:
            raise TypeError(f"a recipe is a name or a factory returning a Recipe, got {type(r).__name__}")
        if name in specs:
            raise ValueError(f"recipe {name!r} given twice")
        specs[name] = spec
    if not specs:
        raise ValueError("recipes must name at least one recipe")
    return specs


def _fresh(spec):
    return spec if isinstance(spec, str) else spec()


def run_study(task="blobs", recipes=None, seeds=(0, 1, 2), *, model: str | None = None,
              steps: int = 300, evals: int = 10, log: bool = True, threads: int | None = None,
              **train_kwargs) -> Study:
    """Train every recipe with every seed on ``task`` (a :class:`~amp_edu.data.Task` or its name).

    Seeds run in the outer loop, recipes in the inner one, so a slow drift of the machine touches
    every recipe alike. ``evals`` held-out evaluations are spread over each run.
    ``train_kwargs`` go to :func:`amp_edu.train.train` (``lr``, ``optimizer``, ``batch_size``, ...).
    With ``log`` a line per run shows progress; ``threads`` see :func:`num_threads`.
    """
    if isinstance(task, str):
        task = _data.get_task(task)
    if not hasattr(task, "evaluate"):
        raise TypeError(f"task must be an amp_edu.data.Task or a task name, got {type(task).__name__}")
    specs = _recipe_specs(recipes)
    recipes = tuple(specs)
    seeds = tuple(check_int(s, "each seed") for s in seeds)
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be at least 2 distinct ints (a spread needs several), got {seeds!r}")
    evals = check_int(evals, "evals", min=1)
    for bad in ("seed", "eval_every", "callback"):
        if bad in train_kwargs:
            raise ValueError(f"{bad!r} is set by the study; do not pass it")
    study = Study(task.name, model, steps, seeds, recipes, {r: [] for r in recipes}, dict(train_kwargs))
    eval_every = max(1, steps // evals)
    with num_threads(threads):
        for seed in seeds:
            for r in recipes:
                h = train(task, model, _fresh(specs[r]), steps=steps, seed=seed, eval_every=eval_every,
                          **train_kwargs)
                h.model = h.optimizer = h.scaler = None      # keep the numbers, free the weights
                study.runs[r].append(h)
                if log:
                    fin = h.final_eval
                    print(f"[{task.name}] seed {seed} {r:<17} final held-out loss {fin['loss']:.4f} "
                          f"accuracy {fin['accuracy']:.3f} skipped steps {h.skipped_steps}", flush=True)
    return study


def stats(values) -> dict:
    """Mean, sample standard deviation, min, max over the finite values; how many were not finite."""
    vals = [float(v) for v in values]
    fin = [v for v in vals if math.isfinite(v)]
    n_bad = len(vals) - len(fin)
    if not fin:
        return {"mean": math.nan, "std": math.nan, "min": math.nan, "max": math.nan, "n": 0, "diverged": n_bad}
    return {"mean": statistics.fmean(fin), "std": statistics.stdev(fin) if len(fin) > 1 else 0.0,
            "min": min(fin), "max": max(fin), "n": len(fin), "diverged": n_bad}


def summary(study: Study, metrics=("eval_loss", "eval_accuracy")) -> list[dict]:
    """One row per recipe: ``{"recipe", <metric>: stats(...)}`` of the final values over seeds."""
    _check_study(study)
    for m in metrics:
        _check_metric(m)
    return [{"recipe": r, **{m: stats(study.finals(r, m)) for m in metrics}} for r in study.recipes]


# --- paired comparisons: the per-seed differences -------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """One recipe against the baseline on one metric, with the numbers the verdict rests on."""

    recipe: str
    metric: str
    diff: float          # mean over seeds of (recipe - baseline), same seed paired; nan if no pair
    paired: Paired       # the per-seed differences and their tests
    spread: float        # the baseline's own seed-to-seed standard deviation (context, not the rule)
    diverged: int        # runs of this recipe whose final value is not finite
    n: int               # runs of this recipe
    better: bool | None  # is the difference an improvement? (None if diff is 0 or nan)
    call: str            # "diverged", "same", "within", "unclear", "clear"


def compare_to_baseline(study: Study, recipe: str, metric: str = "eval_loss", *,
                        baseline: str = "fp32") -> Comparison:
    """Compare ``recipe`` with ``baseline`` on the final ``metric``, seed for seed.

    The call: ``diverged`` if any run's final value is not finite; else the paired difference's
    grade by :func:`amp_edu.measure.verdict.paired_call`: ``same`` if every pair is equal, else by
    the paired t-test's p-value, ``clear`` below 0.05, ``unclear`` below 0.2 (more seeds would
    decide), ``within`` otherwise (the per-seed differences give no evidence of a difference).
    """
    _check_study(study)
    _check_metric(metric)
    for r in (recipe, baseline):
        if r not in study.runs:
            raise ValueError(f"recipe {r!r} is not in this study; it has {', '.join(study.recipes)}")
    mine = study.finals(recipe, metric)
    pt = paired_test(mine, study.finals(baseline, metric))
    diverged = sum(not math.isfinite(v) for v in mine)
    diff = pt.mean
    better = None if (math.isnan(diff) or diff == 0) else ((diff > 0) == _HIGHER_IS_BETTER[metric])
    call = "diverged" if diverged else paired_call(pt)
    return Comparison(recipe, metric, diff, pt, stats(study.finals(baseline, metric))["std"], diverged,
                      len(mine), better, call)


def _sentence(c: Comparison, baseline: str) -> str:
    what = METRICS[c.metric]
    if c.call == "diverged":
        return (f"{c.recipe}: diverged (non-finite {what}) in {c.diverged} of {c.n} seeds — "
                f"not a small change, a failure.")
    if c.call == "same":
        return f"{c.recipe}: final {what} identical to {baseline}'s on every seed."
    direction = "better" if c.better else "worse"
    size = (f"{abs(c.diff):.3g} {direction} than {baseline} on average, seed for seed "
            f"({c.paired.text()}; {baseline}'s own seed-to-seed sd {c.spread:.3g})")
    if c.call == "within":
        return f"{c.recipe}: final {what} {size} — no evidence of a difference: indistinguishable from {baseline} here."
    if c.call == "unclear":
        return f"{c.recipe}: final {what} {size} — a hint, not a finding: more seeds would decide."
    return f"{c.recipe}: final {what} {size} — clearly {direction}, beyond what the seed explains."


def verdict(study: Study, metrics=("eval_loss", "eval_accuracy"), *, baseline: str = "fp32") -> list[str]:
    """Sentences, one per recipe and metric, computed from the study by :func:`compare_to_baseline`
    (paired, seed for seed).

    The last sentence weighs the widely repeated claim that mixed precision "barely changes accuracy"
    (for the recipes that keep fp32 weights and use autocast, the ``amp_*`` ones).
    """
    _check_study(study)
    if baseline not in study.runs:
        raise ValueError(f"the baseline {baseline!r} is not in this study")
    out, calls = [], {}
    for r in study.recipes:
        if r == baseline:
            continue
        for m in metrics:
            c = compare_to_baseline(study, r, m, baseline=baseline)
            calls[(r, m)] = c.call
            out.append(_sentence(c, baseline))
    amp = [r for r in study.recipes if r.startswith("amp_")]
    if amp and any(m == "eval_accuracy" for m in metrics):
        ok = [r for r in amp if calls[(r, "eval_accuracy")] in ("same", "within")]
        if len(ok) == len(amp):
            out.append(f"Claim 'mixed precision barely changes accuracy': holds here for {', '.join(amp)} "
                       f"({len(study.seeds)} seeds, {study.steps} steps on {study.task}).")
        else:
            off = [r for r in amp if r not in ok]
            out.append(f"Claim 'mixed precision barely changes accuracy': not shown here for "
                       f"{', '.join(off)} ({len(study.seeds)} seeds, {study.steps} steps on {study.task}).")
    return out


def step_times(task, recipes=None, *, model: str | None = None, steps: int = 5, rounds: int = 3,
               repeats: int = 3, min_time_s: float = 0.05, threads: int | None = None,
               **train_kwargs) -> dict[str, Timing]:
    """Seconds per optimizer step of each recipe, timed side by side.

    Each timed call is a short :func:`amp_edu.train.train` run of ``steps`` steps (no evaluation),
    so the step is exactly the study's; the model build is included, spread over ``steps``.
    :func:`amp_edu.measure.timing.compare` interleaves the recipes in ``rounds`` rounds;
    :func:`amp_edu.measure.verdict.verdict_table` prints the result.
    ``threads`` see :func:`num_threads` (the CPU timer uses the thread count in force).
    """
    if isinstance(task, str):
        task = _data.get_task(task)
    steps = check_int(steps, "steps", min=1)
    rounds, repeats = check_int(rounds, "rounds", min=1), check_int(repeats, "repeats", min=1)
    fns = {name: (lambda spec=spec: train(task, model, _fresh(spec), steps=steps, eval_every=0, **train_kwargs))
           for name, spec in _recipe_specs(recipes).items()}
    with num_threads(threads):
        raw = compare(fns, device=task.device.type, warmup=1, rounds=rounds, repeats=repeats,
                      min_time_s=min_time_s)
    return {r: Timing.from_times([t / steps for t in tm.times_s], cpu_share=tm.cpu_share) for r, tm in raw.items()}


_FALLBACK = ("#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f")


def _color(recipe: str, k: int):
    return color_for(recipe) or _FALLBACK[k % len(_FALLBACK)]


def plot_curves(study: Study, ax, metric: str = "eval_loss", *, band: str = "range"):
    """Mean curve per recipe over the random seeds, with a band: ``"range"`` (min–max) or ``"std"`` (±1 sd)."""
    if band not in ("range", "std"):
        raise ValueError(f"band must be 'range' or 'std', got {band!r}")
    styles = ("-", "--", ":", "-.")
    for k, r in enumerate(study.recipes):
        xs, ys = study.curves(r, metric)
        lo, mid, hi = [], [], []
        for i in range(len(xs)):
            s = stats([y[i] for y in ys])
            mid.append(s["mean"])
            if band == "range":
                lo.append(s["min"]); hi.append(s["max"])
            else:
                lo.append(s["mean"] - s["std"]); hi.append(s["mean"] + s["std"])
        col = _color(r, k)
        bad = sum(not math.isfinite(y[-1]) for y in ys)
        label = f"{r} (mean of {len(ys)} seeds)" + (f" — {bad} of {len(ys)} diverged (NaN)" if bad else "")
        ax.plot(xs, mid, color=col, lw=1.6, ls=styles[k % len(styles)], label=label)
        ax.fill_between(xs, lo, hi, color=col or "grey", alpha=0.2, lw=0)
    ax.set_xlabel("optimizer step")
    unit = " (cross-entropy, nats)" if "loss" in metric else " (fraction correct)"
    ax.set_ylabel(METRICS[metric] + unit)
    ax.set_title(f"{study.task}: {METRICS[metric]}, band = {'min–max' if band == 'range' else '±1 sd'} over seeds")
    ax.legend(fontsize=8)
    return ax


def plot_finals(study: Study, ax, metric: str = "eval_accuracy"):
    """Each run's final value as a dot per recipe, with the mean ± 1 sd as a bar: the spread at a glance."""
    for i, r in enumerate(study.recipes):
        vals = study.finals(r, metric)
        s = stats(vals)
        col = _color(r, i)
        fin = [v for v in vals if math.isfinite(v)]
        ax.scatter([i] * len(fin), fin, color=col, s=22, zorder=3)
        if s["n"]:
            ax.errorbar([i + 0.15], [s["mean"]], yerr=[s["std"]], fmt="_", color=col or "k", capsize=4, ms=14)
        if s["diverged"]:
            ax.annotate(f"{s['diverged']} diverged", (i, ax.get_ylim()[1]), ha="center", va="top", fontsize=8,
                        color=col or "k")
    ax.set_xticks(range(len(study.recipes)))
    ax.set_xticklabels(study.recipes)
    unit = " (cross-entropy, nats)" if "loss" in metric else " (fraction correct)"
    ax.set_ylabel("final " + METRICS[metric] + unit)
    ax.set_title(f"{study.task}: final {METRICS[metric]} per seed (bar: mean ± 1 sd)")
    return ax
