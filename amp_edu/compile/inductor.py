"""What Inductor made of a graph: its output code, the kernels in it, and the bytes they move.

``torch._inductor.utils.run_and_get_code(fn, *args)`` runs ``fn`` (a compiled function) and
returns the Python "output code" Inductor generated for each graph (the same text
``TORCH_LOGS=output_code`` prints). On a CPU the code defines C++ kernels through
``async_compile.cpp_pybinding`` and calls them, plus *extern* kernels (library calls Inductor does
not generate: ``extern_kernels.addmm``, ``extern_kernels.mm``, oneDNN ops) from one ``call``
function.

A generated kernel's name lists the ATen ops fused into it: with
``torch._inductor.config.cpp.descriptive_names = "original_aten"`` (the default, config.py line
1718) the name is ``cpp_fused_`` + the sorted top-level ATen ops of its nodes joined by ``_`` +
a counter (``get_fused_kernel_name``, torch/_inductor/utils.py lines 898-922). So
``cpp_fused__to_copy_gelu_1`` holds an autocast cast (``_to_copy``) and a ``gelu``.
On a GPU the kernels are Triton, named the same way after ``triton_`` and the first three letters
of the kernel's category (``poi``ntwise, ``red``uction, ``per``sistent_reduction, ...:
torch/_inductor/codegen/triton.py lines 7276-7278; ``config.triton.descriptive_names``, config.py
line 1978) and called with ``.run(...)`` (codegen/wrapper.py line 3683); :func:`kernels` reads both. It splits such names back into ops, given the ops
the graph contains. (The Triton form is tested on written-out output code: no GPU ran this.)

Bytes moved: Inductor estimates each kernel's reads and writes when the ``inductor_metrics``
log is on (``graph.count_bytes()``, torch/_inductor/compile_fx.py lines 1650-1653, added to
``torch._inductor.metrics.num_bytes_accessed``). :func:`run_and_count` switches that log on
quietly while a compiled function's first call compiles it, and returns the output code of that
same compile, so one compile gives both (the FX graph cache, which would skip the count, is bypassed
for it; the C++ it builds still comes from Inductor's code cache).
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from .capture import CAST_OPS

__all__ = ["Kernel", "run_and_get_code", "kernels", "kernel_kind", "kernel_calls", "run_and_count", "KERNEL_KINDS"]

#: what a kernel does, as :func:`kernel_kind` names it
KERNEL_KINDS = ("cast + compute", "cast only", "compute only", "library call")
_CALL = re.compile(r"^\s+(?:\w+ = )?(cpp_fused_\w+|triton_[a-z]+_fused_\w+(?=\.run\()|extern_kernels\.\w+"
                   r"|torch\.ops\.\w+\.\w+(?:\.\w+)?)(?:\.run)?\(", re.M)
_GENERATED = re.compile(r"^(?:cpp|triton_[a-z]+)_fused_(.*)$")   # C++ (CPU) or Triton (GPU: poi, red, per, tem)


@dataclass(frozen=True)
class Kernel:
    """One kernel call of Inductor's output code: ``name`` as in the code, ``ops`` the ATen ops
    fused into it (for a library call, the op it runs), ``generated`` False for library calls."""

    name: str
    ops: tuple[str, ...]
    generated: bool


def run_and_get_code(fn: Callable, *args, **kwargs) -> tuple[object, list[str]]:
    """``torch._inductor.utils.run_and_get_code``: run ``fn`` and return (result, output codes).

    It resets dynamo's caches first (torch/_inductor/utils.py line 2880 in torch 2.13), so ``fn``
    compiles on this call, and every function compiled before it compiles again on its next call."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    from torch._inductor.utils import run_and_get_code as _run
    return _run(fn, *args, **kwargs)


def kernel_calls(code: str) -> list[str]:
    """The kernels ``call()`` runs, in order, as named in the output code (one entry per call)."""
    if not isinstance(code, str):
        raise TypeError(f"code must be Inductor's output code (a str), got {type(code).__name__}")
    body = code.split("def call(", 1)[-1]
    return [m.group(1) for m in _CALL.finditer(body)]


def _split(ops_part: str, vocab: list[str]) -> tuple[str, ...] | None:
    """Split ``a_b_c`` (sorted op names joined by ``_``) into names from ``vocab``."""
    best: dict[int, tuple[str, ...] | None] = {0: ()}
    for i in range(len(ops_part) + 1):
        if best.get(i) is None:
            continue
        for op in vocab:
            j = i + len(op)
            if ops_part.startswith(op, i) and (j == len(ops_part) or ops_part[j] == "_"):
                nxt = j + 1 if j < len(ops_part) else j
                if nxt not in best or best[nxt] is None:
                    best[nxt] = best[i] + (op,)
    return best.get(len(ops_part))


def kernels(code: str, vocabulary: Iterable[str] = ()) -> list[Kernel]:
    """The kernels of one output code, in call order, each with the ATen ops in its name.

    ``vocabulary``: ATen op names that may appear (e.g. the top-level ops of the model: ``gelu``,
    ``native_layer_norm``, ``_softmax``, ``_to_copy``, ``addmm``); a generated kernel's name is
    split into them. Names it cannot split keep the whole name as one op.
    """
    vocab = sorted(set(vocabulary) | {"_to_copy"}, key=len, reverse=True)
    out = []
    for call in kernel_calls(code):
        if (generated := _GENERATED.match(call)) is not None:
            part = re.sub(r"_\d+$", "", generated.group(1))
            ops = _split(part, vocab) or (part,)
            out.append(Kernel(call, tuple(ops), True))
        else:
            parts = call.split(".")            # extern_kernels.<op> or torch.ops.<namespace>.<op>[.<overload>]
            out.append(Kernel(call, (parts[1] if parts[0] == "extern_kernels" else parts[3],), False))
    return out


def kernel_kind(kernel: Kernel) -> str:
    """One of :data:`KERNEL_KINDS`: a generated kernel that casts and computes, only casts, only
    computes; or a library call (Inductor cannot fuse a cast into it)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be an amp_edu.compile.Kernel, got {type(kernel).__name__}")
    if not kernel.generated:
        return "library call"
    has_cast = any(op in CAST_OPS for op in kernel.ops)
    has_compute = any(op not in CAST_OPS for op in kernel.ops)
    return "cast + compute" if has_cast and has_compute else ("cast only" if has_cast else "compute only")


def run_and_count(fn: Callable, *args) -> tuple[object, list[str], int]:
    """Call ``fn`` (a function from ``torch.compile``) and return ``(result, output codes, bytes)``:
    the output code of each graph this call compiled and the bytes their kernels read and write, as
    Inductor's own metrics count them. Like :func:`run_and_get_code` it resets dynamo's caches first,
    so ``fn`` compiles on this call; afterwards it stays compiled for later calls."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    from torch._inductor import config, metrics
    log = logging.getLogger("torch._inductor.compile_fx.__inductor_metrics")
    old = log.level, log.propagate, log.disabled
    log.setLevel(logging.INFO)
    log.propagate, log.disabled = False, False
    handler = logging.NullHandler()
    log.addHandler(handler)
    metrics.reset()
    try:
        with config.patch(fx_graph_cache=False), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result, codes = run_and_get_code(fn, *args)
        nbytes = int(metrics.num_bytes_accessed)
    finally:
        log.removeHandler(handler)
        log.setLevel(old[0])
        log.propagate, log.disabled = old[1], old[2]
    return result, codes, nbytes
