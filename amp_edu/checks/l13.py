"""Graders for lesson 13 (torch.compile and mixed precision): read a compiled graph.

Part A, ``low_precision_ops(gm)``: the learner's function reads an ATen graph (as AOTAutograd hands
it to Inductor) and returns the ops that compute a bf16/fp16 result. It is run on the exercise
model's graph, one with a bf16 + fp32 residual, one with bf16 elementwise ops after a matmul, one
under fp16 autocast with a bf16 input, one with every view Inductor's graph keeps, two traced
before Inductor's decompositions (where ``t``, ``transpose``, ``detach``, ``_unsafe_view`` and
``reshape`` are still nodes: between them the graphs hold every op of
:data:`amp_edu.compile.VIEW_OPS` with a bf16 result), and one drawn from the check's seed; and
compared with :func:`amp_edu.compile.low_precision_ops`. A graph cannot travel, so a case names
it and :func:`amp_edu.plans.l13.graph` builds it: in the learner's kernel for their function, in
the judge's own process for the reference.

Part B, ``kernel_kinds(names)``: the learner's function reads the kernel names of Inductor's output
code (one kind per kernel call, in call order, from :data:`amp_edu.compile.KERNEL_KINDS`). The names are
the exercise model's and the lesson block's kernels as Inductor names them on a CPU (C++) and on a
GPU (Triton), an in-place update's cast, ``torch.ops.*`` library calls, and two output codes drawn
from the check's seed; the reference writes them out as output code and classifies its kernels
with :func:`amp_edu.compile.kernels` and :func:`amp_edu.compile.kernel_kind`. (The course's tests
compile both models with Inductor and compare their kernels with the names written here.)

Each wrong answer a learner is likely to give has its own hint.
"""

from __future__ import annotations

import functools
import random

import torch

from .. import compile as comp
from ..plans.l13 import (GRAPHS, block_kernels, drawn_program, exercise_graph, exercise_kernels, exercise_model,
                         exercise_step, graph, kernel_kinds_plan, low_precision_ops_plan)
from .core import Check, fail, returned
from .rules import Rule

__all__ = ["exercise_model", "exercise_step", "exercise_graph", "exercise_kernels", "block_kernels",
           "check_low_precision_ops", "check_kernel_kinds"]

_block_kernels = block_kernels          # its old name (tools/mutation_equivalents.py reads it)
_UNREADABLE = "the grader could not read what your function did (was the check cell changed?)"


# --- part A: low_precision_ops ----------------------------------------------------------------------
def _nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def _slips(gm) -> dict[str, frozenset]:
    """What the plausible wrong readings of ``gm`` return, each with its hint."""
    low = comp.LOW_DTYPES
    names = lambda pred: frozenset(comp.op_name(n) for n in _nodes(gm) if pred(n))  # noqa: E731
    in_low = lambda n: any(isinstance(a, torch.fx.Node) and comp.node_dtype(a) in low for a in n.args)  # noqa: E731
    right = comp.low_precision_ops(gm)
    return {
        "a cast (convert_element_type) only converts; it computes nothing. Leave the casts out":
            names(lambda n: comp.node_dtype(n) in low and comp.op_name(n) not in comp.VIEW_OPS),
        "views (permute, t, view, alias, getitem) only re-describe memory; they compute nothing. Leave them out":
            names(lambda n: comp.node_dtype(n) in low and comp.op_name(n) not in comp.CAST_OPS),
        "read the dtype a node *produces* (node.meta['val'].dtype), not its inputs': bf16 + fp32 promotes to fp32, "
        "and an upcast's input is bf16 but its math is not":
            names(lambda n: in_low(n) and comp.op_name(n) not in comp.CAST_OPS | comp.VIEW_OPS),
        "not only matmuls: an op that consumes a bf16 tensor and is not decomposed with an upcast (relu, add, "
        "mul) computes a bf16 result too":
            frozenset(op for op in right if "mm" in op),
        "most of the graph computes in fp32: the decomposed LayerNorm/GELU/softmax upcast first. Keep only the "
        "nodes whose output dtype is bfloat16 or float16":
            names(lambda n: comp.op_name(n) not in comp.CAST_OPS | comp.VIEW_OPS),
    }


@functools.lru_cache(maxsize=32)
def _reference(name: str, seed: int | None = None) -> tuple[frozenset, tuple, frozenset]:
    """For the graph a case names: the expected op names, the wrong readings with their hints, and
    the graph's input (placeholder) names — plain values, read once per process."""
    gm = graph(name, seed)
    return (frozenset(comp.low_precision_ops(gm)), tuple(_slips(gm).items()),
            frozenset(n.name for n in gm.graph.nodes if n.op == "placeholder"))


def _low_cases(seed: int) -> list[dict]:
    """The named graphs, then one drawn from ``seed`` (:func:`amp_edu.plans.l13.drawn_program`)."""
    dtype, steps = drawn_program(seed)
    cases = [{"label": label, "graph": name} for name, (_, label) in GRAPHS.items()]
    cases.append({"label": f"a graph drawn from the check's seed: {' → '.join(steps)} under {dtype} autocast",
                  "graph": "drawn", "seed": seed})
    # read the references now: in a learner's notebook the kernel shares this process (and the built
    # graphs), and the plan hands them to the learner's function after this
    for case in cases:
        _reference(case["graph"], case.get("seed"))
    return cases


def _answer_hint(ref, got) -> str:
    right, slips, placeholders = ref
    is_set = type(got) is set or type(got) is frozenset
    if type(got) is list or type(got) is tuple:
        return "return a set of op names (duplicates do not count twice): set(...)"
    if is_set and any(type(g) is str and ("." in g or "aten" in g) for g in got):
        return "return bare op names ('addmm', 'relu'), as amp_edu.compile.op_name(node) gives them, not 'aten.addmm.default'"
    for hint, value in slips:
        if is_set and got == value and value != right:
            return hint
    if is_set and any(g in placeholders for g in got):
        return ("count only call_function nodes: a graph input (a placeholder) that arrives in bf16 is data, "
                "not an op that computes")
    return ("a node counts when it is a call_function, is not a cast or a view, and its output "
            "(node.meta['val']) is bfloat16 or float16 (fp16 too: autocast's dtype may be either)")


def _judge_low_precision_ops(cases: list[dict], result) -> str:
    name = "low_precision_ops"
    if type(result) is not list or len(result) != len(cases) or not all(
            type(r) is dict and r.keys() == {"outcome", "set"} for r in result):
        raise fail(name, expected=f"{len(cases)} answers", got=result, hint=_UNREADABLE)
    for case, out in zip(cases, result):
        ref = _reference(case["graph"], case.get("seed"))
        expected = sorted(ref[0])
        got = returned(name, out["outcome"], input=case["label"], expected=expected)
        if out["set"] in ("set", "frozenset") and type(got) is list:     # a set, as the list of its items
            if not all(type(g) is str for g in got):
                raise fail(name, input=case["label"], expected=expected, got=got,
                           hint="return op *names* (strings), not nodes: amp_edu.compile.op_name(node)")
            got = set(got)
            if got == ref[0]:
                continue
            shown = sorted(got)
        elif out["set"] is not None:
            raise fail(name, input=case["label"], expected=expected, got=out, hint=_UNREADABLE)
        else:
            shown = got
        raise fail(name, input=case["label"], expected=expected, got=shown, hint=_answer_hint(ref, got))
    return f"{len(cases)} graphs"


check_low_precision_ops = Check("low_precision_ops", cases=_low_cases, plan=low_precision_ops_plan,
                                judge=_judge_low_precision_ops, echo=True,
                                rules=(Rule("amp_edu.compile", ("low_precision_ops",),
                                            "comp.low_precision_ops is what the check compares with"),))
"""``fn(gm)`` must return the set of ATen op names in ``gm`` that compute a bf16/fp16 result."""


# --- part B: kernel_kinds ---------------------------------------------------------------------------
# the kernels Inductor's output code calls for the exercise model and the lesson's block on a CPU
# (tests/checks/test_l13.py compiles both and compares), and as Triton names them on a GPU
_EXERCISE_CPP = ["cpp_fused__to_copy_native_layer_norm_0", "extern_kernels.addmm", "cpp_fused__to_copy_relu_1",
                 "extern_kernels.addmm"]
_BLOCK_CPP = ["cpp_fused__to_copy_0", "extern_kernels.addmm", "cpp_fused__to_copy_gelu_1", "extern_kernels.addmm",
              "cpp_fused__softmax_native_layer_norm_2"]
_EXERCISE_TRITON = ["triton_poi_fused__to_copy_0", "triton_per_fused__to_copy_native_layer_norm_1",
                    "extern_kernels.addmm", "triton_poi_fused__to_copy_relu_2", "extern_kernels.addmm"]
_BLOCK_TRITON = ["triton_poi_fused__to_copy_0", "extern_kernels.addmm", "triton_poi_fused__to_copy_gelu_1",
                 "extern_kernels.addmm", "triton_red_fused__softmax_native_layer_norm_2"]
_TORCH_OPS = ["cpp_fused__to_copy_0", "torch.ops.mkldnn._linear_pointwise.default",
              "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default", "cpp_fused__to_copy_add_1"]
_MODEL_OPS = ["_to_copy", "native_layer_norm", "relu", "gelu", "_softmax", "addmm", "add", "copy"]

# what the drawn output codes are made of: ATen ops a kernel name may list, and library calls
_DRAWN_OPS = ("add", "mul", "sub", "div", "relu", "gelu", "silu", "tanh", "sigmoid", "exp", "rsqrt", "pow",
              "neg", "abs", "where", "clone", "copy", "cat", "sum", "mean", "amax", "native_layer_norm",
              "native_dropout", "_softmax", "_log_softmax", "embedding")
_LIBRARY = {"cpp": ("extern_kernels.addmm", "extern_kernels.mm", "extern_kernels.bmm", "extern_kernels.baddbmm",
                    "extern_kernels.convolution", "torch.ops.mkldnn._linear_pointwise.default",
                    "torch.ops.mkldnn._convolution_pointwise.default",
                    "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default"),
            "triton": ("extern_kernels.addmm", "extern_kernels.mm", "extern_kernels.bmm",
                       "torch.ops.aten._scaled_dot_product_efficient_attention.default",
                       "torch.ops.aten._scaled_dot_product_flash_attention.default",
                       "torch.ops._c10d_functional.all_reduce_.default")}


def _drawn_code(rng: random.Random, backend: str, n: int = 10) -> list[str]:
    """``n`` kernel calls of one output code: every kind at least once, the rest drawn; a generated
    kernel is named as Inductor names it (its sorted ops after ``cpp_fused_`` or
    ``triton_{poi,red,per}_fused_``, then a counter)."""
    kinds = [*comp.KERNEL_KINDS, *(rng.choice(comp.KERNEL_KINDS) for _ in range(n - len(comp.KERNEL_KINDS)))]
    rng.shuffle(kinds)
    names, counter = [], 0
    for kind in kinds:
        if kind == "library call":
            names.append(rng.choice(_LIBRARY[backend]))
            continue
        ops = set() if kind == "cast only" else set(rng.sample(_DRAWN_OPS, rng.choice((1, 1, 2, 3))))
        if kind != "compute only":
            ops.add("_to_copy")
        prefix = "cpp" if backend == "cpp" else "triton_" + rng.choice(("poi", "red", "per"))
        names.append(f"{prefix}_fused_{'_'.join(sorted(ops))}_{counter}")
        counter += 1
    return names


def _kind_cases(seed: int) -> list[dict]:
    """The named name lists, then a C++ and a Triton output code drawn from ``seed``."""
    rng = random.Random(seed)
    drawn_vocab = sorted({*_DRAWN_OPS, "_to_copy"})
    return [
        {"label": "the exercise model's kernels", "names": _EXERCISE_CPP, "vocab": _MODEL_OPS},
        {"label": "the lesson block's kernels", "names": _BLOCK_CPP, "vocab": _MODEL_OPS},
        # a cast fused with the copy_ that writes an updated buffer back (a model that mutates its input):
        # Inductor names a kernel after its ATen ops, and `copy` is computed work beside the cast
        {"label": "a cast fused with an in-place update's copy", "names": ["cpp_fused__to_copy_copy_0"],
         "vocab": _MODEL_OPS},
        {"label": "the exercise model's kernels as Triton names them (on a GPU)", "names": _EXERCISE_TRITON,
         "vocab": _MODEL_OPS},
        {"label": "the lesson block's kernels as Triton names them (on a GPU)", "names": _BLOCK_TRITON,
         "vocab": _MODEL_OPS},
        {"label": "library calls through torch.ops (oneDNN's linear, attention)", "names": _TORCH_OPS,
         "vocab": _MODEL_OPS},
        {"label": "C++ output code drawn from the check's seed", "names": _drawn_code(rng, "cpp"),
         "vocab": drawn_vocab},
        {"label": "Triton output code drawn from the check's seed", "names": _drawn_code(rng, "triton"),
         "vocab": drawn_vocab},
    ]


def _output_code(names: list[str]) -> str:
    """``names`` written out as the ``call()`` of an output code: C++ kernels called directly,
    Triton kernels with ``.run(...)``, library calls with their result assigned."""
    lines = ["def call(args):"]
    for i, name in enumerate(names):
        if name.startswith("triton_"):
            lines.append(f"    {name}.run(buf{i}, buf{i + 1}, 256, stream=stream0)")
        elif name.startswith("cpp_"):
            lines.append(f"    {name}(buf{i}, buf{i + 1})")
        else:
            lines.append(f"    buf{i + 1} = {name}(buf{i})")
    return "\n".join(lines) + "\n"


def _kernels(names: list[str], vocab: list[str]) -> list[comp.Kernel]:
    ks = comp.kernels(_output_code(names), vocab)
    if [k.name for k in ks] != list(names):
        raise RuntimeError(f"amp_edu.compile.kernels read {[k.name for k in ks]} from the calls of {names}")
    return ks


def _kind_hint(kernel: comp.Kernel, expected: str, got) -> str:
    if got not in comp.KERNEL_KINDS:
        return f"each entry is one of {list(comp.KERNEL_KINDS)}"
    if expected == "library call":
        if kernel.name.startswith("torch.ops."):
            return ("torch.ops.* calls are library calls too: an ATen or oneDNN op (attention, a fused linear) that "
                    "Inductor calls but does not generate, so no cast is fused into it")
        return ("extern_kernels.* are library calls (oneDNN/ATen matmuls): Inductor calls them but does not "
                "generate them, so (at Inductor's default settings, max_autotune off) no cast is fused into them")
    if got == "library call":
        if kernel.name.startswith("triton_"):
            return ("a triton_poi/red/per_fused_* kernel is generated by Inductor too (Triton, on a GPU): read its "
                    "ops after 'fused_' as for cpp_fused_*; only extern_kernels.* and torch.ops.* are library calls")
        return "a cpp_fused_* kernel is generated by Inductor; only extern_kernels.* (and torch.ops.*) are library calls"
    if expected == "cast only":
        return ("this kernel's name lists only _to_copy: it fuses several casts (weights, bias, input) with "
                "each other, but no computation")
    if expected == "compute only":
        return ("no _to_copy in its name: the up- and downcasts inside a decomposed op carry that op's name "
                "(native_layer_norm, _softmax); only autocast's own casts appear as _to_copy")
    return ("its name lists _to_copy *and* a computing op: the cast shares the kernel with that computation, "
            "so the tensor is converted on its way in or out and never stored in the other dtype")


def _judge_kernel_kinds(cases: list[dict], result) -> str:
    name = "kernel_kinds"
    if type(result) is not list or len(result) != len(cases):
        raise fail(name, expected=f"{len(cases)} answers", got=result, hint=_UNREADABLE)
    n = 0
    for case, outcome in zip(cases, result):
        names, label = case["names"], case["label"]
        ks = _kernels(names, case["vocab"])
        expected = [comp.kernel_kind(k) for k in ks]
        got = returned(name, outcome, input=names, expected=expected)
        if type(got) is not list and type(got) is not tuple:
            raise fail(name, input=names, expected=expected, got=got,
                       hint="return a list with one kind per kernel name, in the same order")
        if len(got) != len(names):
            raise fail(name, input=names, expected=expected, got=list(got),
                       hint=f"{len(names)} names in, {len(names)} kinds out: one per call, library calls included "
                            "(the same extern kernel called twice is two entries)")
        for i, (k, e, g) in enumerate(zip(ks, expected, got)):
            if type(g) is not str or g != e:
                raise fail(name, input=f"{label}, kernel {i}: {k.name}", expected=e, got=g,
                           hint=_kind_hint(k, e, g))
        n += len(names)
    return (f"{n} kernels: 2 compiled models and an in-place update, on a CPU and as Triton names them, "
            f"torch.ops calls, 2 drawn output codes")


check_kernel_kinds = Check("kernel_kinds", cases=_kind_cases, plan=kernel_kinds_plan, judge=_judge_kernel_kinds,
                           echo=True, rules=(Rule("amp_edu.compile", ("kernel_kind", "kernels"),
                                                  "comp.kernel_kind is what the check compares with"),))
"""``fn(names)``: for a list of kernel names as Inductor's output code calls them, one of
:data:`amp_edu.compile.KERNEL_KINDS` per name, in order (see the module docstring)."""
