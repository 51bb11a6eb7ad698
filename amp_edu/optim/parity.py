"""torchao.optim and :class:`~amp_edu.optim.adamw.AdamW`, side by side on the same tensors.

:func:`compare_steps` builds torchao's optimizer (``AdamW8bit``, ``AdamW4bit``, ``AdamWFp8`` or
``_AdamW``) and the course's with the same settings over copies of the same weights, feeds both
the same gradients for a few steps, and after each step compares, bit for bit, the weights and
every state: the codes and scales of a quantized state, the values of a plain one.

Stochastic rounding inside torchao's optimizer draws its random bits in compiled code, from
Inductor's own generator, not the stream eager ``torch.randint`` produces; those bits cannot be
shared. :func:`stochastic_agreement` therefore compares that path statistically: both optimizers
take a step from the same weights and gradients; each result must be one of the two bf16
neighbours of the same fp32 value; the fraction rounded up must match the probability the low
bits give, and the mean rounding error must be 0 within its standard error.

torchao compiles ``single_param_adam`` once per shape and dtype (its first step takes seconds;
Inductor's on-disk cache makes later processes fast).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .adamw import AdamW
from .state import QuantizedState
from .stochastic import round_up_probability

__all__ = ["TORCHAO", "torchao_optimizer", "StepParity", "compare_steps", "SRAgreement", "stochastic_agreement"]

TORCHAO = {"8bit": "AdamW8bit", "4bit": "AdamW4bit", "fp8": "AdamWFp8", "param": "_AdamW"}


def torchao_optimizer(params, states: str = "8bit", **kwargs) -> torch.optim.Optimizer:
    """torchao's AdamW for ``states`` (see :data:`TORCHAO`) over ``params``."""
    if states not in TORCHAO:
        raise ValueError(f"states must be one of {', '.join(TORCHAO)}, got {states!r}")
    import torchao.optim
    import torchao.optim.adam
    cls = getattr(torchao.optim.adam if states == "param" else torchao.optim, TORCHAO[states])
    return cls(params, **kwargs)


def _raw(t) -> list[torch.Tensor]:
    """The bit patterns of a state (codes and scale of a quantized one), as integer views."""
    parts = [t.codes, t.scale] if hasattr(t, "codes") else [t]
    out = []
    for x in parts:
        x = x.detach().contiguous()
        out.append(x.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[x.element_size()]))
    return out


def _same(a, b) -> bool:
    ra, rb = _raw(a), _raw(b)
    return len(ra) == len(rb) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(ra, rb))


@dataclass(frozen=True)
class StepParity:
    step: int
    weights: bool          # every weight bit-identical
    states: bool           # every state: codes and scales (or values) bit-identical
    quantized: int         # how many of the tensors have quantized states (in both)
    tensors: int

    @property
    def equal(self) -> bool:
        return self.weights and self.states


def compare_steps(shapes=((128, 32), (128,), (128, 128)), states: str = "8bit", *, dtype=torch.float32,
                  steps: int = 3, seed: int = 0, lr: float = 1e-2, weight_decay: float = 1e-2,
                  betas=(0.9, 0.999), eps: float = 1e-8) -> list[StepParity]:
    """Step torchao's optimizer and :class:`AdamW` ``steps`` times on the same random weights
    and gradients of ``shapes``; one :class:`StepParity` per step."""
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float32 or torch.bfloat16, got {dtype!r}")
    gen = torch.Generator().manual_seed(seed)
    ours = [torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in shapes]
    theirs = [p.detach().clone().requires_grad_() for p in ours]
    kw = dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
    ao = torchao_optimizer(theirs, states, **kw)
    mine = AdamW(ours, states=states, **kw)
    out = []
    for k in range(1, steps + 1):
        for a, b in zip(ours, theirs):
            g = torch.randn(a.shape, generator=gen).to(dtype)
            a.grad, b.grad = g.clone(), g.clone()
        mine.step()
        ao.step()
        w = all(_same(a, b) for a, b in zip(ours, theirs))
        st = all(_same(mine.state[a][key], ao.state[b][key]) for a, b in zip(ours, theirs)
                 for key in ("exp_avg", "exp_avg_sq"))
        q = sum(isinstance(mine.state[a]["exp_avg"], QuantizedState) and hasattr(ao.state[b]["exp_avg"], "codes")
                for a, b in zip(ours, theirs))
        out.append(StepParity(k, w, st, q, len(ours)))
    return out


@dataclass(frozen=True)
class SRAgreement:
    n: int                    # elements compared
    neighbours: dict          # {"ours": bool, "torchao": bool}: every result a bf16 neighbour of the fp32 value
    up_fraction: dict         # {"expected", "ours", "torchao"}: fraction rounded away from zero
    mean_error: dict          # {"ours", "torchao"}: mean (rounded - exact) / ulp
    std_error: float          # standard error of that mean, from the exact probabilities
    std: dict                 # {"expected", "ours", "torchao"}: sd of (rounded - exact) / ulp

    def agrees(self, z: float = 4.0) -> bool:
        """Both on the neighbours, both mean errors within ``z`` standard errors of 0, and the two
        fractions rounded up within ``z`` standard errors of each other."""
        p = self.up_fraction["expected"]
        se_frac = math.sqrt(max(p * (1 - p), 1e-12) / self.n) * math.sqrt(2)
        return (all(self.neighbours.values())
                and all(abs(m) <= z * self.std_error for m in self.mean_error.values())
                and abs(self.up_fraction["ours"] - self.up_fraction["torchao"]) <= z * se_frac)


def _sr_step(who, w0, g, lr, weight_decay) -> torch.Tensor:
    kw = dict(lr=lr, weight_decay=weight_decay)
    if who == "exact":           # the fp32 value before rounding: the same step on an fp32 copy
        q = w0.float().requires_grad_()
        q.grad = g.float()
        AdamW([q], **kw).step()
        return q.detach()
    p = w0.clone().requires_grad_()
    p.grad = g.clone()
    opt = (AdamW([p], rounding="stochastic", **kw) if who == "ours"
           else torchao_optimizer([p], "param", bf16_stochastic_round=True, **kw))
    opt.step()
    return p.detach().float()


def stochastic_agreement(shape=(256, 256), *, seed: int = 0, lr: float = 1e-3,
                         weight_decay: float = 0.0) -> SRAgreement:
    """One AdamW step on bf16 weights with stochastic rounding: torchao's
    ``_AdamW(bf16_stochastic_round=True)`` against :class:`AdamW` (``rounding="stochastic"``).

    The exact fp32 value each weight is rounded from is the one the round-to-nearest path
    computes (bit-identical to torchao's, :func:`compare_steps`)."""
    gen = torch.Generator().manual_seed(seed)
    w0 = torch.randn(shape, generator=gen).bfloat16()
    g = torch.randn(shape, generator=gen).bfloat16()
    results = {}
    with torch.random.fork_rng(devices=[]):      # both draw from torch's default generator: seed it, restore it after
        torch.manual_seed(seed)
        for who in ("exact", "ours", "torchao"):
            results[who] = _sr_step(who, w0, g, lr, weight_decay)
    exact = results["exact"]
    lo = (exact.view(torch.int32) & -65536).view(torch.float32)
    hi = ((exact.view(torch.int32) & -65536) + 0x10000).view(torch.float32)
    ulp = (hi - lo).abs()
    prob = round_up_probability(exact)
    # an element rounds up with probability p (its distance above the lower neighbour, in ulps):
    # its error is 1 - p or -p, mean 0, variance p(1 - p)
    neighbours, up, mean = {}, {"expected": float(prob.mean())}, {}
    sd = {"expected": float((prob * (1 - prob)).mean().sqrt())}
    for who in ("ours", "torchao"):
        r = results[who]
        neighbours[who] = bool(((r == lo) | (r == hi)).all())
        up[who] = float((r == hi).double().mean())
        err = (r.double() - exact.double()) / ulp.double() * torch.sign(exact.double())
        mean[who] = float(err.mean())
        sd[who] = float(err.std())
    se = float((prob * (1 - prob)).sum().sqrt() / prob.numel())
    return SRAgreement(exact.numel(), neighbours, up, mean, se, sd)
