"""Lesson 13 graders: the reference passes; the wrong readings a learner gives fail, each with its hint.

Part A's graphs are traced (no C++); Part B reads written-out kernel names, and only the test
that compares them with what Inductor compiles is marked slow.
"""

import pytest
import torch

from amp_edu import compile as comp
from amp_edu.checks import l13
from amp_edu.checks.core import CheckFailed
from amp_edu.plans.l13 import graph
from checkhelp import verdict  # noqa: E402  (tests/ is on sys.path)


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


def read_names(names, *, extern="library call", cast_only=None, fused=None, compute=None, triton="generated",
               torch_ops="library call"):
    """A learner's reading of kernel names; the keyword arguments are the slips."""
    out = []
    for n in names:
        if n.startswith("torch.ops."):
            out.append(torch_ops)
            continue
        if n.startswith("triton_") and triton != "generated":
            out.append(triton)
            continue
        if "_fused_" not in n:
            out.append(extern)
            continue
        ops = n.split("_fused_", 1)[1].rstrip("0123456789").rstrip("_")
        cast, rest = "_to_copy" in ops, ops.replace("_to_copy", "").strip("_")
        kind = "cast + compute" if cast and rest else "cast only" if cast else "compute only"
        out.append({"cast only": cast_only, "cast + compute": fused, "compute only": compute}[kind] or kind)
    return out


def cpp_only(names):
    """The reading of C++ names only (the exercise's first solution): Triton kernels read as library calls."""
    return read_names(names, triton="library call")


def test_kernel_kinds_reference_and_wrong_readings(capsys):
    l13.check_kernel_kinds(read_names)
    assert "PASS kernel_kinds" in capsys.readouterr().out
    cases = [
        (lambda ns: read_names(ns, extern="cast + compute"), "extern_kernels.* are library calls"),
        (lambda ns: read_names(ns, cast_only="cast + compute"), "fuses several casts"),
        (lambda ns: read_names(ns, fused="cast only"), "*and* a computing op"),
        (lambda ns: read_names(ns, compute="cast + compute"), "no _to_copy in its name"),
        (lambda ns: read_names(ns, fused="library call"), "a cpp_fused_* kernel is generated by Inductor"),
        (cpp_only, "triton_poi/red/per_fused_* kernel is generated by Inductor too"),
        (lambda ns: read_names(ns, torch_ops="compute only"), "torch.ops.* calls are library calls too"),
        (lambda ns: read_names(ns, fused="fused"), "each entry is one of"),
        (lambda ns: sorted(set(read_names(ns))), "one per call"),                 # kinds, deduplicated
        (lambda ns: dict(zip(ns, read_names(ns))), "return a list"),
    ]
    for wrong, hint in cases:
        with pytest.raises(CheckFailed) as e:
            l13.check_kernel_kinds(wrong)
        assert "FAIL kernel_kinds" in str(e.value) and hint in str(e.value), (hint, str(e.value))


def test_unsolved_part_b_says_so():
    def todo(names):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not done yet"):
        l13.check_kernel_kinds(todo)
    with pytest.raises(CheckFailed, match="a function"):
        l13.check_kernel_kinds(["library call"])


def test_the_written_out_kernel_names_are_inductors():
    """The check reads written-out names; Inductor, compiling the two models here, calls exactly those."""
    ex, block = l13.exercise_kernels(), l13.block_kernels()
    assert [k.name for k in ex] == l13._EXERCISE_CPP
    assert [k.name for k in block] == l13._BLOCK_CPP
    assert set(comp.kernel_kind(k) for k in ex + block) == set(comp.KERNEL_KINDS), "between them, every kind of kernel"
    written = l13._kernels(l13._EXERCISE_CPP + l13._BLOCK_CPP, l13._MODEL_OPS)
    assert [comp.kernel_kind(k) for k in written] == [comp.kernel_kind(k) for k in ex + block]


# --- the three-part check: by value, drawn from a seed -----------------------------------------------------


def test_the_graphs_hold_every_view_op_in_low_precision():
    held = set()
    for case in l13.check_low_precision_ops.cases(0):
        gm = graph(case["graph"], case.get("seed"))
        held |= {comp.op_name(n) for n in _calls(gm) if comp.node_dtype(n) in LOW}
    assert comp.VIEW_OPS <= held, comp.VIEW_OPS - held


def test_the_names_hold_every_kind_of_kernel_call():
    names = [n for case in l13.check_kernel_kinds.cases(0) for n in case["names"]]
    for prefix in ("extern_kernels.", "torch.ops.", "cpp_fused_", "triton_poi_fused_", "triton_red_fused_",
                   "triton_per_fused_"):
        assert any(n.startswith(prefix) for n in names), prefix
    for case in l13.check_kernel_kinds.cases(3):
        kinds = {comp.kernel_kind(k) for k in l13._kernels(case["names"], case["vocab"])}
        assert "drawn" not in case["label"] or kinds == set(comp.KERNEL_KINDS)


def test_cases_are_drawn_from_the_seed_and_the_reference_passes_for_any():
    a, b = l13.check_low_precision_ops.cases(1), l13.check_low_precision_ops.cases(2)
    assert a[:-1] == b[:-1] and a[-1] != b[-1] and a[-1]["graph"] == "drawn"
    for seed in (0, 1, 2):
        assert verdict(l13.check_low_precision_ops, seed, reference) == "PASS low_precision_ops: 8 graphs"
    k1, k2 = l13.check_kernel_kinds.cases(1), l13.check_kernel_kinds.cases(2)
    assert k1[-2:] != k2[-2:]
    for seed in (0, 1, 2, 99):
        assert verdict(l13.check_kernel_kinds, seed, read_names).startswith("PASS kernel_kinds: 44 kernels")


class LyingSet(set):
    def __eq__(self, other):
        return True

    __hash__ = None


class LyingStr(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def test_lying_answers_fail():
    with pytest.raises(CheckFailed, match="FAIL low_precision_ops"):
        l13.check_low_precision_ops(lambda gm: LyingSet())
    with pytest.raises(CheckFailed, match="not nodes"):
        l13.check_low_precision_ops(lambda gm: {LyingStr(op) for op in reference(gm)})
    with pytest.raises(CheckFailed, match="each entry is one of"):
        l13.check_kernel_kinds(lambda names: [LyingStr("library call") for _ in names])
    with pytest.raises(CheckFailed, match="return a list"):
        l13.check_kernel_kinds(lambda names: type("L", (list,), {"__eq__": lambda s, o: True})(read_names(names)))


def test_an_answer_for_another_graph_fails():
    first = []

    def remembers(gm):                               # the exercise graph's answer, for every graph
        first.append(first[0] if first else reference(gm))
        return first[-1]
    with pytest.raises(CheckFailed, match="FAIL low_precision_ops"):
        l13.check_low_precision_ops(remembers)
    with pytest.raises(CheckFailed, match="FAIL low_precision_ops"):
        verdict(l13.check_low_precision_ops, 5, lambda gm: {"addmm", "relu"})


def test_a_frozenset_is_a_set():
    l13.check_low_precision_ops(lambda gm: frozenset(reference(gm)))
