"""amp_edu.optim.AdamW against torchao.optim 0.18's compiled optimizers, side by side, step by step.

torchao compiles its per-parameter step with Inductor (seconds per shape on a cold cache), so this
module is in the slow tier; its shapes are few and shared so the compiled graphs are reused."""

import pytest
import torch

from amp_edu.device import num_threads

pytest.importorskip("torchao.optim")

from amp_edu.optim import AdamW, footprint  # noqa: E402
from amp_edu.optim.parity import compare_steps, stochastic_agreement, torchao_optimizer  # noqa: E402

pytestmark = pytest.mark.slow
SHAPES = ((64, 64), (64,))       # one tensor with quantized states (4096 elements), one without


@pytest.fixture(autouse=True)
def _one_thread():
    """Small tensors: one thread is faster, and two busy cores shared by several jobs make torch's
    thread pool spin (10-100x slower tests)."""
    with num_threads(1):
        yield


@pytest.mark.parametrize("states,dtype,shapes", [
    ("8bit", torch.float32, SHAPES),            # a quantized matrix and a small tensor kept in fp32
    ("4bit", torch.float32, SHAPES[:1]),
    ("fp8", torch.float32, SHAPES[:1]),
    ("param", torch.bfloat16, SHAPES[:1]),      # torchao's _AdamW on bf16 weights: bf16 states, nearest
])
def test_every_step_bit_for_bit(states, dtype, shapes):
    """Each case compiles torchao's step once per shape (the CI budget keeps them few)."""
    rows = compare_steps(shapes, states, dtype=dtype, steps=4, lr=1e-2, weight_decay=0.1)
    assert all(r.equal for r in rows), rows
    assert all(r.quantized == (0 if states == "param" else 1) for r in rows)


def test_adam_with_l2_decay_too():
    """torchao's Adam8bit (weight decay added to the gradient) against decoupled=False."""
    import torchao.optim
    ours = [torch.randn(SHAPES[0], generator=torch.Generator().manual_seed(3)).requires_grad_()]
    theirs = [ours[0].detach().clone().requires_grad_()]
    a, b = AdamW(ours, lr=1e-2, weight_decay=0.1, decoupled=False, states="8bit"), \
        torchao.optim.Adam8bit(theirs, lr=1e-2, weight_decay=0.1)
    gen = torch.Generator().manual_seed(4)
    for _ in range(3):
        g = torch.randn(SHAPES[0], generator=gen)
        ours[0].grad, theirs[0].grad = g.clone(), g.clone()
        a.step()
        b.step()
        assert torch.equal(ours[0].detach(), theirs[0].detach())


def test_stochastic_rounding_agrees_statistically_with_torchaos_compiled_step():
    r = stochastic_agreement((64, 64), seed=0)
    assert r.agrees(), r
    assert abs(r.std["ours"] - r.std["expected"]) < 0.02 and abs(r.std["torchao"] - r.std["expected"]) < 0.02


def test_footprint_equals_torchaos_for_the_same_tensors():
    for states in ("8bit", "4bit", "fp8"):
        ms = [torch.nn.Linear(64, 64) for _ in range(2)]
        ms[1].load_state_dict(ms[0].state_dict())
        opts = [AdamW(ms[0].parameters(), states=states), torchao_optimizer(ms[1].parameters(), states)]
        for m, o in zip(ms, opts):
            m(torch.ones(2, 64)).sum().backward()
            o.step()
        mine, theirs = (footprint(m, o) for m, o in zip(ms, opts))
        assert mine == theirs, (states, mine, theirs)
