"""amp_edu.widgets.base: one way to wire controls and show a figure, testable headless."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as W  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from amp_edu import widgets  # noqa: E402
from amp_edu.widgets.base import Explorer, figure_png, show_figure  # noqa: E402


class Doubler(Explorer):
    def __init__(self):
        self.x = W.IntSlider(value=2)
        self.text = W.HTML()
        self.plot = W.Output()
        self.calls = 0
        self._wire((self.x,), self.x, self.text, self.plot)

    def update(self):
        self.calls += 1
        self.text.value = str(2 * self.x.value)
        fig = Figure()
        fig.subplots().plot([0, 1], [0, self.x.value])
        self.show_figure(fig if self.x.value else None)


def test_wire_draws_once_and_on_every_change():
    d = Doubler()
    assert (d.calls, d.text.value) == (1, "4") and list(d.widget.children) == [d.x, d.text, d.plot]
    assert d.plot.outputs[0]["data"]["image/png"]
    d.x.value = 5
    assert (d.calls, d.text.value) == (2, "10") and len(d.plot.outputs) == 1
    d.x.value = 0                                   # show_figure(None) clears the output
    assert d.plot.outputs == ()


def test_figure_png_and_errors():
    assert figure_png(Figure()).startswith(b"\x89PNG")
    with pytest.raises(TypeError, match="Figure"):
        figure_png("not a figure")
    with pytest.raises(TypeError, match="abstract"):
        Explorer()                      # an explorer must say how it updates
    out = W.Output()
    show_figure(out, Figure())
    assert len(out.outputs) == 1


def test_every_explorer_uses_the_base():
    classes = [widgets.FormatExplorer, widgets.NumberLine, widgets.RooflineExplorer, widgets.MemoryExplorer,
               widgets.AutocastExplorer, widgets.LayerExplorer, widgets.ScaleExplorer,
               widgets.LossScaleExplorer, widgets.StudyExplorer]
    assert all(issubclass(c, Explorer) for c in classes)
    assert isinstance(widgets.autocast_explorer(), widgets.AutocastExplorer)   # an explorer, like the others


def test_display_carries_a_static_picture_of_the_default_state():
    """A reader without a kernel sees image/png; a live frontend the widget view."""
    import base64
    d = Doubler()
    bundle = d._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    png = base64.b64decode(bundle["image/png"])
    assert png.startswith(b"\x89PNG")
    d.x.value = 0                                   # no figure: the picture still shows controls and text
    assert d.snapshot_png().startswith(b"\x89PNG")
    from amp_edu.widgets.base import _text_of, snapshot_png
    assert _text_of("<b>a</b><br>b &lt; c<table><tr><td>1</td><td>2</td></tr></table>") == ["a", "b < c", "1  2"]
    assert snapshot_png(W.VBox([W.HTML("<p>hello</p>"), W.IntSlider(description="n", value=3)])).startswith(b"\x89PNG")


def test_every_explorer_leaves_a_picture():
    for make in (widgets.FormatExplorer, widgets.NumberLine, widgets.autocast_explorer):
        assert base64_png(make())


def base64_png(explorer):
    import base64
    return base64.b64decode(explorer._repr_mimebundle_()["image/png"]).startswith(b"\x89PNG")
