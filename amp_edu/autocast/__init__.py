"""Autocast from scratch (lesson 05): PyTorch's op-by-op cast policy as a ``TorchFunctionMode``.

=================  ===============================================================
``policy``         the op tables (CUDA and CPU) and the cast decision per category
``cache``          the weight-cast cache and its lifetime
``mode``           ``autocast`` itself: the TorchFunctionMode (its readable path is
                   ``_AutocastMode.general``), the autocast state it shares with torch (so
                   torch's queries see a region), nesting, thread-local state
``_fastpath``      private: the mode's hot path, the casts of the commonest call in one loop
                   (the same decisions, proven by ``tests/test_autocast_fastpath.py``)
``custom``         ``custom_fwd`` / ``custom_bwd`` for custom autograd Functions
``trace``          ``trace_dtypes``: the dtype of every op's inputs and outputs, measured
=================  ===============================================================

>>> import torch, amp_edu.autocast as ac
>>> with ac.autocast("cpu"):
...     y = torch.mm(torch.randn(2, 2), torch.randn(2, 2))
>>> y.dtype
torch.bfloat16
"""

from .cache import WeightCache
from .custom import custom_bwd, custom_fwd
from .mode import (autocast, clear_autocast_cache, get_autocast_dtype, get_autocast_policy,
                   is_autocast_available, is_autocast_cache_enabled, is_autocast_enabled, weight_cache)
from .policy import POLICIES, decide, is_eligible, kind_of, op_name
from .trace import Trace, compare, trace_dtypes

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "get_autocast_policy",
           "is_autocast_cache_enabled", "is_autocast_available", "clear_autocast_cache", "weight_cache",
           "custom_fwd", "custom_bwd", "trace_dtypes", "compare", "Trace",
           "WeightCache", "POLICIES", "decide", "is_eligible", "kind_of", "op_name"]
