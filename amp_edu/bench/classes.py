"""Your machine beside each CPU class the course has a reference run for (lessons 00 and 06).

Whether bf16 is *faster* than fp32 on a CPU depends on its class (:func:`amp_edu.device.cpu_class`):
with AVX512_BF16 or AMX it is several times faster, with only AVX512BW/VL/DQ ("AVX512_CORE") it
runs at 0.5-0.9× fp32, below that it is a slow fallback. A sentence about "the CPU" is true for
one class only, so the lessons print the learner's own ratio next to every shipped reference run
(``amp_edu/reference/*.json``, each recording the class it stands for in
``environment.stands_for``), and mark the rows of the learner's class::

    rows = class_rows(report.references(), n=256, mine=("your run", my_class, my_timings))
    print(class_table(rows))

A ratio is ``fp32 time / dtype time`` at one shape (n×n by n×n), with the spread from the two
rows' interquartile boxes (:func:`amp_edu.bench.report.ratio_range`).
"""

from __future__ import annotations

import math

from ..validate import check_int
from ..viz import color_for, fig_ax, log2_axis
from . import report

__all__ = ["stands_for", "ratio_at", "class_rows", "class_table", "plot_classes"]

_DTYPES = ("bfloat16", "float16")


def stands_for(doc: dict) -> str:
    """The class a result document stands for: ``environment.stands_for`` as the bench records it
    (the CPU class, or the GPU's name), else the class recorded in ``environment.cpu_class``."""
    env = doc["environment"]
    if env.get("stands_for"):
        return env["stands_for"]
    if env.get("device") == "cuda":
        return env.get("device_name", "GPU")
    return (env.get("cpu_class") or {}).get("name", "unknown")


def _timing_row(t) -> dict:
    return {"median_s": t.median_s, "iqr_s": t.iqr_s}


def ratio_at(doc: dict, dtype: str, n: int):
    """``(low, ratio, high)`` of fp32's time over ``dtype``'s at ``n``³ in ``doc``, or ``None``
    when the run has no such pair (e.g. a slow-path dtype capped below ``n``)."""
    n = check_int(n, "n", min=1)
    shape = [n, n, n]
    pick = lambda dt: next((r for r in report.rows(doc, "matmul", dtype=dt) if r["shape"] == shape), None)  # noqa: E731
    base, row = pick("float32"), pick(dtype)
    if base is None or row is None:
        return None
    return report.ratio_range(base, row)


def class_rows(docs: dict[str, dict], n: int, *, mine=None) -> list[dict]:
    """One row per reference run (``{name: doc}``) and, first, the learner's ``mine =
    (label, class name, {"float32": Timing, "bfloat16": Timing, ...})`` measured at ``n``³.

    Each row: ``name``, ``stands_for``, ``machine`` (:func:`report.describe`), ``bfloat16`` and
    ``float16`` (``(low, ratio, high)`` or ``None``), ``train_amp_bf16`` (the training-step
    speed-up, references only) and ``mine`` (True for the learner's row)."""
    if not isinstance(docs, dict):
        raise TypeError(f"docs must be a dict of {{name: bench result}}, got {type(docs).__name__}")
    n = check_int(n, "n", min=1)
    out = []
    if mine is not None:
        label, cls, timings = mine
        if "float32" not in timings:
            raise ValueError("mine's timings need a 'float32' entry, the baseline of every ratio")
        base = _timing_row(timings["float32"])
        out.append({"name": label, "stands_for": cls, "machine": "this machine, now", "mine": True,
                    **{dt: report.ratio_range(base, _timing_row(timings[dt])) if dt in timings else None
                       for dt in _DTYPES},
                    "train_amp_bf16": None})
    for name, doc in docs.items():
        out.append({"name": name, "stands_for": stands_for(doc), "machine": report.describe(doc), "mine": False,
                    **{dt: ratio_at(doc, dt, n) for dt in _DTYPES},
                    "train_amp_bf16": report.train_speedups(doc).get("amp_bf16")})
    return out


def _cell(r) -> str:
    """``"4.82× (4.32–5.34×)"``; a ratio under 0.1 as a fraction, ``"1/148 (1/160–1/137)"``."""
    if r is None:
        return "not measured"
    lo, v, hi = r
    if v >= 0.1:
        return report.ratio_text(lo, v, hi)
    return f"{_fraction(v)} ({_fraction(lo)}–{_fraction(hi)})"


def _fraction(x: float) -> str:
    """One bound of a small ratio: ``1/148`` below 0.1; a bound of a wide spread can be 0, a
    ratio of 0.1 or more (``2.50×``) or unbounded (``∞``)."""
    if x <= 0:
        return "0"
    if math.isinf(x):
        return "∞"
    return f"1/{1 / x:.0f}" if x < 0.1 else f"{x:.2f}×"


def class_table(rows: list[dict], n: int | None = None) -> str:
    """The rows as a printed table; the learner's class is marked ``◀ your class``."""
    mine = {r["stands_for"] for r in rows if r["mine"]}
    size = f" at {n}³" if n else ""
    head = f"{'run':<26} {'stands for':<12} {'bf16 vs fp32' + size:<26} {'fp16 vs fp32' + size:<26} {'AMP bf16 step':<14}"
    lines = [head, "-" * len(head)]
    for r in rows:
        step = f"{r['train_amp_bf16']:.2f}×" if r["train_amp_bf16"] else "-"
        mark = "  ◀ your class" if r["stands_for"] in mine and not r["mine"] else ""
        lines.append(f"{r['name']:<26} {r['stands_for']:<12} {_cell(r['bfloat16']):<26} {_cell(r['float16']):<26} "
                     f"{step:<14}{mark}")
    return "\n".join(lines)


def plot_classes(rows: list[dict], ax=None, *, dtype: str = "bfloat16", n: int | None = None):
    """Bars of ``dtype``'s speed-up over fp32 per run (log2 axis, whiskers: the spread), the
    learner's bar outlined; a line at 1× (same speed as fp32)."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    if ax is None:
        _, ax = fig_ax(7, 0.45 * len(rows) + 1.2)
    shown = [r for r in rows if r[dtype] is not None]
    for i, r in enumerate(shown):
        lo, v, hi = r[dtype]
        ax.barh(i, v, color=color_for(dtype), edgecolor="black" if r["mine"] else "none",
                lw=2 if r["mine"] else 0, alpha=1.0 if r["mine"] else 0.7)
        ax.plot([lo, min(hi, v * 4)], [i, i], color="black", lw=1)
    ax.set_yticks(range(len(shown)), [f"{r['name']} ({r['stands_for']})" for r in shown], fontsize=8)
    ax.axvline(1.0, color="black", lw=0.8)
    log2_axis(ax, "x", label=f"{dtype} speed-up over fp32{f' at {n}³' if n else ''} (×, log2)")
    ax.invert_yaxis()
    ax.grid(alpha=0.3, axis="x", which="both")
    return ax
