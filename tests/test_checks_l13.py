"""Lesson 13 graders: the reference passes; the wrong readings a learner gives fail, each with its hint.

Part A's graphs are traced (no C++); Part B compiles the exercise model once per process with
Inductor, so those tests are marked slow.
"""

import pytest
import torch

from amp_edu import compile as comp
from amp_edu.checks import l13
from amp_edu.checks.core import CheckFailed


def _calls(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]


LOW = (torch.bfloat16, torch.float16)


def reference(gm):
    return {comp.op_name(n) for n in _calls(gm) if comp.op_name(n) not in comp.CAST_OPS | comp.VIEW_OPS
            and comp.node_dtype(n) in LOW}


def with_casts(gm):
    return {comp.op_name(n) for n in _calls(gm) if comp.op_name(n) not in comp.VIEW_OPS and comp.node_dtype(n) in LOW}


def with_views(gm):
    return {comp.op_name(n) for n in _calls(gm) if comp.op_name(n) not in comp.CAST_OPS and comp.node_dtype(n) in LOW}


def by_input_dtype(gm):
    return {comp.op_name(n) for n in _calls(gm) if comp.op_name(n) not in comp.CAST_OPS | comp.VIEW_OPS
            and any(isinstance(a, torch.fx.Node) and comp.node_dtype(a) in LOW for a in n.args)}


def only_matmuls(gm):
    return {op for op in reference(gm) if "mm" in op}


def everything(gm):
    return {comp.op_name(n) for n in _calls(gm) if comp.op_name(n) not in comp.CAST_OPS | comp.VIEW_OPS}


def as_list(gm):
    return [comp.op_name(n) for n in _calls(gm) if comp.op_name(n) not in comp.CAST_OPS | comp.VIEW_OPS
            and comp.node_dtype(n) in LOW]


def qualified(gm):
    return {str(n.target) for n in _calls(gm) if comp.op_name(n) in reference(gm)}


def nodes_not_names(gm):
    return {n for n in _calls(gm) if comp.op_name(n) in reference(gm)}


def bf16_only(gm):
    return {comp.op_name(n) for n in _calls(gm) if comp.op_name(n) not in comp.CAST_OPS | comp.VIEW_OPS
            and comp.node_dtype(n) is torch.bfloat16}


def with_inputs(gm):                       # placeholders too: a bf16 graph input is not an op
    return {comp.op_name(n) or n.name for n in gm.graph.nodes if n.op in ("call_function", "placeholder")
            and (comp.op_name(n) or n.name) not in comp.CAST_OPS | comp.VIEW_OPS and comp.node_dtype(n) in LOW}


def test_reference_passes(capsys):
    l13.check_low_precision_ops(reference)
    l13.check_low_precision_ops(comp.low_precision_ops)
    assert "PASS low_precision_ops" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (with_casts, "a cast (convert_element_type) only converts"),
    (with_views, "views (permute"),
    (by_input_dtype, "the dtype a node *produces*"),
    (only_matmuls, "not only matmuls"),
    (everything, "most of the graph computes in fp32"),
    (as_list, "return a set"),
    (qualified, "bare op names"),
    (nodes_not_names, "not nodes"),
    (bf16_only, "fp16 too"),
    (with_inputs, "count only call_function nodes"),
], ids=lambda v: getattr(v, "__name__", "hint"))
def test_wrong_readings_fail_with_their_hint(wrong, hint):
    with pytest.raises(CheckFailed) as e:
        l13.check_low_precision_ops(wrong)
    msg = str(e.value)
    assert "FAIL low_precision_ops" in msg and "input:" in msg and "expected:" in msg
    assert hint in msg


def test_unsolved_part_a_says_so():
    def todo(gm):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not done yet"):
        l13.check_low_precision_ops(todo)
    with pytest.raises(CheckFailed, match="a function"):
        l13.check_low_precision_ops({"addmm"})


def read_names(names, *, extern="library call", cast_only=None, fused=None, compute=None):
    """A learner's reading of kernel names; the keyword arguments are the slips."""
    out = []
    for n in names:
        if not n.startswith("cpp_fused_"):
            out.append(extern)
            continue
        ops = n[len("cpp_fused_"):].rstrip("0123456789").rstrip("_")
        cast, rest = "_to_copy" in ops, ops.replace("_to_copy", "").strip("_")
        kind = "cast + compute" if cast and rest else "cast only" if cast else "compute only"
        out.append({"cast only": cast_only, "cast + compute": fused, "compute only": compute}[kind] or kind)
    return out


@pytest.mark.slow
def test_kernel_kinds_reference_and_wrong_readings(capsys):
    right = [comp.kernel_kind(k) for k in l13.exercise_kernels() + l13._block_kernels()]
    assert set(right) == set(comp.KINDS), "the two models between them have every kind of kernel"
    l13.check_kernel_kinds(read_names)
    assert "PASS kernel_kinds" in capsys.readouterr().out
    cases = [
        (lambda ns: read_names(ns, extern="cast + compute"), "library calls"),
        (lambda ns: read_names(ns, cast_only="cast + compute"), "fuses several casts"),
        (lambda ns: read_names(ns, fused="cast only"), "*and* a computing op"),
        (lambda ns: read_names(ns, compute="cast + compute"), "no _to_copy in its name"),
        (lambda ns: read_names(ns, fused="library call"), "generated by Inductor"),
        (lambda ns: read_names(ns, fused="fused"), "each entry is one of"),
        (lambda ns: sorted(set(read_names(ns))), "one per call"),                 # kinds, deduplicated
        (lambda ns: dict(zip(ns, read_names(ns))), "return a list"),
    ]
    for wrong, hint in cases:
        with pytest.raises(CheckFailed) as e:
            l13.check_kernel_kinds(wrong)
        assert "FAIL kernel_kinds" in str(e.value) and hint in str(e.value), (hint, str(e.value))


@pytest.mark.slow
def test_unsolved_part_b_says_so():
    def todo(names):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not done yet"):
        l13.check_kernel_kinds(todo)
    with pytest.raises(CheckFailed, match="a function"):
        l13.check_kernel_kinds(["library call"])
