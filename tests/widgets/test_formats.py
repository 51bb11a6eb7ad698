"""Lesson 01's widgets, driven headless: set a control's value, read what the widget shows."""

import math
import re

import pytest

from amp_edu.formats import decompose
from amp_edu.widgets import FormatExplorer, NumberLine, format_explorer, number_line_view
from amp_edu.widgets import formats as wf
from widgetcheck import redraws  # noqa: E402


def row(table_html: str, name: str) -> str:
    """The text of one format's row in the explorer's table (tags stripped)."""
    for tr in table_html.split("<tr>")[1:]:
        text = re.sub(r"<[^>]+>", "|", tr)
        cells = [c for c in text.split("|") if c.strip()]
        if cells and cells[0] == name:
            return " ".join(cells)
    raise AssertionError(f"no row for {name}")


@pytest.mark.parametrize("x, fmt, want", [
    (65520.0, "fp16", "overflow → inf"),
    (65519.0, "fp16", "normal, rounded"),
    (2.0 ** -25, "fp16", "underflow → rounded to 0"),
    (3e-8, "fp16", "subnormal"),
    (1.0, "fp16", "normal, exact"),
    (0.0, "fp16", "zero"),
    (1e4, "fp8_e5m2", "normal, rounded"),
    (1e5, "fp8_e5m2", "overflow → inf"),
    (math.nan, "bf16", "NaN in, NaN out"),
    (math.inf, "fp16", "inf in: inf"),
])
def test_fate(x, fmt, want):
    assert wf.fate(decompose(x, fmt)).startswith(want)


def test_fate_e4m3_follows_the_torch_policy():
    d = decompose(1000.0, "fp8_e4m3")
    assert wf.fate(d) in ("overflow → NaN", "overflow → saturated to ±448")
    assert wf.fate(decompose(math.inf, "fp8_e4m3")).startswith("inf in: ")
    assert "no inf in fp8_e4m3" in wf.fate(decompose(math.inf, "fp8_e4m3"))


def test_bits_html_colours_each_field():
    h = wf.bits_html(decompose(-2.0, "fp16"))
    assert re.findall(r'title="(\w+)">([01]+)<', h) == [("sign", "1"), ("exponent", "10000"),
                                                         ("mantissa", "0000000000")]


def test_explorer_shows_every_format_and_updates_when_the_value_changes():
    e = format_explorer(0.1)
    assert isinstance(e, FormatExplorer)
    for name in ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"):
        row(e.table.value, name)
    assert "0.09997559" in row(e.table.value, "fp16")
    e.text.value = 65520.0
    assert "inf" in row(e.table.value, "fp16") and "overflow → inf" in row(e.table.value, "fp16")
    assert "normal, exact" in row(e.table.value, "fp32")
    assert "65536" in row(e.table.value, "tf32")       # fp16's tie too, but tf32 has room above: 2^16
    e.text.value = 1e-8
    assert "underflow → rounded to 0" in row(e.table.value, "fp16")
    assert "underflow" not in row(e.table.value, "bf16")


def test_explorer_slider_and_text_stay_in_step():
    e = FormatExplorer(-1.0)
    e.slider.value = 2.0 ** -25
    assert e.text.value == -(2.0 ** -25)                                    # the slider keeps the sign
    assert "underflow → rounded to 0" in row(e.table.value, "fp16")
    e.text.value = 1e-12                                                    # below the slider's range
    assert e.text.value == 1e-12 and e.slider.value == pytest.approx(2.0 ** -30)
    e.text.value = 0.1
    assert "float32" in e.note.value                                        # 0.1 is not a float32


def test_explorer_rejects_unknown_formats():
    with pytest.raises(ValueError, match="accepted"):
        FormatExplorer(1.0, names=["fp12"])


def test_number_line_caption_figure_and_controls():
    n = number_line_view(1.0)
    assert isinstance(n, NumberLine)
    assert n.caption.value.startswith("fp16: x = 1 is stored as 1")
    assert "Spacing of the grid here: 0.000977" in n.caption.value
    redraws(n.plot, lambda: setattr(n.format, "value", "bf16"))
    assert "Spacing of the grid here: 0.00781" in n.caption.value
    n.text.value = 2049.0
    n.format.value = "fp16"
    assert "stored as 2048" in n.caption.value and "Spacing of the grid here: 2" in n.caption.value
    redraws(n.plot, lambda: setattr(n.count, "value", 3))
    assert "3 values at or below x, 3 above" in n.caption.value
    n.format.value = "fp8_e4m3"
    n.text.value = 1000.0
    assert "0 above" in n.caption.value and "overflow" in n.caption.value
    n.text.value = math.inf
    assert "not a finite number" in n.caption.value and n.plot.outputs == ()


def test_number_line_figure_has_the_requested_values():
    fig = wf.number_line_figure(2.0 ** -24, "fp16", 4)
    ax = fig.axes[0]
    assert "value" in ax.get_xlabel()
    ticks = ax.collections[0].get_segments()
    assert len(ticks) == 8                                                   # 4 at or below, 4 above


def test_number_line_only_small_formats():
    with pytest.raises(ValueError, match="fp16"):
        NumberLine(1.0, "fp12")
    assert wf.LINE_FORMATS == ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]


def test_viz_bit_layouts_and_number_line():
    from matplotlib.figure import Figure

    from amp_edu import viz
    from amp_edu.formats import FORMATS

    ax = Figure().add_subplot()
    viz.bit_layouts(ax, [FORMATS["fp16"], FORMATS["bf16"]])
    assert len(ax.patches) == 32                                             # one box per bit
    assert [t.get_text() for t in ax.get_yticklabels()] == ["fp16", "bf16"]
    with pytest.raises(ValueError, match="at least one"):
        viz.bit_layouts(ax, [])
    with pytest.raises(ValueError, match="non-empty"):
        viz.number_line(Figure().add_subplot(), [])
