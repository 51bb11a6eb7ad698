"""Pictures of benchmark results: throughput vs size, the roofline, speed-ups against claims.

Each function takes result documents (:mod:`amp_edu.bench.report`) — the learner's run and any
references — so the same picture shows this machine next to the committed real runs. Magnitudes
go on log2 axes with units (:mod:`amp_edu.viz`).
"""

from __future__ import annotations

from .. import formats
from ..viz import color_for, fig_ax, log2_axis
from . import report, roofline
from .peaks import lookup

__all__ = ["plot_sweep", "roofs", "plot_roofline", "plot_speedups", "plot_groups"]

def _label(dt: str) -> str:
    """The short label amp_edu.formats gives a bench dtype name ("float16" -> "fp16")."""
    try:
        return formats.get(dt).label
    except ValueError:
        return dt


def plot_sweep(doc: dict, ax=None, *, title: str | None = None):
    """TFLOP/s against the square size n (n×n×n) per dtype, with each dtype's datasheet peak as a
    dashed line (none on a CPU or an unknown GPU: there is no datasheet peak to draw)."""
    if ax is None:
        _, ax = fig_ax()
    square = report.rows(doc, "matmul", group="square")
    drawn = set()   # dtypes sharing a peak (fp16 and bf16 on a GPU) draw it once
    for dt in report.DTYPE_NAMES:
        pts = sorted((r["shape"][0], r["tflops"]) for r in square if r["dtype"] == dt)
        if not pts:
            continue
        col = color_for(dt)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=col, label=_label(dt))
        peak = next((r["peak_tflops"] for r in square if r["dtype"] == dt and r.get("peak_tflops")), None)
        if peak and peak not in drawn:
            drawn.add(peak)
            ax.axhline(peak, color=col, ls="--", lw=1, alpha=0.7)
    return _finish(ax, doc, title, "matrix size n (an n×n by n×n matmul)", "dashed: peak")


def _finish(ax, doc, title, xlabel, legend_title):
    """log2 axes, the machine as title, legend and grid: the look of every throughput plot."""
    log2_axis(ax, "x", label=xlabel)
    log2_axis(ax, "y", label="achieved TFLOP/s")
    ax.set_title(title or report.describe(doc), fontsize=9)
    ax.legend(fontsize=8, title=legend_title, title_fontsize=7)
    ax.grid(alpha=0.3, which="both")
    return ax


def roofs(doc: dict) -> dict[str, tuple[float, float, str]]:
    """``{dtype: (peak TFLOP/s, DRAM bandwidth GB/s, where the figures come from)}`` for ``doc``'s
    machine: a known GPU's datasheet; otherwise (a CPU, an unknown GPU) each dtype's best rate
    *measured in this run* and the measured copy bandwidth -- a roof the run itself touched, not a
    peak (so a dtype that runs on other units, e.g. bf16 on AMX, gets its own roof)."""
    env, bw = doc["environment"], (doc.get("bandwidth") or {}).get("gb_per_s")
    entry = lookup(env["device_name"]) if env["device"] == "cuda" else None
    out = {}
    for dt in report.DTYPE_NAMES:
        if not report.rows(doc, "matmul", dtype=dt):
            continue
        if entry is not None:
            peak = next((r["peak_tflops"] for r in report.rows(doc, "matmul", dtype=dt) if r.get("peak_tflops")), None)
            if peak:
                out[dt] = (peak, entry.bandwidth_gbs, f"datasheet ({entry.name})")
        elif bw:
            out[dt] = (report.best_rate(doc, dt), bw, "measured in this run")
    return out


def plot_roofline(doc: dict, ax=None, *, title: str | None = None):
    """Every measured matmul at (arithmetic intensity, TFLOP/s), under each dtype's roofline
    (solid: DRAM bandwidth). When the run measured a cache-resident copy (``cache_bandwidth``),
    the fp32 roof with that bandwidth is drawn dotted: operands that fit in that cache are read
    from it, not from DRAM, and can sit above the solid roof."""
    if ax is None:
        _, ax = fig_ax()
    mm = report.rows(doc, "matmul")
    ais = [r["intensity"] for r in mm] or [1.0]
    lo, hi = min(ais) / 2, max(ais) * 2
    cache = doc.get("cache_bandwidth")
    for dt, (peak, bw, _) in roofs(doc).items():
        for b, style in ((bw, "-"), *(((cache["gb_per_s"], ":"),) if cache and dt == "float32" else ())):
            ridge = roofline.ridge_point(peak, b)
            xs = sorted({lo, hi, min(max(ridge, lo), hi)})
            ax.plot(xs, [roofline.attainable_tflops(x, peak, b) for x in xs], style, color=color_for(dt),
                    lw=1.5, alpha=0.6)
    for dt in report.DTYPE_NAMES:
        pts = [(r["intensity"], r["tflops"]) for r in mm if r["dtype"] == dt]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=color_for(dt), label=_label(dt), zorder=3, s=18)
    legend = "solid: DRAM roof" + (f"; dotted: {cache['level']} roof (fp32)" if cache else "")
    return _finish(ax, doc, title, "arithmetic intensity (FLOP per byte moved)", legend)


def plot_speedups(docs: dict[str, dict], claims: dict[str, tuple[float, float]], ax=None):
    """Matmul speed-up of fp16/bf16 over fp32 *at one shape* (the largest of the size sweep both
    were measured at: :func:`report.throughput_ratio`) and training-step speed-up per machine,
    against the claimed ranges ``claims = {"matmul": (lo, hi), "train_step": (lo, hi)}``."""
    if ax is None:
        _, ax = fig_ax(8, 3.6)
    names, x = list(docs), 0
    ticks, labels = [], []
    for kind, (lo, hi) in claims.items():
        start = x
        for name in names:
            doc = docs[name]
            for dt in ("float16", "bfloat16"):
                if kind == "matmul":
                    v = report.throughput_ratio(doc, dt)
                else:
                    v = report.train_speedups(doc).get("amp_fp16" if dt == "float16" else "amp_bf16")
                if v is None:
                    continue
                ax.bar(x, v, color=color_for(dt), width=0.8)
                ticks.append(x)
                labels.append(f"{name}: {_label(dt)}")
                x += 1
        ax.fill_between([start - 0.5, x - 0.5], lo, hi, color="grey", alpha=0.2, lw=0)
        ax.text(start - 0.4, hi, f"claim: {kind.replace('_', ' ')} {lo:g}–{hi:g}×", fontsize=8, va="bottom")
        x += 1
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(ticks, labels, fontsize=7, rotation=30, ha="right")
    log2_axis(ax, "y", label="speed-up over fp32 (×)")
    ax.grid(alpha=0.3, axis="y", which="both")
    return ax


def plot_groups(doc: dict, group: str, ax=None, *, title: str | None = None):
    """Bars of TFLOP/s per shape of sweep ``group`` (e.g. ``"align"``), one bar per dtype."""
    if ax is None:
        _, ax = fig_ax()
    rs = [r for r in report.rows(doc, "matmul") if group in r.get("groups", [r.get("group")])]
    shapes = sorted({tuple(r["shape"]) for r in rs})
    dts = [dt for dt in report.DTYPE_NAMES if any(r["dtype"] == dt for r in rs)]
    w = 0.8 / max(len(dts), 1)
    for j, dt in enumerate(dts):
        labelled = False
        for i, s in enumerate(shapes):
            v = next((r["tflops"] for r in rs if r["dtype"] == dt and tuple(r["shape"]) == s), None)
            if v is not None:
                ax.bar(i + j * w, v, width=w, color=color_for(dt), label=None if labelled else _label(dt))
                labelled = True
    ax.set_xticks([i + w * (len(dts) - 1) / 2 for i in range(len(shapes))], [report.shape_label(s) for s in shapes],
                  fontsize=8)
    ax.set_xlabel("matmul shape m×k×n (n³: an n×n by n×n product)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(title or report.describe(doc), fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return ax

