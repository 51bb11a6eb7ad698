"""Autocast from scratch (lesson 05): PyTorch's op-by-op cast policy as a ``TorchFunctionMode``.

=================  ===============================================================
``region``         ``autocast`` itself: what entering and leaving a region does (torch's
                   state written and restored, the mode pushed once per thread)
``state``          the autocast state of a thread: torch's flags, which regions write and
                   the queries read back, and what torch has no slot for (policy, cache)
``mode``           the TorchFunctionMode: what happens to each torch call in a region (its
                   readable path is ``_AutocastMode.general``)
``routes``         what the mode does with each callable: open it, cast it, leave it
``policy``         the op tables (CUDA and CPU) and the cast decision per category
``cache``          the weight-cast cache and its lifetime
``_fastpath``      private: the mode's hot path, the casts of the commonest call in one loop
                   (the same decisions, proven by ``tests/autocast/test_fastpath.py``)
``custom``         ``custom_fwd`` / ``custom_bwd`` for custom autograd Functions
``trace``          ``trace_dtypes``: the dtype of every op's inputs and outputs, measured
``agreement``      how closely it agrees with torch's autocast, op for op (torch's test lists)
``versions``       what later torch releases changed in the tables
=================  ===============================================================

Read top to bottom: ``region``, ``state``, ``mode``, ``routes``, ``policy``, ``cache``.

>>> import torch, amp_edu.autocast as ac
>>> with ac.autocast("cpu"):
...     y = torch.mm(torch.randn(2, 2), torch.randn(2, 2))
>>> y.dtype
torch.bfloat16
"""

from .cache import WeightCache
from .custom import custom_bwd, custom_fwd
from .policy import POLICIES, decide, is_eligible, kind_of, op_name
from .region import autocast
from .state import (clear_autocast_cache, get_autocast_dtype, get_autocast_policy, is_autocast_available,
                    is_autocast_cache_enabled, is_autocast_enabled, weight_cache)
from .trace import Trace, side_by_side, trace_dtypes

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "get_autocast_policy",
           "is_autocast_cache_enabled", "is_autocast_available", "clear_autocast_cache", "weight_cache",
           "custom_fwd", "custom_bwd", "trace_dtypes", "side_by_side", "Trace",
           "WeightCache", "POLICIES", "decide", "is_eligible", "kind_of", "op_name"]
