"""amp_edu.optim.AdamW against torchao.optim 0.18's compiled optimizers, side by side, step by step.

torchao compiles its per-parameter step with Inductor (seconds per shape on a cold cache), so this
module is in the slow tier; its shapes are few and shared so the compiled graphs are reused."""

import pytest
import torch

from amp_edu.device import num_threads

pytest.importorskip("torchao.optim")

from amp_edu.optim import AdamW, footprint  # noqa: E402
from amp_edu.optim.parity import compare_steps, stochastic_agreement, torchao_optimizer  # noqa: E402

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


@pytest.mark.parametrize("name,dtype,amsgrad", [
    ("Adam8bit", torch.bfloat16, False),       # L2 decay at torchao's default (0)
    ("AdamW4bit", torch.bfloat16, False),
    ("AdamWFp8", torch.bfloat16, False),
    ("_AdamW", torch.bfloat16, True),          # amsgrad's third state (plain: see the next test)
])
def test_drop_in_classes_bit_for_bit_with_tensor_lr_and_a_late_step(name, dtype, amsgrad):
    """The same constructor call on both libraries (torchao's class names and defaults, a tensor
    lr, unusual betas), bf16 weights; after two steps the counters jump to 20000, where the bias
    corrections are ~1. Weights and every state bit for bit at every step."""
    import amp_edu.optim as ae
    import torchao.optim as ao
    from amp_edu.optim.parity import _same
    w0 = torch.randn(SHAPES[0], generator=torch.Generator().manual_seed(5)).to(dtype)
    ps = [w0.clone().requires_grad_(), w0.clone().requires_grad_()]
    opts = [getattr(lib, name)([p], lr=torch.tensor(3e-3), betas=(0.8, 0.95), amsgrad=amsgrad) for lib, p in
            zip((ae, ao), ps)]
    gen = torch.Generator().manual_seed(6)
    keys = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
    for k in range(6):
        g = torch.randn(SHAPES[0], generator=gen).to(dtype)
        for p in ps:
            p.grad = g.clone()
        for o in opts:
            o.step()
            if k == 1:
                o.state[o.param_groups[0]["params"][0]]["step"].fill_(20000.0)
        assert _same(ps[0].detach(), ps[1].detach()), (name, k)
        sa, sb = opts[0].state[ps[0]], opts[1].state[ps[1]]
        assert all(_same(sa[key], sb[key]) for key in keys), (name, k)


def test_amsgrad_with_quantized_states_fails_in_torchao_and_runs_here():
    """torchao 0.18's step takes ``torch.maximum`` of the dequantized-looking ``max_exp_avg_sq.float()``
    (``adam.py`` line 196), which is still its state subclass, and the subclasses implement no
    ``aten.maximum``: AdamW8bit(amsgrad=True) fails at its first step on a quantized tensor. amp_edu
    dequantizes first; the arithmetic is the one ``_AdamW(amsgrad=True)`` matches above."""
    import amp_edu.optim as ae
    import torchao.optim as ao
    w = [torch.randn(SHAPES[0]).requires_grad_() for _ in range(2)]
    for p in w:
        p.grad = torch.ones_like(p)
    with pytest.raises(Exception, match="maximum"):
        ao.AdamW8bit([w[1]], amsgrad=True).step()
    opt = ae.AdamW8bit([w[0]], amsgrad=True)
    opt.step()
    assert type(opt.state[w[0]]["max_exp_avg_sq"]).__name__ == "QuantizedState"
