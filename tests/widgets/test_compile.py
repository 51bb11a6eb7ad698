"""Lesson 13's cast explorer: the logic traces the op; the widget shows it, headless."""

import pytest

from amp_edu.widgets import compile as wc


def test_softmax_is_upcast_and_rounded_back():
    g = wc.op_graph("softmax", "bf16")
    assert g["upcast"] and g["computes_in"] == ["float32"]
    assert any(c[1:] == ("bfloat16", "float32") for c in g["casts"])
    assert any(c[1:] == ("float32", "bfloat16") for c in g["casts"])
    assert "upcast to float32" in wc.graph_text("softmax", "bf16")


def test_relu_stays_in_the_input_dtype():
    g = wc.op_graph("relu", "fp16")
    assert not g["upcast"] and g["computes_in"] == ["float16"]
    assert "no cast in the graph" in wc.graph_text("relu", "fp16")


def test_bad_choices_are_value_errors():
    with pytest.raises(ValueError, match="op must be one of"):
        wc.op_graph("conv")
    with pytest.raises(ValueError, match="dtype must be one of"):
        wc.op_graph("relu", "fp8")


def test_widget_updates_its_text():
    e = wc.cast_explorer()
    assert "softmax on bf16" in e.text.value
    e.op.value = "relu"
    assert "relu on bf16" in e.text.value and "no cast" in e.text.value
