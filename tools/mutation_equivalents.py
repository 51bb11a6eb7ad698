"""Mutants of the exercise solutions that no grader can reject, because they are not wrong.

``tools/mutate.py`` counts a surviving mutant as *equivalent* only when it is claimed here, with
the reason it cannot differ, and the original and the mutant give identical results on every
input of the claim's input set — the return value (or the exception: type and message) and every
argument after the call, compared bit for bit (``-0.0`` is not ``0.0``; NaN is NaN; a module, an
optimizer or a GradScaler by its ``state_dict()``). The input set
is exhaustive where the domain is small, otherwise it holds the inputs on which the change could
matter (the reason says which). The check is rerun on every sweep, so a claim that becomes false
when a solution changes is reported, not trusted.

A claim names its mutant as ``tools/mutate.py --list`` prints it: the answer function, the
line in the solution block, the operator, the original code and its replacement (and its
``(#n)`` when the same change occurs twice on that line).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Callable

import torch


@dataclasses.dataclass(frozen=True)
class Claim:
    lesson: str
    function: str
    line: int            # line in the solution block, as tools/mutate.py --list prints it
    operator: str
    original: str
    replacement: str
    reason: str
    inputs: Callable[[], list[tuple[tuple, dict]]]    # (args, kwargs) of each call to compare
    nth: int = 1         # the (#n) that --list prints after a repeated mutant
    # how two outcomes are compared: bit for bit (``identical``), unless the exercise's contract
    # allows more than one answer and says so here (the reason names the contract)
    same: Callable[[Any, Any], bool] | None = None


def identical(a: Any, b: Any) -> bool:
    """Same type and the same value to the last bit, recursively (NaN equal to NaN, -0.0 not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return False
        if a.is_meta:
            return True          # a meta tensor has no values: dtype, shape and device are all it is
        if a.is_floating_point() and a.element_size() in (2, 4, 8):
            from amp_edu.checks.core import same_bits
            return same_bits(a, b)
        return bool(torch.equal(a, b))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, BaseException):
        return str(a) == str(b)
    if isinstance(a, torch.Generator):             # a random stream: by its state, not its identity
        return torch.equal(a.get_state(), b.get_state())
    if hasattr(a, "state_dict") and callable(a.state_dict):
        # modules (parameters and buffers), optimizers and GradScalers: their state, not their identity
        return identical(a.state_dict(), b.state_dict())
    return a == b


def outcome(fn: Callable, args: tuple, kwargs: dict) -> tuple:
    """(result or exception, the arguments after the call) of ``fn`` on a deep copy of its inputs."""
    args, kwargs = copy.deepcopy((args, kwargs))
    try:
        result = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
        result = exc
    return result, args, kwargs


def verify(claim: Claim, original: Callable, mutant: Callable) -> tuple[bool, str]:
    """Do ``original`` and ``mutant`` agree on every input of ``claim``?"""
    cases = claim.inputs()
    for args, kwargs in cases:
        want, got = outcome(original, args, kwargs), outcome(mutant, args, kwargs)
        if not (claim.same or identical)(want, got):
            return False, f"differs on args={args!r:.200} kwargs={kwargs!r:.100}: {want[0]!r:.100} vs {got[0]!r:.100}"
    return True, f"identical on {len(cases)} inputs"



# ------------------------------------------------------------------------------------------------
# the documented input sets (built on demand: they import the graders' own cases)

def _f32(*v):
    return torch.tensor(v, dtype=torch.float32)


def _underflow_inputs():
    from amp_edu.checks import l02
    out = [((grads, scale), {}) for grads, scale in l02._cases_underflow()]
    out += [(([g.clone().requires_grad_(True) for g in grads], scale), {}) for grads, scale in l02._cases_underflow()
            if all(g.numel() for g in grads)]
    # every float32 within ±300 ulps of the tie 2^-25 / S, for scales that are not powers of two
    for scale in (0.1, 1 / 3, 3.0, 1000.1, 5e-5, 2.0 ** 10):
        base = torch.tensor(2.0 ** -25 / scale, dtype=torch.float32)
        xs = base + torch.arange(-300, 301, dtype=torch.float32) * torch.finfo(torch.float32).eps * base
        out.append((([xs.unique(), -xs.unique()], scale), {}))
    return out


def _lost_inputs():
    from amp_edu.checks import l02
    out = [((w, u), {}) for w, u in l02._cases_lost()]
    # every finite fp16 weight, with updates at half an ulp (the ties) and a hair either side
    w = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    w = w[torch.isfinite(w)]
    g = torch.Generator().manual_seed(0)
    for rel in (2.0 ** -11, 2.0 ** -12, 2.0 ** -12 * (1 + 2.0 ** -20), 2.0 ** -12 * (1 - 2.0 ** -20), 2.0 ** -13):
        out.append(((w, w.float() * rel), {}))
        out.append(((w, -(w.float() * rel)), {}))
    out.append(((w, torch.randn(w.shape, generator=g) * 1e-3), {}))
    return out


def _choose_scale_inputs():
    from amp_edu.checks import l03
    out = [((grads,), {}) for (grads,) in l03._cases_scale()] + [((l03._low_precision_case(),), {})]
    ms = []
    for j in range(-130, 128):                        # around every power of two and 65504 / 2^j
        for c in (2.0 ** j, 65504.0 * 2.0 ** j):
            t = torch.tensor(c, dtype=torch.float32)
            if torch.isfinite(t) and t > 0:
                ms += [t, torch.nextafter(t, _f32(0.0)[0]), torch.nextafter(t, _f32(math.inf)[0])]
    ms += list(torch.rand(200, generator=torch.Generator().manual_seed(1)) * 2.0 ** 40)
    out += [(([m.reshape(1)],), {}) for m in ms if m > 0]
    out += [(([torch.tensor([3.0, -70000.0], requires_grad=True)],), {})]
    return out


def _scaled_step_inputs():
    from amp_edu.checks import l03
    out = []
    for i, (desc, seq, spare, *loss) in enumerate(l03._SCENARIOS):
        model, master, opt = l03._setup(i, spare)
        for j, (kind, scale) in enumerate(seq[:1]):
            x, y = l03._batch(kind, 100 * i + j, model)
            out.append(((model, master, opt, loss[0] if loss else l03._loss_fn, x, y, scale), {}))
    return out


def _unscale_inputs():
    from amp_edu.checks import l04
    return [((grads, torch.tensor(scale, dtype=torch.float32)), {}) for _, grads, scale in l04._unscale_cases(0)]


def _update_inputs():
    from amp_edu.checks import l04
    out = []
    for _, scale, tracker, found, gf, bf, gi in l04._update_cases(0):
        for f in {found, 0.0, -0.0, 1.0, math.nan, math.inf, 2.0}:
            out.append(((torch.tensor(scale, dtype=torch.float32), torch.tensor(tracker, dtype=torch.int32),
                         torch.tensor(f, dtype=torch.float32), gf, bf, gi), {}))
    return out


def _autocast_args_inputs():
    from amp_edu.checks import l05
    h = torch.randn(2, 3).half()
    calls = [(op, args, kwargs, pol, low) for _, pol, low, op, _, args, kwargs in l05.args._cases()]
    # every valid way to pass a dtype positionally to the fp32_dtype ops (index 2 or later)
    calls += [("softmax", (h, 1, torch.float16), {}, "cuda", torch.float16),
              ("log_softmax", (h, 0, torch.float32), {}, "cuda", torch.float16),
              ("softmax", (h, 1, torch.bfloat16), {}, "cuda", torch.bfloat16),
              ("norm", (h, 2.0, 1, False, None, torch.float16), {}, "cuda", torch.float16)]
    return [((op, args, dict(kwargs)), dict(policy=pol, device_type="cpu", dtype=low))
            for op, args, kwargs, pol, low in calls]


def _bound_inputs():
    from amp_edu.checks import l06
    cases = list(l06._near_ridge_cases())
    for m in (1, 7, 64, 300, 4096):
        for k in (1, 9, 300, 8192):
            for n in (1, 64, 300, 5000):
                for dt in (torch.float16, torch.float32, torch.float8_e4m3fn, torch.float64):
                    cases.append((m, k, n, dt, 100.0, 1000.0))
                    cases.append((m, k, n, dt, 989.0, 3350.0))
    return [(c, {}) for c in cases]


def _largest_batch_inputs():
    out = []
    for widths in ([16, 32, 8], [10, 24, 24, 3], [12, 40, 6, 20, 4], [7, 5], [3, 1, 1, 2]):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            for budget in list(range(0, 3000, 7)) + [10_000, 55_000, 10 ** 9]:
                out.append(((widths, dt, budget), {}))
    return out


def _train_amp_inputs():
    from amp_edu.checks import l08
    out = []
    for _, _, setup, batches, kw in l08.situations():
        model, opt, scaler = l08._setup(**setup)
        out.append(((model, opt, scaler, batches), dict(device_type="cpu", dtype=torch.float16, **kw)))
    return out


class _IntegerOutputs(torch.nn.Module):
    """A module whose outputs are an int64 and a bool tensor, then a NaN made later."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.pick = _Argmax()

    def forward(self, x):
        h = self.fc(x)
        idx, mask = self.pick(h)
        return torch.sqrt(h) + idx.float() * mask.float()


class _Argmax(torch.nn.Module):
    def forward(self, h):
        return h.argmax(dim=-1, keepdim=True), h > 0


def _first_nonfinite_inputs():
    from amp_edu.checks import l09
    out = [((model, x), {}) for _, _, model, x in l09.cases()]
    out.append(((_IntegerOutputs(), torch.randn(5, 4, generator=torch.Generator().manual_seed(3))), {}))
    return out


def _stochastic_round_fp16_inputs():
    """x: random float32 over fp16's normal range (both signs), exact fp16 values, zeros, both ends of
    the range; three generator seeds (the same stream for both)."""
    g = torch.Generator().manual_seed(12)
    mag = torch.exp2(torch.empty(4000).uniform_(-14, math.log2(65504.0), generator=g)).clamp(2.0 ** -14, 65504.0)
    x = torch.cat([mag * torch.where(torch.rand(4000, generator=g) < 0.5, -1.0, 1.0), mag[:500].half().float(),
                   torch.linspace(65472.0, 65504.0, 300), torch.linspace(2.0 ** -14, 2.0 ** -13, 300),
                   torch.tensor([0.0, -0.0, 1.0, 1.0 + 2.0 ** -10, 1.0 + 2.0 ** -11, -65504.0, -(2.0 ** -14)])])
    return [((x.clone(), torch.Generator().manual_seed(k)), {}) for k in (0, 1, 2)]


def _kahan_inputs():
    """(p, comp, update): the grader's four bf16 and fp16 weights with their first updates, with buffers
    in their own dtype and in float32, the double-rounding case, and bf16 extremes (largest finite,
    smallest normal and subnormal, -0.0)."""
    from amp_edu.checks import l12
    params = l12._params()
    cases = [((p.clone(), torch.zeros_like(p, dtype=dt), u), {}) for dt in (None, torch.float32)
             for p, u in zip(params, l12._updates(params, 1)[0])]
    p, c, u = l12._rounded_twice()
    cases.append(((p, c, u), {}))
    big = torch.tensor([3.3895313892515355e38, 1.1754943508222875e-38, 9.183549615799121e-41, -0.0, 1.0]).bfloat16()
    cases.append(((big, (big.float() * 2.0 ** -12).bfloat16(), big.float() * 2.0 ** -10), {}))
    return cases


def _quantize_inputs():
    """The grader's cases (float32, bf16, zeros, tiny, 3-D; given scales that overflow), and fp16
    inputs of every size with their extremes."""
    from amp_edu.checks import l10
    cases = [((x, dtype) + (() if given is None else (torch.tensor(given, dtype=torch.float32),)), {})
             for _, x, dtype, given in l10._quantize_cases()]
    h = torch.tensor([65504.0, -65504.0, 6.1e-5, 6e-8, 1.0, -0.0]).half()
    cases += [((h, torch.float8_e4m3fn), {}), ((h, torch.float8_e5m2, torch.tensor(3.0)), {})]
    return cases


def _delayed_inputs():
    """The grader's cases: histories, amaxes (0, NaN, inf, float64), previous scales, margins."""
    from amp_edu.checks import l10
    return [((h, a if isinstance(a, torch.Tensor) else torch.tensor(a), torch.tensor(prev, dtype=torch.float32),
              dtype, margin), {}) for _, h, a, prev, dtype, margin in l10._delayed_cases()]


def _one_rank_group():
    """The default process group of one gloo rank in this process (made once): all_reduce is then the
    identity, and unscale_and_sync_(grads, scale, None) runs as on each rank of the grader."""
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def _unscale_sync_inputs():
    """grads of every float dtype (fp16 included), with and without inf/NaN, none at all; scales
    that are and are not powers of two, tiny, huge; group None (the one-rank default group)."""
    _one_rank_group()
    g = torch.Generator().manual_seed(11)
    grads = [torch.randn(8, generator=g) * 1e3, torch.randn(3, 4, generator=g).half(),
             torch.randn(5, generator=g).bfloat16(), torch.randn(2, generator=g).double()]
    bad = [t.clone() for t in grads]
    bad[1][0, 0] = math.inf
    cases = []
    for s in (2.0 ** 16, 3.0, 1.0 / 3.0, 65504.0, 1e-30, 3e38, 7.389):
        for gs in (grads, bad, []):
            cases.append((([t.clone() for t in gs], torch.tensor(s, dtype=torch.float32), None), {}))
    return cases


def _same_grads_found_alike(want, got) -> bool:
    """The exercise's contract (checks/l11.py): the gradients bit for bit, and found_inf a float32
    tensor of shape (1,) that is nonzero exactly when an inf/NaN was found (its value is a flag)."""
    (r1, a1, k1), (r2, a2, k2) = want, got
    return (identical(a1, a2) and identical(k1, k2) and isinstance(r1, torch.Tensor) and isinstance(r2, torch.Tensor)
            and r1.dtype == r2.dtype and r1.shape == r2.shape and torch.equal(r1 != 0, r2 != 0))


def _kernel_names_inputs():
    """The grader's kernel names (the exercise model's and the lesson block's, as C++ and as Triton
    name them, torch.ops calls) and names Inductor gives CPU kernels for the course's models (casts,
    norms, softmax, GELU, reductions, counters past 9, library calls)."""
    from amp_edu.checks import l13
    names = l13._EXERCISE_CPP + l13._BLOCK_CPP + l13._EXERCISE_TRITON + l13._BLOCK_TRITON + l13._TORCH_OPS
    names += ["cpp_fused__to_copy_copy_0", "cpp_fused__to_copy_0", "cpp_fused__to_copy_add_1",
              "cpp_fused_relu_2", "cpp_fused__softmax__to_copy_3", "cpp_fused__to_copy_gelu_4",
              "cpp_fused_add_mul_sum_5", "cpp_fused__to_copy_native_layer_norm_6", "cpp_fused_exp_7",
              "cpp_fused__to_copy_mean_pow_rsqrt_18", "cpp_fused__log_softmax__to_copy_nll_loss_forward_21",
              "cpp_fused__to_copy__to_copy_9", "extern_kernels.mm", "extern_kernels.addmm", "torch.ops.aten.bmm"]
    return [((names,), {})]


def _trainer_loop_input(case: dict) -> tuple[tuple, dict]:
    """``reproduce_trainer``'s arguments for a described run, as exercise 14's plan builds them."""
    from amp_edu import hf
    from amp_edu.plans import l14 as plan
    with hf.quiet():
        p = hf.Plan("cpu", torch.float16, True) if case.get("gpu_path") else hf.plan_for(case["setting"], "cpu")
        model = plan.model_for(case)
        model.loss_function     # transformers' once-per-process loss_type notice, given here where quiet() hides it
        return (model, plan.dataset_for(case), p, dict(case["cfg"])), {}


def _reproduce_inputs():
    """The grader's five runs (fp32 over two epochs, bf16, fp16 with a GradScaler, padded windows as lists
    with the model in eval mode, a bf16 run that turns NaN), built as the plan builds them."""
    from amp_edu.checks import l14
    return [_trainer_loop_input(case) for case in l14.reproduce_cases()]


def _schedule_inputs():
    """The grader's runs, and short fp32 runs of 1 to 4 steps with every warmup from 0 to steps + 1: the
    schedule's factor is evaluated at k = 0 .. steps, and these hold k < warm, k = warm, warm = 1,
    warm = steps − 1, warm = steps and warm > steps."""
    from amp_edu.checks import l14
    out = _reproduce_inputs()
    for steps in (1, 2, 3, 4):
        for warm in range(steps + 2):
            cfg = {"lr": 2e-3, "steps": steps, "batch_size": l14._SIZES["batch_size"], "seed": 7, "weight_decay": 0.1,
                   "warmup_steps": warm, "max_grad_norm": 1.0}
            out.append(_trainer_loop_input({"setting": "fp32", "cfg": cfg,
                                            "sizes": {**l14._SIZES, "steps": steps, "seed": 7, "lr": 2e-3}}))
    return out


# ------------------------------------------------------------------------------------------------
# the claims

def _group(lesson, function, reason, inputs, *mutants, same=None):
    return [Claim(lesson, function, line, op, orig, repl, reason, inputs, same=same)
            for line, op, orig, repl in mutants]


_LOOPS_FIX_ANY_START = (
    "the two while loops alone find the answer from any integer starting k: the first raises k while "
    "m·2^(k+1) <= 65504, the second lowers it while m·2^k > 65504, so the result is the unique k with "
    "m·2^k <= 65504 < m·2^(k+1) whatever line 2 computed")
_START_IS_EXACT = (
    "for a float32 magnitude m (the gradients are float, and max|g| of fp16/bf16 is exact in a Python float), "
    "floor(log2(65504 / m)) is already exact: 65504/m rounds monotonically and never onto a power of two "
    "it is not (the exact quotient 2^5·2047/m is ≥ 2^-24 relative away from one), and log2 is exact on powers "
    "of two — so neither guard loop ever runs, and a change inside one loop cannot be seen. Input set: every "
    "float32 power of two, every 65504·2^j and both float32 neighbours of each, 200 random magnitudes")

CLAIMS: list[Claim] = [
    *_group("02", "underflow_fraction",
            ".float() of the float32 gradients the exercise passes is the identity and detach() changes no value. "
            "In float64, x·S rounded to fp16 goes through float32 (torch's double → half cast does), and only "
            "where x·S and float32's x·float32(S) fell on two sides of the 2^-25 tie could the answers differ; "
            "no float32 near that tie does so for the scales tried (not proven for every scale). Input set: "
            "the grader's cases, the same with requires_grad, and every float32 within ±300 ulps of 2^-25/S for "
            "six scales that are not powers of two",
            _underflow_inputs,
            (1, "dtype", "g.detach().reshape(-1).float()", "g.detach().reshape(-1).double()"),
            (1, "drop call", "g.detach().reshape(-1).float()", "g.detach().reshape(-1)"),
            (1, "drop call", "g.detach()", "g")),
    *_group("02", "lost_updates",
            "weight is float16 and update float32 (the exercise's types): fp16 − fp32 already computes in "
            "float32 (torch's type promotion), .half() of an fp16 tensor and .float() of an fp32 one are the "
            "identity, and in float64 the difference of an fp16 and an fp32 value rounded to float32 (torch's "
            "double → half cast goes through float) is float32's own correctly rounded difference (53 ≥ 2·24+2 "
            "bits: double rounding is innocuous). Input set: the grader's cases and every finite fp16 weight "
            "with updates at, just above and just below half an ulp, both signs, and random updates",
            _lost_inputs,
            (1, "dtype", "weight.float()", "weight.half()"),
            (1, "dtype", "weight.float()", "weight.double()"),
            (1, "drop call", "weight.float()", "weight"),
            (1, "dtype", "update.float()", "update.double()"),
            (1, "drop call", "update.float()", "update")),
    *_group("03", "choose_scale", "detach() changes no value: float() of the max is the same number",
            _choose_scale_inputs, (1, "drop call", "g.detach()", "g")),
    *_group("03", "choose_scale", _LOOPS_FIX_ANY_START, _choose_scale_inputs,
            (2, "function", "math.floor", "math.ceil"),
            (2, "operator", "65504.0 / m", "65504.0 * m"),
            (2, "swap operands", "65504.0 / m", "m / 65504.0"),
            (2, "drop operand", "65504.0 / m", "65504.0"),
            (2, "drop operand", "65504.0 / m", "m"),
            (2, "constant", "65504.0", "65505.0"),
            (2, "constant", "65504.0", "65503.0"),
            (2, "constant", "65504.0", "131008.0")),
    *_group("03", "choose_scale", _START_IS_EXACT, _choose_scale_inputs,
            (3, "drop statement", "while m * 2.0 ** (k + 1) <= 65504.0: ...", "<removed>"),
            (3, "while: once", "while m * 2.0 ** (k + 1) <= 65504.0: ...", "if m * 2.0 ** (k + 1) <= 65504.0: ..."),
            (3, "comparison", "m * 2.0 ** (k + 1) <= 65504.0", "m * 2.0 ** (k + 1) < 65504.0"),
            (3, "drop operand", "m * 2.0 ** (k + 1)", "2.0 ** (k + 1)"),
            (3, "drop operand", "k + 1", "k"),
            (3, "constant", "1", "2"),
            (3, "constant", "1", "0"),
            (3, "constant", "65504.0", "65505.0"),
            (3, "constant", "65504.0", "65503.0"),
            (3, "constant", "65504.0", "131008.0"),
            (3, "constant", "65504.0", "0.0"),
            (4, "drop statement", "k += 1", "<removed>"),
            (4, "operator", "k += 1", "k -= 1"),
            (4, "constant", "1", "2"),
            (4, "constant", "1", "0"),
            (5, "drop statement", "while m * 2.0 ** k > 65504.0: ...", "<removed>"),
            (5, "while: once", "while m * 2.0 ** k > 65504.0: ...", "if m * 2.0 ** k > 65504.0: ..."),
            (5, "operator", "2.0 ** k", "2.0 * k"),
            (5, "constant", "65504.0", "131008.0"),
            (6, "drop statement", "k -= 1", "<removed>"),
            (6, "operator", "k -= 1", "k += 1"),
            (6, "constant", "1", "2"),
            (6, "constant", "1", "0")),
    *_group("03", "choose_scale",
            "a first loop that overshoots (it stops at some k above the answer) is undone by the second, which "
            "lowers k while m·2^k > 65504 and so stops exactly at the largest k with m·2^k <= 65504 from any k "
            "at or above it; these first loops start at the exact k and only ever raise it. Input set: as for "
            "the loops above",
            _choose_scale_inputs,
            (3, "constant", "2.0", "3.0"),
            (3, "constant", "2.0", "4.0"),
            (3, "operator", "k + 1", "k - 1")),
    *_group("03", "choose_scale", _START_IS_EXACT, _choose_scale_inputs,
            (5, "constant", "65504.0", "65505.0")),
    *_group("03", "scaled_step",
            "all() takes the truth value of each item, and bool() of a one-element bool tensor is its value: "
            "the same test. Input set: the first call of every grader scenario",
            _scaled_step_inputs,
            (6, "drop call", "bool(torch.isfinite(g).all())", "torch.isfinite(g).all()")),
    *_group("04", "unscale_and_check_",
            "torch.zeros(()) is float32 under torch's default dtype, which the course never changes "
            "(torch.get_default_dtype() is float32). Input set: the grader's cases",
            _unscale_inputs,
            (2, "drop keyword", "torch.zeros((), dtype=torch.float32)", "torch.zeros(())")),
    *_group("04", "update_scale_",
            "every variant rounds the float64 product s·factor (a Python float) once to float32: fill_ casts a "
            "float64 tensor to float32, and torch.tensor of a Python float makes a float32 from the double; "
            "`if tensor` and `tensor + 1` on the 0-dim found_inf/growth tracker give what .item() gives (the "
            "tracker stays below growth_interval < 2^31). Input set: the grader's cases, each with found_inf "
            "0, -0, 1, 2, inf and NaN",
            _update_inputs,
            (2, "drop call", "found_inf.item()", "found_inf"),
            (3, "dtype", "torch.tensor(s * backoff_factor, dtype=torch.float64).float()",
             "torch.tensor(s * backoff_factor, dtype=torch.float64).double()"),
            (3, "drop call", "torch.tensor(s * backoff_factor, dtype=torch.float64).float()",
             "torch.tensor(s * backoff_factor, dtype=torch.float64)"),
            (3, "drop keyword", "torch.tensor(s * backoff_factor, dtype=torch.float64)", "torch.tensor(s * backoff_factor)"),
            (3, "dtype", "torch.float64", "torch.float32"),
            (6, "drop call", "growth_tracker.item()", "growth_tracker"),
            (8, "drop keyword", "torch.tensor(s * growth_factor, dtype=torch.float64)", "torch.tensor(s * growth_factor)"),
            (8, "dtype", "torch.float64", "torch.float32")),
    *_group("05", "autocast_args",
            "args[0] is the op's input tensor, never a dtype, and no fp32_dtype op of either policy takes a dtype "
            "as its second positional argument (softmax(input, dim, dtype), norm(input, p, dim, keepdim, out, "
            "dtype); cumsum, cumprod, sum, prod and the linalg norms take it by keyword only), so args[0:], "
            "args[1:] and args[2:] hold a dtype in the same calls. Input set: the grader's calls and every valid "
            "positional-dtype call of softmax, log_softmax and norm",
            _autocast_args_inputs,
            (21, "constant", "1", "2"),
            (21, "constant", "1", "0")),
    *_group("06", "predict_bound",
            "arithmetic_intensity is symmetric in m, k, n: 2·m·k·n and m·k + k·n + m·n are exact integer "
            "expressions that any order of the three gives alike. Input set: the grader's cases and 320 shapes "
            "× 4 dtypes on two devices",
            _bound_inputs,
            (2, "swap arguments", "arithmetic_intensity(m, k, n, dtype)", "arithmetic_intensity(k, m, n, dtype)"),
            (2, "swap arguments", "arithmetic_intensity(m, k, n, dtype)", "arithmetic_intensity(m, n, k, dtype)")),
    *_group("07", "predict_largest_batch",
            "max of two ints does not depend on their order (on a tie both are the same int). Input set: 5 "
            "models × 3 dtypes × 432 budgets",
            _largest_batch_inputs,
            (3, "swap arguments", "max(0, (budget_bytes - fixed) // per_sample)",
             "max((budget_bytes - fixed) // per_sample, 0)")),
    *_group("08", "train_amp",
            "Optimizer.zero_grad's default is set_to_none=True (torch/optim/optimizer.py, `def zero_grad(self, "
            "set_to_none: bool = True)`); zeroed gradients instead of None differ only for a parameter that gets "
            "no gradient before the next step, and every parameter of the model is used by every forward "
            "(backward adds into a zero tensor exactly what it would store). The exercise grades parameters, "
            "scale and growth tracker, which is what is compared. Input set: every grader situation",
            _train_amp_inputs,
            (1, "drop keyword", "optimizer.zero_grad(set_to_none=True)", "optimizer.zero_grad()"),
            (1, "constant", "True", "False"),
            (12, "drop keyword", "optimizer.zero_grad(set_to_none=True)", "optimizer.zero_grad()"),
            (12, "constant", "True", "False")),
    *_group("08", "train_amp",
            "torch.nn.utils.clip_grad_norm is the deprecated alias that returns clip_grad_norm_(...) "
            "(torch/nn/utils/clip_grad.py, lines 240-253 at torch 2.13.0): the same in-place clip. Input set: "
            "every grader situation",
            _train_amp_inputs,
            (9, "not in place", "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
             "torch.nn.utils.clip_grad_norm(model.parameters(), max_norm)")),
    *_group("09", "first_nonfinite_layer",
            "torch.isfinite is all True on integer and bool tensors, so testing only floating tensors changes "
            "nothing for real-valued outputs (complex outputs are outside the exercise). Input set: the grader's "
            "models and one whose module returns an int64 and a bool tensor",
            _first_nonfinite_inputs,
            (14, "drop condition", "t.is_floating_point() and (not torch.isfinite(t).all())",
             "not torch.isfinite(t).all()")),
    *_group("12", "stochastic_round_fp16",
            "the last step, .half() of the float32 pattern, rounds to nearest, and x lies in fp16's normal range "
            "(the exercise's domain): a leftover lowest bit (-8191 for -8192) or an added 8191/8193 for 8192 moves "
            "the float32 value by one float32 ulp, 2^-13 of an fp16 ulp, which rounds back onto the same fp16 "
            "number (65504 included). Input set: random float32 over fp16's normal range, both signs, exact fp16 "
            "values, zeros, both ends of the range",
            _stochastic_round_fp16_inputs,
            (2, "constant", "8192", "8191"), (4, "constant", "8192", "8193"), (4, "constant", "8192", "8191")),
    *_group("12", "stochastic_round_fp16",
            "for a range below 2^32 torch.randint draws 32 random bits per value whatever the dtype, so int64 "
            "gives the same values as int32 from the same generator and leaves it in the same state; compared "
            "with the int32 low bits, int64 changes nothing. Input set: as above",
            _stochastic_round_fp16_inputs,
            (3, "drop keyword", "torch.randint(0, 1 << 13, x.shape, generator=generator, dtype=torch.int32)",
             "torch.randint(0, 1 << 13, x.shape, generator=generator)")),
    *_group("12", "kahan_update_",
            "p and new_p are bf16 or fp16, comp is 16-bit or float32 and the update float32, so each of these "
            "sums already promotes its 16-bit operand to float32 exactly (a bf16 or fp16 value is a float32 "
            "value): .float() on one operand changes nothing. Input set: the grader's bf16 and fp16 weights with "
            "their first updates and 16-bit and float32 buffers, the double-rounding case, bf16 extremes",
            _kahan_inputs,
            (1, "drop call", "comp.float()", "comp"), (2, "drop call", "p.float()", "p"),
            (3, "drop call", "new_p.float()", "new_p"), (3, "drop call", "p.float()", "p")),
    *_group("12", "kahan_update_",
            "one operand in float64 makes that one sum or difference float64: it is exact there (a 16-bit value "
            "and a float32 value differing in exponent by under 29 bits sum exactly in 53 bits; a wider gap leaves "
            "the smaller far below half a float32 ulp either way), and the result reaches bf16, fp16 or float32 "
            "through float32 (torch converts double to bf16 and fp16 via float), so it is the correctly rounded "
            "float32 op, i.e. the float32 op itself. Input set: as above",
            _kahan_inputs,
            (2, "dtype", "p.float()", "p.double()"), (3, "dtype", "new_p.float()", "new_p.double()"),
            (3, "dtype", "p.float()", "p.double()")),
    *_group("10", "quantize_tensorwise",
            "x is float32, bf16 or fp16 (at most 24 significant bits) and the scale float32, so their product "
            "is exact in float64 (48 < 53 bits); torch converts float64 to fp8 through float32, and rounding "
            "the exact product to float32 is the float32 product itself; the clamp bounds are fp8 values, "
            "exact in both. Input set: the grader's cases and fp16 extremes",
            _quantize_inputs,
            (5, "dtype", "torch.float32", "torch.float64")),
    *_group("10", "delayed_update",
            "returning the caller's previous scale tensor itself instead of a copy gives the same value; the "
            "caller stores the returned scale and never writes into the one it passed (the mutant leaves "
            "every argument as the original does). Input set: the grader's cases (0, NaN, inf amaxes)",
            _delayed_inputs,
            (4, "drop call", "scale.clone()", "scale")),
    *_group("11", "unscale_and_sync_",
            "float32's division is correctly rounded, and rounding the float64 reciprocal of a float32 to "
            "float32 gives the same value: double rounding is innocuous for +, -, *, / and sqrt when the wider "
            "format has at least 2p + 2 bits (53 >= 2*24 + 2; S. A. Figueroa, 'When is double rounding "
            "innocuous?', SIGNUM Newsletter 30(3), 1995). Input set: as above",
            _unscale_sync_inputs,
            (1, "dtype", "scale.double()", "scale.float()"), (1, "drop call", "scale.double()", "scale")),
    *_group("11", "unscale_and_sync_",
            "torch.zeros without dtype makes torch's default dtype, float32 (the course never changes it). "
            "Input set: as above",
            _unscale_sync_inputs,
            (2, "drop keyword", "torch.zeros(1, dtype=torch.float32)", "torch.zeros(1)")),
    *_group("11", "unscale_and_sync_",
            "found_inf is a flag: the exercise asks for it nonzero on every rank exactly when some rank found "
            "an inf/NaN (SUM or MAX over the ranks both meet that; torch's scalers skip on any nonzero value), "
            "so 2.0 marks a find as 1.0 does. Compared by that contract: gradients bit for bit, found_inf by "
            "where it is nonzero. Input set: as above",
            _unscale_sync_inputs,
            (5, "constant", "1.0", "2.0"), same=_same_grads_found_alike),
    *_group("13", "kernel_kinds",
            "the kind depends only on whether '_to_copy' is among the fused ops and whether anything else is: "
            "right-stripping the characters of '_fused_' instead of '_' only trims trailing letters of the "
            "last op name (never into '_to_copy', which ends in 'y', and never all of another op), replacing "
            "the cast by '_' leaves underscores that the strip removes at the ends and that are never all that "
            "is left, stripping the characters of '_fused_' from the rest never empties a real op name, and a "
            "second split only matters for a name holding '_fused_' twice, which no kernel name does. "
            "Input set: the grader's kernels (C++ and Triton) and the CPU kernel names of the course's models",
            _kernel_names_inputs,
            (6, "constant", "'_'", "'_fused_'"), (6, "constant", "1", "2"), (8, "constant", "''", "'_'"),
            (8, "constant", "'_'", "'_fused_'")),
    *_group("14", "reproduce_trainer",
            "the grader runs every case on the CPU: plan.device is 'cpu' (plans/l14.py hands no other; the Trainer's "
            "run it compares with, bit for bit, is a CPU run), and the model and every batch are built there. "
            "Module.to('cpu') of a CPU module moves nothing and returns the module, Tensor.to('cpu') of a CPU tensor "
            "returns the tensor itself. The exercise says so, and that on a GPU these moves matter. Input set: the "
            "grader's five runs",
            _reproduce_inputs,
            (1, "drop statement", "model.to(plan.device)", "<removed>"),
            (1, "drop call", "model.to(plan.device)", "model"),
            (25, "drop statement", "batch = {k: v.to(plan.device) for k, v in batch.items()}", "<removed>"),
            (25, "drop call", "v.to(plan.device)", "v")),
    *_group("14", "reproduce_trainer",
            "a transformers causal LM's loss is float32 already, under any autocast: ForCausalLMLoss upcasts the "
            "logits (`logits = logits.float()`, transformers/loss/loss_utils.py) and divides by an integer count. "
            ".float() is the identity; .double() makes a float64 copy whose item() is the same Python float, whose "
            "backward hands float32 its exact gradient (1.0, or the GradScaler's power-of-two scale), and which the "
            "scaler's scale (a one-element float32 tensor) multiplies back into float32. Input set: the grader's five "
            "runs (fp32, bf16 autocast, fp16 autocast with a GradScaler, padded windows, a run that turns NaN)",
            _reproduce_inputs,
            (29, "drop statement", "loss = loss.float()", "<removed>"),
            (29, "drop call", "loss.float()", "loss"),
            (29, "dtype", "loss.float()", "loss.double()")),
    *_group("14", "reproduce_trainer",
            "torch.nn.utils.clip_grad_norm is the deprecated alias that returns clip_grad_norm_(...) "
            "(torch/nn/utils/clip_grad.py, lines 240-253 at torch 2.13.0): the same in-place clip. Input set: the "
            "grader's five runs",
            _reproduce_inputs,
            (32, "not in place", "torch.nn.utils.clip_grad_norm_(model.parameters(), cfg['max_grad_norm'])",
             "torch.nn.utils.clip_grad_norm(model.parameters(), cfg['max_grad_norm'])"),
            (37, "not in place", "torch.nn.utils.clip_grad_norm_(model.parameters(), cfg['max_grad_norm'])",
             "torch.nn.utils.clip_grad_norm(model.parameters(), cfg['max_grad_norm'])")),
    *_group("14", "reproduce_trainer",
            "the warmup branch returns only where k < warm, and k >= 0, so warm >= 1 there (warmup_steps is an int): "
            "max(1, warm), max(warm, 1) and max(0, warm) are all warm, and max(2, warm) differs only at warm = 1, "
            "where k = 0 and 0/1 = 0/2 = 0.0. Input set: the grader's runs and every warmup from 0 to steps + 1 for "
            "1 to 4 steps",
            _schedule_inputs,
            (13, "swap arguments", "max(1, warm)", "max(warm, 1)"),
            (13, "constant", "1", "2"),
            (13, "constant", "1", "0")),
    *_group("14", "reproduce_trainer",
            "LambdaLR evaluates the factor at k = 0 .. steps only (once when built, once per scheduler.step(), one "
            "per optimizer step), so steps − k >= 0 and the quotient is >= 0.0 (0 / n is +0.0): max(0.0, x), "
            "max(x, 0.0) and max(-1.0, x) are all x; and max of two ints does not depend on their order. (The "
            "other constants of this line are graded: warmup_steps = steps − 1 and = steps are among the runs.) "
            "Input set: as above",
            _schedule_inputs,
            (14, "swap arguments", "max(0.0, (steps - k) / max(1, steps - warm))",
             "max((steps - k) / max(1, steps - warm), 0.0)"),
            (14, "constant", "0.0", "-1.0"),
            (14, "swap arguments", "max(1, steps - warm)", "max(steps - warm, 1)")),
]
