"""Lesson 00's explorer: one n×n matmul in a 16-bit dtype against fp32, timed side by side here.

:func:`race` builds two random n×n matrices, times ``a @ b`` in float32 and in ``dtype`` in
interleaved rounds (:func:`amp_edu.measure.timing.compare`, so a neighbour's load hits both alike)
and returns both timings with the verdict of :func:`amp_edu.measure.verdict.speed_verdict`, which
says "faster" or "slower" only when the difference is larger than the spread of the repeats, and
nothing but "no verdict" when the repeats spread so much that the machine was busy.
:class:`MatmulRaceExplorer` wires a size slider and a dtype menu to it and draws the two medians
with their interquartile ranges. Nothing here is a stored number: every redraw measures again.
"""

from __future__ import annotations

import html

import ipywidgets as W
import torch
from matplotlib.figure import Figure

from .. import device as devices
from ..measure.timing import compare
from ..measure.verdict import speed_verdict
from ..validate import check_int
from ..viz import color_for
from .base import Explorer

__all__ = ["RACE_DTYPES", "race", "race_figure", "MatmulRaceExplorer", "matmul_race_explorer"]

RACE_DTYPES = ("bfloat16", "float16")      # the 16-bit dtypes the explorer races against float32


def race(log2_n: int, dtype: str = "bfloat16", device: str | torch.device = "cpu", *, rounds: int = 2,
         repeats: int = 3, min_time_s: float = 0.02) -> dict:
    """Time a ``2**log2_n``-square matmul in float32 and in ``dtype`` on ``device``, side by side.

    Returns ``{"n", "dtype", "device", "fp32": Timing, dtype: Timing, "verdict": Verdict}``.
    """
    log2_n = check_int(log2_n, "log2_n", min=1, max=15)
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a name, one of {RACE_DTYPES}, got {type(dtype).__name__}")
    if dtype not in RACE_DTYPES:
        raise ValueError(f"dtype must be one of {RACE_DTYPES}, got {dtype!r}")
    dev = torch.device(device)
    n = 2 ** log2_n
    gen = torch.Generator().manual_seed(0)
    a32, b32 = (torch.randn(n, n, generator=gen).to(dev) for _ in range(2))
    low = getattr(torch, dtype)
    a16, b16 = a32.to(low), b32.to(low)
    t = compare({"fp32": lambda: a32 @ b32, dtype: lambda: a16 @ b16}, device=dev.type,
                rounds=rounds, repeats=repeats, min_time_s=min_time_s)
    return {"n": n, "dtype": dtype, "device": dev.type, "fp32": t["fp32"], dtype: t[dtype],
            "verdict": speed_verdict(t[dtype], t["fp32"])}


def race_figure(r: dict) -> Figure:
    """The two medians of a :func:`race` result as bars, each with its interquartile range."""
    fig = Figure(figsize=(6, 1.8))
    ax = fig.add_subplot()
    names = ["fp32", r["dtype"]]
    ms = [r[k].median_s * 1e3 for k in names]
    iqr = [r[k].iqr_s * 1e3 / 2 for k in names]
    ax.barh(names, ms, xerr=iqr, color=[color_for("fp32"), color_for(r["dtype"])], capsize=4)
    ax.set_xlabel(f"ms per {r['n']}×{r['n']} matmul on {r['device']} (median; bar: IQR)")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


class MatmulRaceExplorer(Explorer):
    """A size slider (log2 n) and a dtype menu; each change times the matmul again."""

    def __init__(self, device: str | torch.device | None = None, log2_n: int = 7, dtype: str = "bfloat16",
                 max_log2_n: int | None = None):
        self.device = torch.device(device) if device is not None else devices.pick_device()
        top = max_log2_n if max_log2_n is not None else devices.pick(smoke=7, cpu=9, gpu=13)
        self.log2_n = W.IntSlider(value=log2_n, min=5, max=check_int(top, "max_log2_n", min=5, max=15),
                                  description="log2 n", continuous_update=False)
        self.dtype = W.Dropdown(options=list(RACE_DTYPES), value=dtype, description="dtype")
        self.text = W.HTML()
        self.plot = W.Output()
        self._wire([self.log2_n, self.dtype], W.HBox([self.log2_n, self.dtype]), self.text, self.plot)

    def update(self):
        r = race(self.log2_n.value, self.dtype.value, self.device)
        low = r[r["dtype"]]
        self.text.value = (html.escape(f"{r['n']}×{r['n']} on {r['device']}: fp32 {r['fp32'].median_s * 1e3:.3f} ms, "
                                       f"{r['dtype']} {low.median_s * 1e3:.3f} ms.") + "<br>"
                           + html.escape(r["verdict"].sentence(r["dtype"], "fp32") + "."))
        self.show_figure(race_figure(r))


def matmul_race_explorer(**kw) -> MatmulRaceExplorer:
    """Lesson 00's explorer, ready to display (the last expression of a cell)."""
    return MatmulRaceExplorer(**kw)
