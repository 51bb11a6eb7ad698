"""Where a model's gradients fall on the fp16 number line — per layer, for any loss scale.

The 2018 *Mixed Precision Training* paper (Micikevicius et al., arXiv:1710.03740) made its case
with one picture: a histogram of a network's activation-gradient magnitudes in log2 bins, with
the fp16 range drawn over it. Most of the values sat *below* fp16's smallest subnormal, 2^-24,
and would become zero — while the top of fp16's range, up to 65504, went unused. Multiplying the
loss by a constant S shifts the whole histogram right by log2(S) (backpropagation is linear), so
the values come back into range: loss scaling.

This module measures that picture on our models:

* :func:`capture` runs one forward/backward in float32 and records, per leaf module, the
  **activation gradients** (the gradient of the loss w.r.t. the module's output, via a tensor
  hook) and the **weight gradients** (``param.grad``).
* :func:`fp16_fate` says what storing each value × S in fp16 would do to it. The cast decides,
  exactly as torch's ``.half()`` does; in magnitudes ``a = |x| × S``:

  ============= =========================== ===============================================
  ``zero``      a == 0                      already zero (not an fp16 effect)
  ``flush``     0 < a <= 2^-25              rounds to 0: lost (2^-25 itself is a tie → 0)
  ``subnormal`` 2^-25 < a < 2^-14 - 2^-25   kept with fewer significant bits
  ``normal``    up to 65504 (a < 65520)     kept to fp16's full 11-bit precision
  ``overflow``  a >= 65520                  rounds to inf
  ``nonfinite`` x is already inf or NaN
  ============= =========================== ===============================================

* :func:`log2_histogram` bins magnitudes by exponent (``floor(log2 a)``, exact through
  ``torch.frexp``), with zeros counted apart, and :func:`plot_histogram` draws it the paper's way.
* :func:`layer_report` gives those fractions per layer; :func:`max_safe_scale` picks the largest
  power-of-two S that keeps the largest gradient finite; :func:`scale_sweep` tabulates the
  fractions over many scales.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from . import formats
from .formats import FATES
from .hooks import forward_hooks
from .validate import check_int, check_number

__all__ = ["FP16_MAX", "FP16_MIN_NORMAL", "FATES", "flat_values", "fp16_fate", "fp16_fractions",
           "log2_histogram", "GradientRecord", "capture", "layer_report", "max_safe_scale", "scale_sweep",
           "plot_histogram", "plot_layer_fractions", "format_report"]

FP16_MAX = formats.FP16.max                  # 65504 (formats owns it; named here for the lesson)
FP16_MIN_NORMAL = formats.FP16.smallest_normal   # 2^-14


def flat_values(values) -> torch.Tensor:
    """A float tensor or a list of them → one flat float32 CPU tensor (detached)."""
    if isinstance(values, torch.Tensor):
        ts = [values]
    elif isinstance(values, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in values):
        ts = list(values)
    else:
        raise TypeError(f"values must be a tensor or a list/tuple of tensors, got {type(values).__name__}")
    bad = [t.dtype for t in ts if not t.is_floating_point()]
    if bad:
        raise TypeError(f"values must be floating-point tensors, got dtype {bad[0]}")
    if not ts:
        return torch.zeros(0)
    return torch.cat([t.detach().reshape(-1).float().cpu() for t in ts])


def _check_scale(scale) -> float:
    return check_number(scale, "scale", positive=True)


def fp16_fate(values, scale: float = 1.0) -> torch.Tensor:
    """Index into :data:`FATES` for each element of ``values × scale`` stored in fp16 (a flat int8
    tensor). ``values``: a float tensor or a list of them (flattened and concatenated).
    The product is formed in float32, like a scaled fp32 gradient; :func:`amp_edu.formats.fate`
    decides, for any format."""
    return formats.fate(flat_values(values), "fp16", _check_scale(scale))


def fp16_fractions(values, scale: float = 1.0) -> dict:
    """``{fate: fraction of all elements}`` for every fate in :data:`FATES`, plus ``"n"`` (count)
    and ``"flush_of_nonzero"``: the share of the *non-zero* values that fp16 flushes to zero."""
    fate = fp16_fate(values, scale)
    n = fate.numel()
    counts = torch.bincount(fate.long(), minlength=len(FATES)).tolist()
    out = {k: (c / n if n else 0.0) for k, c in zip(FATES, counts)}
    nonzero = n - counts[0]
    out["flush_of_nonzero"] = counts[1] / nonzero if nonzero else 0.0
    out["n"] = n
    return out


def log2_histogram(values, scale: float = 1.0, *, lo: int = -60, hi: int = 20):
    """Exponent histogram of ``|values| × scale``: bin ``e`` counts magnitudes in ``[2^e, 2^(e+1))``.

    Returns ``(exponents, counts, n_zero, n_nonfinite)``: ``exponents`` is ``lo .. hi`` (magnitudes
    below ``2^lo`` are counted in bin ``lo``, above ``2^(hi+1)`` in bin ``hi``), zeros and
    non-finite values are counted apart. Bins are exact: ``torch.frexp`` reads the exponent.
    """
    lo, hi = check_int(lo, "lo"), check_int(hi, "hi")
    if not lo < hi:
        raise ValueError(f"need integers lo < hi, got lo={lo!r}, hi={hi!r}")
    x = flat_values(values)
    a = (x * _check_scale(scale)).abs()
    finite = torch.isfinite(a)
    nz = finite & (a > 0)
    _, e = torch.frexp(a[nz])                            # a = m * 2^e with m in [0.5, 1)
    e = (e - 1).clamp(lo, hi) - lo
    counts = torch.bincount(e.long(), minlength=hi - lo + 1)
    return (torch.arange(lo, hi + 1), counts, int((finite & (a == 0)).sum()), int((~finite).sum()))


@dataclass
class GradientRecord:
    """Gradients of one backward pass: ``activations[name]`` (w.r.t. each module's output) and
    ``weights[name]`` (each parameter's ``.grad``), float32 on the CPU, in module order."""

    loss: float
    activations: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)

    def values(self, kind: str = "activations") -> torch.Tensor:
        """All gradients of ``kind`` ("activations" or "weights") as one flat tensor."""
        return flat_values(list(self.by_layer(kind).values()))

    def by_layer(self, kind: str = "activations") -> dict:
        """``{layer name: flat gradient tensor}`` for ``kind`` ("activations" or "weights")."""
        if kind not in ("activations", "weights"):
            raise ValueError(f"kind must be 'activations' or 'weights', got {kind!r}")
        return self.activations if kind == "activations" else self.weights


def capture(model: nn.Module, x, y, loss_fn, *, context=None) -> GradientRecord:
    """One forward and backward of ``loss_fn(model(x), y)``, recording gradients per leaf module.

    Activation gradients are taken on the output of every leaf module (one with no children)
    whose output is a floating tensor that needs grad; a module called twice gets ``name#2``.
    ``context`` (a zero-argument callable returning a context manager, e.g. an autocast) wraps
    the forward. Parameter gradients already present are cleared first; the model's weights are
    not changed.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    rec = GradientRecord(loss=float("nan"))
    seen = {}

    def on_forward(name, _module):
        def hook(_mod, _inp, out):
            if name and isinstance(out, torch.Tensor) and out.is_floating_point() and out.requires_grad:
                seen[name] = seen.get(name, 0) + 1
                key = name if seen[name] == 1 else f"{name}#{seen[name]}"
                rec.activations[key] = None                          # keep forward order
                out.register_hook(lambda g, key=key: rec.activations.__setitem__(
                    key, g.detach().float().cpu().reshape(-1)))
        return hook

    model.zero_grad(set_to_none=True)
    with forward_hooks(model, on_forward, leaves_only=True):      # the model itself is not a layer
        with context() if context is not None else contextlib.nullcontext():
            out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
    rec.loss = float(loss.detach())
    rec.activations = {k: v for k, v in rec.activations.items() if v is not None}
    rec.weights = {n: p.grad.detach().float().cpu().reshape(-1)
                   for n, p in model.named_parameters() if p.grad is not None}
    return rec


def layer_report(record: GradientRecord, kind: str = "activations", scale: float = 1.0) -> list[dict]:
    """One row per layer: ``name``, ``n``, the :data:`FATES` fractions, ``flush_of_nonzero``,
    ``max_abs`` and ``median_abs`` (of the non-zero magnitudes, unscaled)."""
    rows = []
    for name, g in record.by_layer(kind).items():
        row = {"name": name}
        row.update(fp16_fractions(g, scale))
        a = g.abs()
        a = a[torch.isfinite(a) & (a > 0)]
        row["max_abs"] = float(a.max()) if a.numel() else 0.0
        row["median_abs"] = float(a.median()) if a.numel() else 0.0
        rows.append(row)
    return rows


def format_report(rows: list[dict], *, fates=("zero", "flush", "subnormal", "overflow")) -> str:
    """A fixed-width text table of :func:`layer_report` rows."""
    w = max([len("layer")] + [len(r["name"]) for r in rows])
    head = f"{'layer':<{w}} {'values':>8} " + " ".join(f"{f:>9}" for f in fates) + f" {'max |g|':>9}"
    lines = [head]
    for r in rows:
        lines.append(f"{r['name']:<{w}} {r['n']:>8} " + " ".join(f"{r[f]:>9.2%}" for f in fates)
                     + f" {r['max_abs']:>9.2e}")
    return "\n".join(lines)


def max_safe_scale(values, *, limit: float = FP16_MAX) -> float:
    """The largest power of two S with ``max|values| × S <= limit`` (default 65504), so the largest
    gradient stays finite in fp16. S may be below 1 when gradients exceed the limit already.
    Raises ``ValueError`` if there is no non-zero finite value to go by."""
    limit = check_number(limit, "limit", positive=True)
    x = flat_values(values)
    a = x.abs()
    a = a[torch.isfinite(a)]
    if a.numel() == 0 or float(a.max()) == 0.0:
        raise ValueError("max_safe_scale needs at least one non-zero finite value")
    m = float(a.max())
    k = math.floor(math.log2(limit / m))
    while m * 2.0 ** (k + 1) <= limit:                   # guard against log2 rounding
        k += 1
    while m * 2.0 ** k > limit:
        k -= 1
    return 2.0 ** k


def scale_sweep(values, log2_scales) -> list[dict]:
    """:func:`fp16_fractions` for S = 2^k, for each k in ``log2_scales`` (adds key ``log2_scale``)."""
    rows = []
    for k in log2_scales:
        k = check_int(k, "each of log2_scales (k in S = 2^k)")
        r = fp16_fractions(values, 2.0 ** k)
        r["log2_scale"] = k
        rows.append(r)
    return rows


_REGIONS = (  # (from, to, colour, label) in log2 of the magnitude, for the shaded fp16 ranges
    (-float("inf"), math.log2(formats.FP16.smallest_subnormal) - 1, "#d62728", "becomes 0 in fp16"),
    (math.log2(formats.FP16.smallest_subnormal) - 1, math.log2(FP16_MIN_NORMAL), "#ff7f0e",
     "fp16 subnormal (precision drains)"),
    (math.log2(FP16_MIN_NORMAL), math.log2(FP16_MAX), "#2ca02c", "fp16 normal range"),
    (math.log2(FP16_MAX), float("inf"), "#7f7f7f", "overflows to inf"),
)


def plot_histogram(ax, values, scale: float = 1.0, *, label: str | None = None, color: str | None = None,
                   lo: int = -60, hi: int = 20, regions: bool = True):
    """The paper's figure: percentage of values per log2 bin of ``|values| × scale``, a separate
    bar for exact zeros at the left, and the fp16 ranges shaded. Returns the fractions."""
    exps, counts, n_zero, n_bad = log2_histogram(values, scale, lo=lo, hi=hi)
    n = int(counts.sum()) + n_zero + n_bad
    if n == 0:
        raise ValueError("no values to plot")
    nz = counts > 0
    e_lo = int(exps[nz].min()) - 2 if nz.any() else lo
    e_hi = int(exps[nz].max()) + 2 if nz.any() else hi
    e_lo, e_hi = max(lo, min(e_lo, -27)), min(hi, max(e_hi, 0))
    if regions:
        for a, b, c, lab in _REGIONS:
            ax.axvspan(max(a, e_lo - 1), min(b, e_hi + 1), color=c, alpha=0.10, lw=0, label=lab)
    sel = (exps >= e_lo) & (exps <= e_hi)
    pct = 100.0 * counts[sel].double() / n
    ax.bar(exps[sel].numpy() + 0.5, pct.numpy(), width=0.9, color=color or "#1f77b4",
           label=label or f"gradients × {scale:g}")
    zero_x = e_lo - 3.5                                   # the zero bar, apart from the log2 bins
    if n_zero:
        ax.bar([zero_x], [100.0 * n_zero / n], width=0.9, color="#444444", hatch="//", label="exact zeros")
    ax.axvline(e_lo - 1.5, color="#999999", lw=0.8)
    first = e_lo + (-e_lo) % 4
    ticks = list(range(first if first > e_lo else first + 4, e_hi + 1, 4))
    ax.set_xticks([zero_x] + ticks)
    ax.set_xticklabels(["0"] + [f"$2^{{{e}}}$" for e in ticks])
    ax.set_xlim(e_lo - 5, e_hi + 1)
    ax.set_yscale("log")
    ax.set_xlabel("gradient magnitude |g| × S (log2 bins; left bar: exact zeros)")
    ax.set_ylabel("% of values")
    return fp16_fractions(values, scale)


def plot_layer_fractions(ax, rows: list[dict], *, fates=("flush", "subnormal", "overflow")):
    """Horizontal stacked bars: per layer, the share of its values in each of ``fates``."""
    colors = {"zero": "#444444", "flush": "#d62728", "subnormal": "#ff7f0e", "normal": "#2ca02c",
              "overflow": "#7f7f7f", "nonfinite": "#9467bd"}
    names = [r["name"] for r in rows]
    left = [0.0] * len(rows)
    for f in fates:
        vals = [100.0 * r[f] for r in rows]
        ax.barh(names, vals, left=left, color=colors[f], label=f)
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel("% of the layer's gradient values")
    ax.legend(fontsize=8, loc="lower right")
    return ax
