"""amp_edu's autocast inside ``torch.compile``: the region opens and closes eagerly (not traced),
so results equal the eager region's and nothing is left behind on torch's function-mode stack
or in the region's state, however often the compiled function runs. Slow tier: importing dynamo
and compiling take seconds."""

import torch

from amp_edu.autocast import autocast
from amp_edu.autocast import state as _state



def _leftovers():
    return torch._C._len_torch_function_stack(), _state._STATE.mode, _state._STATE.depth, torch.is_autocast_enabled("cpu")


def test_a_compiled_region_equals_the_eager_one_and_leaves_nothing_behind():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)

    def f(x):
        with autocast("cpu"):
            return lin(x).relu()

    x = torch.randn(4, 8)
    eager = f(x)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="eager")
    for _ in range(3):                      # first call traces, later ones reuse the graphs
        y = compiled(x)
        assert y.dtype == torch.bfloat16 and torch.equal(y, eager)
        assert _leftovers() == (0, None, 0, False)
    with autocast("cpu"):                   # an eager region after the compiled ones still works
        assert lin(x).dtype == torch.bfloat16
    assert _leftovers() == (0, None, 0, False)
    explained = torch._dynamo.explain(f)(x)
    assert explained.graph_break_count >= 2, "entry and exit run eagerly: graph breaks at both"
