"""The one base every explorer uses: controls in, text and a figure out, testable headless.

An explorer is a few ipywidgets controls, an :class:`ipywidgets.HTML` for sentences and an
:class:`ipywidgets.Output` for a figure. Its logic lives in plain functions (so tests call them
directly); the explorer only *wires* them:

* :meth:`Explorer._wire` makes every control call :meth:`Explorer.update` when its value changes,
  lays the rows out in ``self.widget`` (a ``VBox``) and draws once;
* :meth:`Explorer.show_figure` renders a matplotlib ``Figure`` to a PNG and puts it in an
  ``Output`` with ``append_display_data`` — a real image in the notebook, and an output that tests
  read without a browser (``out.outputs[0]["data"]["image/png"]``);
* displaying the explorer (the last expression of a cell) displays ``self.widget`` *and*, in the
  same output, a static PNG of its current state (:meth:`Explorer.snapshot_png`: the control
  values, the sentences and the figure). A live notebook shows the widget; a reader of the stored
  page on a code host, who has no kernel, sees the picture of the default state instead.

Figures are built with ``matplotlib.figure.Figure`` (not ``pyplot``), so no global figure is left
open and nothing is drawn twice by the inline backend.
"""

from __future__ import annotations

import abc
import base64
import html
import io
import re
import textwrap

import ipywidgets as W
from matplotlib.figure import Figure

__all__ = ["Explorer", "figure_png", "show_figure", "snapshot_png"]

WRAP = 120      # characters per line of a static picture: an 8-inch figure at 8-point monospace


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The PNG bytes of ``fig``."""
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def show_figure(out: W.Output, fig: Figure | None, dpi: int = 80) -> None:
    """Replace what ``out`` shows with ``fig`` as a PNG (with ``None``, show nothing)."""
    from IPython.display import Image

    out.outputs = ()
    if fig is not None:
        out.append_display_data(Image(data=figure_png(fig, dpi), format="png"))


def _walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _walk(child)


def _text_of(value: str) -> list[str]:
    """The lines a reader sees in an HTML widget's value (tags dropped, entities decoded)."""
    value = re.sub(r"<(br|/?p|/?div|/?table|/tr|/li|/h\d)\b[^>]*>", "\n", value, flags=re.I)
    value = re.sub(r"</t[dh]>", "  ", value, flags=re.I)
    text = html.unescape(re.sub(r"<[^>]+>", "", value))
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def snapshot_png(root: W.Widget, dpi: int = 80, max_lines: int = 40) -> bytes:
    """A static PNG of what ``root`` shows now: each control's description and value, the text of
    its HTML widgets, and the images of its Outputs — for a reader without a kernel."""
    from matplotlib.image import imread

    controls, lines, images = [], [], []
    for w in _walk(root):
        if isinstance(w, (W.HTML, W.HTMLMath, W.Label)):
            lines += _text_of(str(w.value))
        elif isinstance(w, W.Output):
            for out in w.outputs:
                data = out.get("data", {})
                if "image/png" in data:
                    images.append(imread(io.BytesIO(base64.b64decode(data["image/png"])), format="png"))
                elif "text/plain" in data or out.get("text"):
                    lines += str(data.get("text/plain", out.get("text", ""))).splitlines()
        elif isinstance(w, W.ValueWidget) and not isinstance(w, W.Output):
            label = getattr(w, "description", "") or type(w).__name__
            controls.append(f"{label}: {w.value!r}")
    text = (["controls — " + ", ".join(controls)] if controls else []) + lines[:max_lines]
    text = [part for line in text for part in (textwrap.wrap(line, WRAP, subsequent_indent="  ") or [""])]
    text_h = 0.22 * len(text) + 0.5
    img_h = sum(4.0 * im.shape[0] / im.shape[1] for im in images)
    fig = Figure(figsize=(8, text_h + img_h))
    fig.text(0.01, 1 - 0.15 / (text_h + img_h), "static picture of this explorer's default state "
             "(run the cell for the live explorer)", fontsize=8, style="italic", va="top", color="grey")
    y = 1 - 0.45 / (text_h + img_h)
    for line in text:
        fig.text(0.01, y, line, fontsize=8, family="monospace", va="top")
        y -= 0.22 / (text_h + img_h)
    bottom = 0.0
    for im in reversed(images):
        h = 4.0 * im.shape[0] / im.shape[1] / (text_h + img_h)
        ax = fig.add_axes((0.0, bottom, 1.0, h))
        ax.imshow(im)
        ax.axis("off")
        bottom += h
    return figure_png(fig, dpi)


class Explorer(abc.ABC):
    """Base of the lessons' explorers. A subclass builds its controls, then calls
    ``self._wire(controls, *rows)`` at the end of ``__init__`` and implements :meth:`update`."""

    widget: W.VBox
    plot: W.Output

    def _wire(self, controls, *rows) -> None:
        """Redraw when any of ``controls`` changes; lay ``rows`` out as ``self.widget``; draw."""
        for c in controls:
            c.observe(lambda _change: self.update(), names="value")
        self.widget = W.VBox(list(rows))
        self.update()

    @abc.abstractmethod
    def update(self):
        """Recompute from the controls' values and show the result."""

    def show_figure(self, fig: Figure | None) -> None:
        """Show ``fig`` in ``self.plot`` (see :func:`show_figure`)."""
        show_figure(self.plot, fig)

    def snapshot_png(self) -> bytes:
        """A static PNG of the explorer as it is now (:func:`snapshot_png` of ``self.widget``)."""
        return snapshot_png(self.widget)

    def _repr_mimebundle_(self, include=None, exclude=None):
        """The widget's own bundle plus ``image/png``: a frontend with a kernel renders the live
        widget; one without (a code host, nbconvert) falls back to the picture."""
        data = dict(self.widget._repr_mimebundle_())
        data["image/png"] = base64.b64encode(self.snapshot_png()).decode("ascii")
        return data
