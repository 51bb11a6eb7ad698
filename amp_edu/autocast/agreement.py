"""How closely ``amp_edu.autocast`` agrees with PyTorch's autocast, op for op.

PyTorch tests its own autocast with op lists that ship inside torch
(``torch.testing._internal.autocast_test_lists``; importing it needs the ``expecttest`` package):
``AutocastTestLists`` for CUDA and ``AutocastCPUTestLists`` for the CPU. Each entry is an op, its
arguments and the dtype autocast must produce. We replay them the way PyTorch's own tests do
(``test/test_cuda.py``, ``test/test_autocast.py``): the ``torch.*`` (or ``torch._C._nn`` /
``torch._C._linalg``) function *and* the ``Tensor`` method when both exist, for each low-precision
dtype those tests use, and count a check as agreeing when our output dtype equals the reference.

The reference differs by policy:

* **CPU policy**: the dtype ``torch.autocast("cpu", dtype=...)`` actually produces on the same
  call (and the list's expected dtype, which torch meets);
* **CUDA policy** on a machine without a GPU: torch's CUDA autocast only acts on CUDA tensors, so
  it cannot run here; the reference is the dtype the CUDA lists *expect* by category (fp16 lists
  -> the region's dtype, fp32 lists -> float32, promote lists -> float32, built-in promotion ->
  the listed type, the banned op -> RuntimeError). Ops whose kernels exist only on a GPU
  (``cudnn_convolution``) cannot run on a CPU and are counted as not runnable, not as agreeing.

Like torch's tests we also check the numbers: the autocast result must equal, bit for bit, the op
run outside autocast on inputs cast by hand to the dtype the list names ("control").
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import torch

from ..formats import dtype_name
from ..tree import tensors
from .region import autocast

__all__ = ["Check", "Report", "cpu_checks", "cuda_checks", "run", "torch_lists", "by_list", "everyday",
           "everyday_calls", "KNOWN_GAPS"]

_NOT_RUNNABLE = "not runnable here"
_DTYPE_NAMES = {"float16", "bfloat16", "float32", "float64", "bool"}


@dataclass
class Check:
    """One replayed call: which list, which op and variant, which dtype, and what came out."""

    policy: str
    list_name: str
    op: str
    variant: str          # "torch._C._nn.linear", "Tensor.mm", ...
    amp_dtype: torch.dtype
    expected: str         # a dtype name, or "RuntimeError"
    ours: str = ""
    reference: str = ""   # torch's own result (CPU) or the list's expectation (CUDA)
    bitwise: bool | None = None
    # how to make the call: (module or None for the Tensor method, op name, args, kwargs)
    call: tuple = field(default=(), repr=False, compare=False)

    @property
    def agrees(self) -> bool:
        return self.ours == self.reference and self.ours != _NOT_RUNNABLE

    @property
    def runnable(self) -> bool:
        return self.ours != _NOT_RUNNABLE


@dataclass
class Report:
    policy: str
    checks: list[Check]

    @property
    def runnable(self) -> list[Check]:
        return [c for c in self.checks if c.runnable]

    @property
    def agreement(self) -> float:
        """Fraction of runnable checks whose dtype agrees with the reference."""
        run = self.runnable
        return sum(c.agrees for c in run) / len(run)

    @property
    def disagreements(self) -> list[Check]:
        return [c for c in self.runnable if not c.agrees]

    @property
    def not_runnable(self) -> list[Check]:
        return [c for c in self.checks if not c.runnable]

    def summary(self) -> str:
        run = self.runnable
        bit = [c for c in run if c.bitwise is not None]
        return (f"{self.policy} policy: {sum(c.agrees for c in run)}/{len(run)} checks agree "
                f"({self.agreement:.1%}); {sum(bool(c.bitwise) for c in bit)}/{len(bit)} bitwise equal "
                f"to the hand-cast control; {len(self.not_runnable)} not runnable on this device")


def torch_lists():
    """torch's own autocast test lists (``torch.testing._internal.autocast_test_lists``)."""
    try:
        from torch.testing._internal import autocast_test_lists as atl
    except ImportError as exc:  # pragma: no cover - expecttest is a test dependency
        raise ImportError("torch's autocast test lists need the `expecttest` package "
                          "(pip install expecttest)") from exc
    return atl


def _split(entry, n_fixed: int):
    """(op, args, kwargs, skip) from a list entry: a trailing dict is kwargs; anything else is a
    skip flag, read as torch's tests read it (``TEST_WITH_ROCM``; the CUDA ``einsum`` entry's
    operand tuple sits there too, is truthy, and so is skipped by torch's tests as well)."""
    op, args, rest = entry[0], entry[1], entry[2:]
    kwargs, skip = {}, False
    for extra in rest[n_fixed:] if n_fixed else rest:
        if isinstance(extra, dict):
            kwargs = extra
        else:
            skip = bool(extra)
    return op, args, kwargs, skip


def _variants(op: str, module) -> list[str]:
    out = []
    if module is not None and hasattr(module, op):
        out.append(module.__name__ if hasattr(module, "__name__") else "torch")
    if hasattr(torch.Tensor, op):
        out.append("Tensor")
    return out


def _expand(policy, list_name, entries, module, amp_dtypes, expected, *, n_fixed=0):
    checks = []
    for entry in entries:
        op, args, kwargs, skip = _split(entry, n_fixed)
        if skip:
            continue
        for amp in amp_dtypes:
            exp = expected(entry, amp)
            for v in _variants(op, module):
                checks.append(Check(policy, list_name, op, f"{v}.{op}", amp, exp,
                                    call=(module if v != "Tensor" else None, op, args, kwargs)))
    return checks


def cpu_checks() -> list[Check]:
    """Every check of torch's CPU autocast tests (bf16 and fp16 regions)."""
    L = torch_lists().AutocastCPUTestLists(torch.device("cpu"))
    both = (torch.bfloat16, torch.float16)
    low = lambda e, amp: dtype_name(amp)  # noqa: E731
    f32 = lambda e, amp: "float32"  # noqa: E731
    checks = []
    for name, module in (("torch_expect_builtin_promote", torch), ("methods_expect_builtin_promote", None)):
        for op, a_bf16, a_fp16, out_type in getattr(L, name):
            for amp, args in ((torch.bfloat16, a_bf16), (torch.float16, a_fp16)):
                checks += _expand("cpu", name, [(op, args)], module, (amp,), lambda e, a, t=out_type: dtype_name(t))
    checks += _expand("cpu", "torch_16", L.torch_16, torch, both, low)
    checks += _expand("cpu", "nn_16", L.nn_16, torch._C._nn, both, low)
    checks += _expand("cpu", "torch_fp32", L.torch_fp32, torch, both, f32)
    checks += _expand("cpu", "nn_fp32", L.nn_fp32, torch._C._nn, both, f32)
    for op, a_bf16, a_fp16 in L.torch_need_autocast_promote:
        checks += _expand("cpu", "torch_need_autocast_promote", [(op, a_bf16)], torch, (torch.bfloat16,), f32)
        checks += _expand("cpu", "torch_need_autocast_promote", [(op, a_fp16)], torch, (torch.float16,), f32)
    return checks


def cuda_checks() -> list[Check]:
    """Every check of torch's CUDA autocast tests, for the CUDA policy (fp16; bf16 where torch tests it)."""
    L = torch_lists().AutocastTestLists(torch.device("cpu"))
    fp16, both = (torch.float16,), (torch.float16, torch.bfloat16)
    low = lambda e, amp: dtype_name(amp)  # noqa: E731
    f32 = lambda e, amp: "float32"  # noqa: E731
    checks = []
    checks += _expand("cuda", "torch_fp16", L.torch_fp16, torch, both, low)
    checks += _expand("cuda", "torch_fp32", L.torch_fp32, torch, fp16, f32)
    checks += _expand("cuda", "torch_need_autocast_promote", L.torch_need_autocast_promote, torch, fp16, f32)
    checks += _expand("cuda", "torch_expect_builtin_promote", [e[:2] for e in L.torch_expect_builtin_promote],
                      torch, fp16, lambda e, a: "")
    out_types = {e[0]: dtype_name(e[2]) for e in L.torch_expect_builtin_promote}
    for c in checks:
        if c.list_name == "torch_expect_builtin_promote":
            c.expected = out_types[c.op]
    checks += _expand("cuda", "nn_fp16", L.nn_fp16, torch._C._nn, both, low)
    checks += _expand("cuda", "nn_fp32", L.nn_fp32, torch._C._nn, fp16, f32)
    checks += _expand("cuda", "linalg_fp16", L.linalg_fp16, torch._C._linalg, fp16, low)
    checks += _expand("cuda", "methods_fp16", L.methods_fp16, None, fp16, low)
    checks += _expand("cuda", "methods_fp32", L.methods_fp32, None, fp16, f32)
    m_types = {e[0]: dtype_name(e[2]) for e in L.methods_expect_builtin_promote}
    m = _expand("cuda", "methods_expect_builtin_promote", [e[:2] for e in L.methods_expect_builtin_promote],
                None, fp16, lambda e, a: m_types[e[0]])
    checks += m
    for op, args, module in L.banned:
        checks.append(Check("cuda", "banned", op, f"{module.__name__}.{op}", torch.float16, "RuntimeError",
                            call=(module, op, args, {})))
    return checks


def _invoke(call, cast_to=None):
    module, op, args, kwargs = call

    def cast(v):
        if isinstance(v, torch.Tensor):
            return v.to(cast_to) if (cast_to is not None and v.is_floating_point()) else v
        if isinstance(v, (list, tuple)):
            return type(v)(cast(x) for x in v)
        return v

    args = cast(args)
    if module is None:
        return getattr(args[0], op)(*args[1:], **kwargs)
    return getattr(module, op)(*args, **kwargs)


def _first_tensor(out):
    return next(tensors(out), None)


def _outcome(fn) -> tuple[str, Any]:
    try:
        out = fn()
    except NotImplementedError as exc:
        return _NOT_RUNNABLE, exc
    except Exception as exc:  # noqa: BLE001 - the error type is the outcome
        return type(exc).__name__, exc
    t = _first_tensor(out)
    return (dtype_name(t.dtype) if t is not None else f"{type(out).__name__} (not a tensor)"), out


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b) or
                                                                   torch.equal(a.isnan(), b.isnan()) and
                                                                   torch.equal(a.nan_to_num(), b.nan_to_num()))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def run(policy: str, only: set[str] | None = None) -> Report:
    """Replay torch's lists for ``policy`` ('cpu' or 'cuda') through ``amp_edu.autocast`` on the CPU.

    ``only`` restricts the run to some lists (e.g. ``{"nn_16"}``).
    """
    if policy not in ("cpu", "cuda"):
        raise ValueError(f"policy must be 'cpu' or 'cuda', got {policy!r}")
    checks = cpu_checks() if policy == "cpu" else cuda_checks()
    if only is not None:
        checks = [c for c in checks if c.list_name in only]
    for c in checks:
        call = c.call
        with autocast("cpu", dtype=c.amp_dtype, policy=policy):
            c.ours, ours = _outcome(lambda: _invoke(call))
        if c.ours == "RuntimeError" and "CUDA" in str(ours) or "cudnn" in c.op:
            c.ours = _NOT_RUNNABLE
        if policy == "cpu":
            with torch.autocast("cpu", dtype=c.amp_dtype):
                c.reference, _ = _outcome(lambda: _invoke(call))
        elif c.ours in _DTYPE_NAMES or c.expected == "RuntimeError":
            c.reference = c.expected
        else:   # a non-tensor result (torch.equal -> bool): torch's tests check no dtype; compare the value
            c.reference, plain = _outcome(lambda: _invoke(call))
            c.bitwise = _same(ours, plain)
            continue
        if c.runnable and c.ours not in ("RuntimeError",) and c.expected not in ("bool", "RuntimeError"):
            run_as = getattr(torch, c.expected) if c.list_name not in (
                "torch_expect_builtin_promote", "methods_expect_builtin_promote") else torch.float32
            _, control = _outcome(lambda: _invoke(call, cast_to=run_as))
            c.bitwise = _same(ours, control)
    return Report(policy, checks)


def by_list(report: Report) -> dict[str, tuple[int, int]]:
    """``{list_name: (agreeing, runnable)}``."""
    out: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for c in report.runnable:
        out[c.list_name][0] += c.agrees
        out[c.list_name][1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


# ----------------------------------------------------------------------------------------------
# Beyond the lists: everyday calls, compared with torch's CPU autocast.

# Everyday calls whose outcome under amp_edu.autocast is known to differ from torch.autocast("cpu"),
# with the reason. A test checks that exactly these differ, so a fix or a regression is noticed.
KNOWN_GAPS = {
    "nn.TransformerEncoderLayer(eval, no_grad)":
        "the fast path (torch._transformer_encoder_layer_fwd) is skipped whenever any "
        "TorchFunctionMode is active (has_torch_function), so amp_edu runs the composite path: fp32 "
        "after the last LayerNorm, where torch's fused kernel returns bf16. amp_edu warns when it "
        "runs multi_head_attention_forward where torch may take the fast path.",
}


def everyday_calls() -> dict[str, Any]:
    """``{name: zero-argument call}``: common layers, functions, matmuls and tensor ops on small
    CPU tensors (fp32, and bf16 where a call's name says so)."""
    t = _EverydayTensors(torch.Generator().manual_seed(0))
    return {**_layer_calls(t), **_function_calls(t), **_matmul_calls(t), **_tensor_op_calls(t)}


class _EverydayTensors:
    """The inputs of the everyday calls: ``x`` (4, 8) and its bf16 twin ``xb``, an image batch
    ``img`` (2, 3, 8, 8), a bf16 volume ``vol``, a sequence batch ``q`` (2, 5, 8), class targets
    ``tgt``, and :meth:`r` for a fresh drawn tensor."""

    def __init__(self, g: torch.Generator):
        self.g = g
        self.x, self.xb = self.r(4, 8), self.r(4, 8, dtype=torch.bfloat16)
        self.img, self.vol = self.r(2, 3, 8, 8), self.r(1, 2, 4, 4, 4, dtype=torch.bfloat16)
        self.tgt = torch.tensor([0, 1, 2, 3])
        self.q = self.r(2, 5, 8)

    def r(self, *shape, dtype=torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=self.g).to(dtype)


def _layer_calls(t: _EverydayTensors) -> dict[str, Any]:
    """``nn`` modules: linear, convolutions, norms, embedding, attention, recurrent layers."""
    nn, b = torch.nn, torch.bfloat16
    x, xb, img, q, tgt = t.x, t.xb, t.img, t.q, t.tgt
    return {
        "nn.Linear": lambda: nn.Linear(8, 4)(x),
        "nn.Conv2d": lambda: nn.Conv2d(3, 4, 3)(img),
        "nn.ConvTranspose2d": lambda: nn.ConvTranspose2d(3, 4, 3)(img),
        "nn.LayerNorm(bf16 input)": lambda: nn.LayerNorm(8)(xb),
        "nn.GroupNorm(bf16 input)": lambda: nn.GroupNorm(1, 3)(img.to(b)),
        "nn.BatchNorm2d": lambda: nn.BatchNorm2d(3)(img),
        "nn.Embedding": lambda: nn.Embedding(10, 4)(tgt),
        "nn.MultiheadAttention": lambda: nn.MultiheadAttention(8, 2, batch_first=True)(q, q, q)[0],
        "nn.TransformerEncoderLayer": lambda: nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True)(q),
        "nn.TransformerEncoderLayer(eval, no_grad)": lambda: _no_grad(
            nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True).eval(), q),
        "nn.MultiheadAttention(eval, no_grad)": lambda: _no_grad(
            nn.MultiheadAttention(8, 2, batch_first=True).eval(), q, q, q)[0],
        "nn.GRU": lambda: nn.GRU(8, 4)(q)[0],
        "nn.RNN": lambda: nn.RNN(8, 4)(q)[0],
        "nn.LSTMCell": lambda: nn.LSTMCell(8, 4)(x)[0],
        "nn.GRUCell": lambda: nn.GRUCell(8, 4)(x),
        "nn.RNNCell": lambda: nn.RNNCell(8, 4)(x),
        "nn.Bilinear": lambda: nn.Bilinear(8, 8, 3)(x, x),
    }


def _function_calls(t: _EverydayTensors) -> dict[str, Any]:
    """``torch.nn.functional``: attention, activations, losses, padding, pooling, distances."""
    F, b = torch.nn.functional, torch.bfloat16
    xb, img, vol, q, tgt = t.xb, t.img, t.vol, t.q, t.tgt
    return {
        "F.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, q, q),
        "F.softmax(bf16)": lambda: F.softmax(xb, -1),
        "F.log_softmax(bf16)": lambda: F.log_softmax(xb, -1),
        "F.gelu(bf16)": lambda: F.gelu(xb),
        "F.dropout(bf16)": lambda: F.dropout(xb, 0.0),
        "F.cross_entropy(bf16)": lambda: F.cross_entropy(xb, tgt),
        "F.nll_loss(bf16)": lambda: F.nll_loss(xb, tgt),
        "F.mse_loss(bf16)": lambda: F.mse_loss(xb, xb),
        "F.l1_loss(bf16)": lambda: F.l1_loss(xb, xb),
        "F.binary_cross_entropy(bf16)": lambda: F.binary_cross_entropy(xb.sigmoid(), xb.sigmoid()),
        "F.binary_cross_entropy_with_logits(bf16)": lambda: F.binary_cross_entropy_with_logits(xb, xb.sigmoid()),
        "F.kl_div(bf16)": lambda: F.kl_div(xb, xb, reduction="batchmean"),
        "F.pad reflect(bf16)": lambda: F.pad(xb, (1, 1), mode="reflect"),
        "F.pad constant(bf16)": lambda: F.pad(xb, (1, 1)),
        "F.interpolate(bf16)": lambda: F.interpolate(img.to(b), scale_factor=2),
        "F.avg_pool3d(bf16)": lambda: F.avg_pool3d(vol, 2),
        "F.max_pool3d(bf16)": lambda: F.max_pool3d(vol, 2),
        "F.max_pool2d(bf16)": lambda: F.max_pool2d(img.to(b), 2),
        "F.normalize(bf16)": lambda: F.normalize(xb),
        "F.cosine_similarity(bf16)": lambda: F.cosine_similarity(xb, xb),
        "F.pairwise_distance(bf16)": lambda: F.pairwise_distance(xb, xb),
    }


def _matmul_calls(t: _EverydayTensors) -> dict[str, Any]:
    """Matrix products, single ops and the C++ composites that reach ``mm`` inside."""
    x, q, r = t.x, t.q, t.r
    return {
        "torch.mm": lambda: torch.mm(x, x.t()),
        "x @ w": lambda: x @ x.t(),
        "torch.bmm": lambda: torch.bmm(q, q.transpose(1, 2)),
        "torch.baddbmm": lambda: torch.baddbmm(r(2, 5, 5), q, q.transpose(1, 2)),
        "torch.einsum (contracting)": lambda: torch.einsum("bij,bkj->bik", q, q),
        "torch.einsum (outer product)": lambda: torch.einsum("i,j->ij", x[0], x[1]),
        "torch.chain_matmul": lambda: torch.chain_matmul(x, x.t()),
        "torch.linalg.multi_dot": lambda: torch.linalg.multi_dot([x, x.t(), x]),
        "torch.matrix_power": lambda: torch.matrix_power(r(3, 3), 2),
        "torch.inner": lambda: torch.inner(x, x),
        "torch.tensordot": lambda: torch.tensordot(x, x.t(), 1),
        "torch.einsum (three operands)": lambda: torch.einsum("ij,jk,kl->il", x, x.t(), x),
    }


def _tensor_op_calls(t: _EverydayTensors) -> dict[str, Any]:
    """Tensor ops: joining mixed dtypes, pointwise, reductions, norms, linear algebra, FFT."""
    b = torch.bfloat16
    x, xb, r = t.x, t.xb, t.r
    return {
        "torch.cat(fp32, bf16)": lambda: torch.cat([x, xb]),
        "torch.cat(bf16, fp32)": lambda: torch.cat([xb, x]),
        "torch.stack(bf16, bf16)": lambda: torch.stack([xb, xb]),
        "torch.exp(bf16)": lambda: torch.exp(xb),
        "torch.sum(bf16)": lambda: xb.sum(),
        "torch.prod(bf16)": lambda: xb.prod(),
        "torch.cumsum(bf16)": lambda: xb.cumsum(0),
        "torch.norm(bf16)": lambda: torch.norm(xb),
        "torch.linalg.norm(bf16)": lambda: torch.linalg.norm(xb),
        "torch.cdist(bf16)": lambda: torch.cdist(xb, xb),
        "torch.linalg.inv(bf16)": lambda: torch.linalg.inv(r(3, 3, dtype=b) + 3 * torch.eye(3, dtype=b)),
        "torch.fft.rfft(bf16)": lambda: torch.fft.rfft(xb),
        "torch.quantile(bf16)": lambda: torch.quantile(xb, 0.5),
        "torch.where": lambda: torch.where(x > 0, x, xb),
        "x + bf16": lambda: x + xb,
    }


def _no_grad(module, *args):
    with torch.no_grad():
        return module(*args)


@dataclass
class EverydayResult:
    name: str
    torch_dtype: str
    ours_dtype: str

    @property
    def agrees(self) -> bool:
        return self.torch_dtype == self.ours_dtype


def everyday(dtype: torch.dtype = torch.bfloat16) -> list[EverydayResult]:
    """Run :func:`everyday_calls` under torch's CPU autocast and ours (CPU policy)."""
    out = []
    for name, fn in everyday_calls().items():
        torch.manual_seed(0)
        with torch.autocast("cpu", dtype=dtype):
            t, _ = _outcome(fn)
        torch.manual_seed(0)
        with autocast("cpu", dtype=dtype):
            o, _ = _outcome(fn)
        out.append(EverydayResult(name, t, o))
    return out
