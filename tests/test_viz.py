"""amp_edu.viz: every recipe and format gets the course's colour; landmarks come from formats."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from amp_edu import formats, viz  # noqa: E402
from amp_edu import recipes  # noqa: E402


def test_every_registered_recipe_has_its_own_colour_from_its_family(monkeypatch):
    names = [s.replace("(S)", "") for s in recipes.specs()]        # read now: fp8's included
    assert {"fp8_tensorwise", "fp8_rowwise", "fp8_delayed"} <= set(names)
    colours = {n: viz.color_for(n) for n in names}
    assert None not in colours.values(), colours
    assert len(set(colours.values())) == len(names), f"two recipes share a colour: {colours}"
    for n, c in colours.items():
        assert c in viz.FAMILY_PALETTES[recipes.entry(n).family.value], (n, c)
    assert viz.color_for("fp16_static_scale(1024)") == viz.color_for("fp16_static_scale(8)")
    assert viz.color_for("fp32") == formats.FP32.color and viz.color_for("amp_bf16") == formats.BF16.color
    monkeypatch.setattr(recipes.registry, "_REGISTRY", dict(recipes.registry._REGISTRY))
    recipes.register("fp8_custom", lambda: recipes.Recipe(), family=recipes.Family.FP8)
    assert viz.color_for("fp8_custom") in viz.FAMILY_PALETTES["fp8"]                   # a new one has one


def test_every_family_has_a_palette():
    assert set(viz.FAMILY_PALETTES) == {f.value for f in recipes.Family}


def test_a_recipe_named_like_a_format_has_that_formats_colour():
    """Format names are coloured without asking the registry; that is right only while a recipe
    named like a format (fp32) has the format's colour."""
    for name in recipes.names():
        if name in viz.FORMAT_COLORS:
            assert viz.recipe_color(name) == viz.FORMAT_COLORS[name], name


def test_a_format_colour_does_not_load_the_recipes():
    import subprocess
    import sys
    code = ("import sys, amp_edu.viz as v; c = v.color_for('fp16'); "
            "print(c, sorted(m for m in sys.modules if m.startswith(('amp_edu.recipes', 'amp_edu.fp8', 'amp_edu.optim'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(" ", 1) == [formats.FP16.color, "[]\n"]


class _Named:
    name = "amp_bf16"


@pytest.mark.parametrize("key", ["fp16", "half", "float16", torch.float16, "torch.float16", formats.FP16])
def test_format_colours_come_from_formats(key):
    assert viz.color_for(key) == formats.FP16.color


def test_colour_lookup_edge_cases():
    assert viz.color_for(_Named()) == viz.color_for("amp_bf16") == formats.BF16.color          # a recipe object
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
