"""The one base every explorer uses: controls in, text and a figure out, testable headless.

An explorer is a few ipywidgets controls, an :class:`ipywidgets.HTML` for sentences and an
:class:`ipywidgets.Output` for a figure. Its logic lives in plain functions (so tests call them
directly); the explorer only *wires* them:

* :meth:`Explorer._wire` makes every control call :meth:`Explorer.update` when its value changes,
  lays the rows out in ``self.widget`` (a ``VBox``) and draws once;
* :meth:`Explorer.show_figure` renders a matplotlib ``Figure`` to a PNG and puts it in an
  ``Output`` with ``append_display_data`` — a real image in the notebook, and an output that tests
  read without a browser (``out.outputs[0]["data"]["image/png"]``);
* displaying the explorer (the last expression of a cell) displays ``self.widget``.

Figures are built with ``matplotlib.figure.Figure`` (not ``pyplot``), so no global figure is left
open and nothing is drawn twice by the inline backend.
"""

from __future__ import annotations

import abc
import io

import ipywidgets as W
from matplotlib.figure import Figure

__all__ = ["Explorer", "figure_png", "show_figure"]


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

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)
