"""Reading what ``torch.compile`` does to mixed precision (lesson 13), on any device.

==============  ================================================================================
``capture``     the graphs dynamo and AOTAutograd produce, with a recording backend; casts,
                dtypes and the ops that compute in bf16/fp16, read from each node's fake tensor
``inductor``    Inductor's output code: the kernels it calls, the ATen ops fused into each
                (read from the kernel names), what kind each is; the bytes Inductor counts
``eager``       the eager side: one kernel per ATen op (casts included) and the bytes they move
``numerics``    bit-level comparison of two results: ulps apart, how many, where
``cost``        compile time against the per-step saving: steps to break even, noise-aware
``guards``      why dynamo recompiled: the failed guards it logs, collected instead of printed
==============  ================================================================================

>>> import torch
>>> from amp_edu import compile as ac
>>> def f(x, w):
...     with torch.autocast("cpu", dtype=torch.bfloat16):
...         return torch.relu(x @ w)
>>> cap = ac.capture(f, torch.randn(4, 4), torch.randn(4, 4))
>>> sorted(ac.low_precision_ops(cap.forward[0]))
['mm', 'relu']
"""

from .capture import (CAST_OPS, LOW_DTYPES, VIEW_OPS, Captured, capture, casts, dtype_rows, low_precision_ops,
                      node_dtype, op_name)
from .cost import BreakEven, break_even
from .eager import EagerCount, count_eager
from .guards import recompile_reasons
from .inductor import KERNEL_KINDS, Kernel, kernel_calls, kernel_kind, kernels, run_and_count, run_and_get_code
from .numerics import UlpReport, compare_bits, ulp_distance

__all__ = ["Captured", "capture", "casts", "dtype_rows", "low_precision_ops", "node_dtype", "op_name",
           "CAST_OPS", "VIEW_OPS", "LOW_DTYPES", "BreakEven", "break_even", "EagerCount", "count_eager",
           "Kernel", "KERNEL_KINDS", "kernels", "kernel_kind", "kernel_calls", "run_and_count", "run_and_get_code",
           "UlpReport", "compare_bits", "ulp_distance", "recompile_reasons"]
