"""amp_edu.viz: every recipe and format gets the course's colour; landmarks come from formats."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from amp_edu import formats, viz  # noqa: E402
from amp_edu.recipes import RECIPES  # noqa: E402


def test_every_recipe_has_a_colour():
    names = list(RECIPES) + ["fp16_static_scale(1024)", "fp16_master_scale(8)"]
    missing = [r for r in names if viz.color_for(r) is None]
    assert not missing, missing
    assert viz.color_for("fp16_static_scale(1024)") == viz.color_for("fp16_static_scale(8)")


class _Named:
    name = "amp_bf16"


@pytest.mark.parametrize("key", ["fp16", "half", "float16", torch.float16, "torch.float16", formats.FP16])
def test_format_colours_come_from_formats(key):
    assert viz.color_for(key) == formats.FP16.color


def test_colour_lookup_edge_cases():
    assert viz.color_for(_Named()) == viz.RECIPE_COLORS["amp_bf16"]          # a recipe object
    assert viz.color_for("no such thing") is None
    assert all(viz.color_for(f.name) == f.color for f in formats.ALL_FORMATS.values())


def test_fp16_landmarks_and_bit_layouts_follow_formats():
    ax = Figure().subplots()
    viz.fp16_landmarks(ax, which=("floor", "normal", "max"))
    assert [ln.get_label() for ln in ax.lines] == ["2^-24 (smallest subnormal)", "2^-14 (smallest normal)",
                                                   "65504 (max)"]
    assert [ln.get_xdata()[0] for ln in ax.lines] == [2.0 ** -24, 2.0 ** -14, 65504.0]
    with pytest.raises(ValueError, match="accepted"):
        viz.fp16_landmarks(ax, which=("nope",))
    ax2 = Figure().subplots()
    viz.bit_layouts(ax2, [formats.FP16, formats.FP8_E8M0, formats.FP4_E2M1])
    assert len(ax2.patches) == 16 + 8 + 4                      # e8m0: no sign, no mantissa boxes
    assert [t.get_text() for t in ax2.get_yticklabels()] == ["fp16", "fp8_e8m0", "fp4_e2m1"]
