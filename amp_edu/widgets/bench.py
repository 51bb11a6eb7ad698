"""Lesson 06's explorer: where does a matmul sit on a device's roofline?

:class:`RooflineExplorer` — pick m, k, n, a dtype and a device (the datasheet GPUs, or this
machine as measured by a bench run): see the arithmetic intensity, the ridge point, whether the
matmul is memory- or compute-bound, and the throughput the roofline allows, drawn as a point on
the roofline. The logic is :func:`roofline_summary` and :func:`roofline_figure`.
"""

from __future__ import annotations

import html

import ipywidgets as W
from matplotlib.figure import Figure

from ..bench import report, roofline
from ..bench.peaks import KNOWN_GPUS
from .. import formats
from ..viz import color_for, log2_axis
from .base import Explorer

__all__ = ["device_roofs", "roofline_summary", "roofline_figure", "RooflineExplorer", "roofline_explorer"]

# The explorer's short names -> bench result names ("float16", "tf32"), and back to the peak-table fields.
_DTYPES = {name: formats.get(name).torch_name for name in ("fp32", "tf32", "fp16", "bf16", "fp8")}
_FIELD = {bench_name: name for name, bench_name in _DTYPES.items()}
THIS_MACHINE = "this machine (measured)"


def device_roofs(doc: dict | None = None) -> dict[str, dict]:
    """``{device label: {"peaks": {dtype: TFLOP/s}, "bandwidth_gbs": GB/s}}`` — the datasheet GPUs,
    and with a bench result ``doc`` also this machine: the best rate measured per dtype and the
    measured copy bandwidth."""
    roofs = {}
    for name, g in KNOWN_GPUS.items():
        roofs[name] = {"peaks": {dt: getattr(g, f) for dt, f in _FIELD.items() if getattr(g, f)},
                       "bandwidth_gbs": g.bandwidth_gbs}
    if doc is not None and doc.get("bandwidth"):
        peaks = {}
        for dt in _FIELD:
            rates = [r["tflops"] for r in report.rows(doc, "matmul", dtype=dt)]
            if rates:
                peaks[dt] = max(rates)
        if peaks:
            roofs[THIS_MACHINE] = {"peaks": peaks, "bandwidth_gbs": doc["bandwidth"]["gb_per_s"]}
    return roofs


def roofline_summary(m: int, k: int, n: int, dtype: str, peak_tflops: float, bandwidth_gbs: float) -> dict:
    """Intensity, ridge point, bound and attainable TFLOP/s of an [m, k, n] matmul in ``dtype``."""
    dt = _DTYPES.get(dtype, dtype)
    out_dtype = "bfloat16" if dt == "float8_e4m3fn" else None
    ai = roofline.arithmetic_intensity(m, k, n, dt, out_dtype)
    return {"intensity": ai, "ridge": roofline.ridge_point(peak_tflops, bandwidth_gbs),
            "bound": roofline.bound(ai, peak_tflops, bandwidth_gbs),
            "attainable_tflops": roofline.attainable_tflops(ai, peak_tflops, bandwidth_gbs),
            "peak_tflops": peak_tflops, "bandwidth_gbs": bandwidth_gbs}


def roofline_figure(s: dict, dtype: str) -> Figure:
    """The roofline of ``s`` (a :func:`roofline_summary`) with the matmul as a point on it."""
    fig = Figure(figsize=(6, 3))
    ax = fig.add_subplot()
    lo, hi = min(s["intensity"], s["ridge"]) / 8, max(s["intensity"], s["ridge"]) * 8
    xs = [lo, s["ridge"], hi]
    col = color_for(_DTYPES.get(dtype, dtype))
    ax.plot(xs, [roofline.attainable_tflops(x, s["peak_tflops"], s["bandwidth_gbs"]) for x in xs], color=col)
    ax.scatter([s["intensity"]], [s["attainable_tflops"]], color="black", zorder=3, label="this matmul")
    ax.axvline(s["ridge"], color="grey", ls=":", lw=1, label="ridge point")
    log2_axis(ax, "x", label="arithmetic intensity (FLOP/byte)")
    log2_axis(ax, "y", label="attainable TFLOP/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


class RooflineExplorer(Explorer):
    """Choose m, k, n, dtype and device; see intensity, bound and the roofline point."""

    def __init__(self, doc: dict | None = None, m: int = 16, k: int = 8192, n: int = 8192, dtype: str = "bf16",
                 device: str = "H100 SXM"):
        self.roofs = device_roofs(doc)
        self.m, self.k, self.n = (W.BoundedIntText(value=v, min=1, max=1 << 20, description=d, layout=W.Layout(width="160px"))
                                  for d, v in (("m", m), ("k", k), ("n", n)))
        self.device = W.Dropdown(options=list(self.roofs), value=device if device in self.roofs else next(iter(self.roofs)),
                                 description="device")
        self.dtype = W.Dropdown(options=[], description="dtype")
        self._dtypes(dtype)
        self.text = W.HTML()
        self.plot = W.Output()
        self.device.observe(lambda _: (self._dtypes(self.dtype.value), self.update()), names="value")
        for c in (self.m, self.k, self.n, self.dtype):
            c.observe(lambda _: self.update(), names="value")
        self.widget = W.VBox([W.HBox([self.m, self.k, self.n]), W.HBox([self.device, self.dtype]), self.text, self.plot])
        self.update()

    def _dtypes(self, keep):
        roof = self.roofs[self.device.value]
        options = [name for name, dt in _DTYPES.items() if dt in roof["peaks"]]
        self.dtype.options = options
        self.dtype.value = keep if keep in options else options[0]

    def summary(self) -> dict:
        roof = self.roofs[self.device.value]
        return roofline_summary(self.m.value, self.k.value, self.n.value, self.dtype.value,
                                roof["peaks"][_DTYPES[self.dtype.value]], roof["bandwidth_gbs"])

    def update(self):
        s = self.summary()
        # a datasheet GPU's roof is its peak; this machine's is the best rate its run measured
        roof = "of the best rate measured here" if self.device.value == THIS_MACHINE else "of the datasheet peak"
        self.text.value = html.escape(
            f"intensity {s['intensity']:.1f} FLOP/byte, ridge point {s['ridge']:.1f} FLOP/byte → "
            f"{s['bound']}-bound: at most {s['attainable_tflops']:.3g} of {s['peak_tflops']:.3g} TFLOP/s "
            f"({100 * s['attainable_tflops'] / s['peak_tflops']:.0f}% {roof})")
        self.show_figure(roofline_figure(s, self.dtype.value))


def roofline_explorer(doc: dict | None = None, **kw) -> RooflineExplorer:
    """The roofline explorer, ready to display; pass a bench result to add this machine."""
    return RooflineExplorer(doc, **kw)
