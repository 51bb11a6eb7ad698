"""Lesson 05's explorer, driven headless: the plain function and the widget's controls."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from amp_edu import viz  # noqa: E402
from amp_edu.widgets import AutocastExplorer, autocast_explorer, explain_op  # noqa: E402
from amp_edu.widgets.autocast import OPS  # noqa: E402


def test_explain_op_categories_and_results():
    e = explain_op("F.softmax", "cuda", "fp16", "fp16")
    assert (e["kind"], e["cast_inputs"], e["ours"], e["torch"]) == ("fp32_dtype", ["fp16"], "fp32", None)
    e = explain_op("F.softmax", "cpu", "bf16", "bf16")
    assert (e["kind"], e["ours"], e["torch"]) == ("untouched", "bf16", "bf16")
    e = explain_op("torch.cat", "cpu", "bf16", "bf16", "fp32")
    assert (e["kind"], e["cast_inputs"], e["ours"]) == ("promote", ["fp32", "fp32"], "fp32")
    e = explain_op("torch.mm", "cpu", "bf16", "fp64", "fp64")
    assert e["cast_inputs"] == ["fp64", "fp64"] and e["ours"] == e["torch"] == "fp64"
    e = explain_op("F.binary_cross_entropy", "cuda")
    assert e["kind"] == "banned" and e["ours"].startswith("RuntimeError") and "with_logits" in e["why"]


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_agrees_with_torch_on_the_cpu_policy(op):
    e = explain_op(op, "cpu", "bf16", "bf16", "fp32")
    assert e["ours"] == e["torch"]


@pytest.mark.parametrize("kwargs", [dict(op="nope"), dict(op="torch.mm", policy="tpu"),
                                    dict(op="torch.mm", dtype="fp32"), dict(op="torch.mm", a="int8")])
def test_explain_op_rejects_bad_input(kwargs):
    with pytest.raises(ValueError, match="must be"):
        explain_op(**kwargs)


def test_widget_updates_when_controls_change():
    w = AutocastExplorer()
    assert "fp32_dtype" in w.out.value and "only on a GPU" in w.out.value
    w.policy.value = "cpu"
    w.dtype.value = "bf16"
    w.a.value = "bf16"
    assert w.last["kind"] == "untouched" and "torch.autocast</td><td><b>bf16" in w.out.value
    w.op.value = "torch.dot"
    w.b.value = "fp32"
    assert "RuntimeError" in w.out.value            # no promotion for dot on the CPU table
    assert autocast_explorer().widget.children


def test_category_grid():
    fig, ax = plt.subplots()
    viz.category_grid(ax, ["mm", "exp"], ["cuda", "cpu"], [["lower", "lower"], ["fp32", None]],
                      {"lower": "#ff7f0e", "fp32": "#1f77b4"}, title="t")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lower", "fp32"]
    with pytest.raises(ValueError, match="without a colour"):
        viz.category_grid(ax, ["mm"], ["cuda"], [["banned"]], {"lower": "#ff7f0e"})
    with pytest.raises(ValueError, match="rows"):
        viz.category_grid(ax, ["mm", "x"], ["cuda"], [["lower"]], {"lower": "#ff7f0e"})
    plt.close(fig)
