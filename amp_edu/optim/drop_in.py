"""torchao.optim's class names over :class:`~amp_edu.optim.adamw.AdamW`, with torchao's signatures
and defaults, so code written for torchao runs on the course's optimizer unchanged::

    from amp_edu.optim import AdamW8bit        # instead of: from torchao.optim import AdamW8bit
    opt = AdamW8bit(model.parameters(), lr=1e-3, bf16_stochastic_round=True)

==============  =========  ==============  ============  =============================
class           decay      states          block size    ``weight_decay`` default
==============  =========  ==============  ============  =============================
``Adam8bit``    L2         ``"8bit"``      256           0
``AdamW8bit``   decoupled  ``"8bit"``      256           1e-2
``Adam4bit``    L2         ``"4bit"``      128           0
``AdamW4bit``   decoupled  ``"4bit"``      128           1e-2
``AdamFp8``     L2         ``"fp8"``       256           0
``AdamWFp8``    decoupled  ``"fp8"``       256           1e-2
``_AdamW``      decoupled  the weight's    (none)        1e-2
==============  =========  ==============  ============  =============================

(torchao 0.18.0, ``torchao/optim/adam.py`` lines 213-496.) ``bf16_stochastic_round=True`` is
``rounding="stochastic"``: it applies to bf16 weights only, as in torchao (line 155).
"""

from __future__ import annotations

from ..validate import check_bool
from .adamw import AdamW

__all__ = ["Adam8bit", "AdamW8bit", "Adam4bit", "AdamW4bit", "AdamFp8", "AdamWFp8", "_AdamW", "TORCHAO_CLASSES"]


def _make(name: str, states: str, decoupled: bool, block_size: int | None):
    wd = 1e-2 if decoupled else 0.0

    if block_size is None:                       # _AdamW: no quantized states, no block_size argument
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd, amsgrad=False, *,
                     bf16_stochastic_round=False):
            rounding = "stochastic" if check_bool(bf16_stochastic_round, "bf16_stochastic_round") else "nearest"
            AdamW.__init__(self, params, lr, betas, eps, weight_decay, amsgrad, decoupled=decoupled,
                           states=states, rounding=rounding)
    else:
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd, amsgrad=False, *,
                     block_size=block_size, bf16_stochastic_round=False):
            rounding = "stochastic" if check_bool(bf16_stochastic_round, "bf16_stochastic_round") else "nearest"
            AdamW.__init__(self, params, lr, betas, eps, weight_decay, amsgrad, decoupled=decoupled,
                           states=states, rounding=rounding, block_size=block_size)

    doc = (f"torchao.optim.{name}'s signature over :class:`AdamW` ({'AdamW' if decoupled else 'Adam'}, "
           f"states={states!r}, weight_decay={wd:g} by default).")
    return type(name, (AdamW,), {"__init__": __init__, "__doc__": doc, "__module__": __name__,
                                 "__qualname__": name})


Adam8bit = _make("Adam8bit", "8bit", False, 256)
AdamW8bit = _make("AdamW8bit", "8bit", True, 256)
Adam4bit = _make("Adam4bit", "4bit", False, 128)
AdamW4bit = _make("AdamW4bit", "4bit", True, 128)
AdamFp8 = _make("AdamFp8", "fp8", False, 256)
AdamWFp8 = _make("AdamWFp8", "fp8", True, 256)
_AdamW = _make("_AdamW", "param", True, None)

TORCHAO_CLASSES = {c.__name__: c for c in (Adam8bit, AdamW8bit, Adam4bit, AdamW4bit, AdamFp8, AdamWFp8, _AdamW)}
