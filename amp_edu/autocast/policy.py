"""Which ops autocast casts, and how: the op tables and the cast decision.

PyTorch's autocast is a table plus five small rules. Every op it knows falls in one category:

``lower``      cast floating inputs to the region's low-precision dtype (fp16/bf16): matmuls,
               convolutions, linear, attention, RNN cells. They are fast on Tensor Cores / AMX and
               accumulate in fp32 inside the kernel, so low-precision *inputs* cost little accuracy.
``fp32``       cast floating inputs to float32: exp/log/pow, norms, most losses — ops whose
               result can overflow fp16 (exp(12) > 65504) or needs more than 11 bits to be right.
``fp32_dtype`` leave the inputs alone but ask for a float32 *result* by passing ``dtype=float32``
               (softmax, log_softmax, sum, prod, cumsum, vector/matrix norms): the kernel reads fp16
               and accumulates and writes fp32. An explicit ``dtype=`` from the caller wins.
               (PyTorch calls this fp32_set_opt_dtype, and fp32_append_dtype for ``norm``.)
``promote``    ops that need all inputs in one dtype (``dot``, ``cat`` on the CPU, ``index_put``):
               cast every floating input to the *widest* one present — float32 if any input is.
``banned``     ``binary_cross_entropy`` under the CUDA policy: unsafe in fp16, so it raises.

Every op not in a table runs untouched, in whatever dtype its inputs have. Autocast never casts
outputs back: a matmul's fp16 output stays fp16 until an op on the fp32 list (or promotion by
ordinary type promotion, ``fp32 + fp16 -> fp32``) takes it up again.

Eligibility (``aten/src/ATen/autocast_mode.h``, ``is_eligible``): a tensor is cast only if it is
floating point, not float64, and on the autocast device. Integer, bool, float64 and other-device
tensors pass through. Only the out-of-place overloads are registered, so in-place ops (``add_``,
``x[i] = v``) and ``out=`` calls are never touched.

Sources. The tables are the registrations in PyTorch's dispatcher for the ``AutocastCUDA`` and
``AutocastCPU`` keys (``aten/src/ATen/autocast_mode.cpp`` and the ``AT_FORALL_*`` lists of
``autocast_mode.h``), which a test compares with the installed torch
(``torch._C._dispatch_get_registrations_for_dispatch_key``). Op names are ATen names; a Python
callable maps to one through its ``__name__`` (``torch.mm``, ``Tensor.mm``, ``torch._C._nn.linear``
and ``torch.linalg.vecdot``, whose name is ``linalg_vecdot``).

Composite ops. PyTorch's autocast works in the dispatcher, so an op that is *not* registered but
is implemented by calling ops that are (a "composite") gets autocast behaviour from its parts. We
work above autograd at the Python level: Python-level composites (``F.softmax``, ``F.normalize``,
``nn.MultiheadAttention``) are opened up by the mode (see ``mode.py``), but C++ composites are
opaque to us. The mode lets torch's own dispatcher-level autocast cast their parts when the region
uses the device's own table (``mode.py`` explains how, and why that is not torch doing *our*
casting); the ones that matter in practice are also listed in ``COMPOSITES`` with the category
their parts give them, so the casts happen at the composite's entry where we can see them (and
under a foreign policy, where torch's casting of the parts is switched off). Known differences
that remain (each measured in the tests):

* ``cross_entropy_loss`` (CUDA policy): torch runs ``log_softmax`` in the input dtype and
  ``nll_loss`` in fp32; we cast the logits to fp32 first. Same fp32 result dtype, slightly *more*
  accurate numbers here. ``pairwise_distance`` likewise (the difference ``x1 - x2`` in fp32).
* Under a foreign policy (``policy="cuda"`` on CPU tensors) the parts of unlisted C++ composites
  (``torch.matrix_power``, ``torch.inner``, the RNN ops, ...) run uncast; ``routes.COMPOSITE_OPS``
  warn once each, naming the op.
* Named-tensor (Dimname) overloads are not registered in torch; we treat them like the others.
* The weight cache is keyed by tensor *and* dtype (torch keys by tensor only, so a nested region
  with a different low-precision dtype could be handed the other dtype's cached copy).
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch

from ..tree import tensors
from .cache import _caster_to, plain_cast

__all__ = [
    "LOWER", "FP32", "FP32_DTYPE", "PROMOTE", "BANNED", "POLICY_KINDS",
    "POLICIES", "REGISTERED", "COMPOSITES", "ALIASES", "BCE_BANNED_MESSAGE", "ELIGIBLE_DTYPES",
    "op_name", "kind_of", "lookup", "CONDITIONAL", "cast_arguments", "is_eligible", "promote_dtype", "has_explicit_dtype", "decide",
]

LOWER, FP32, FP32_DTYPE, PROMOTE, BANNED = "lower", "fp32", "fp32_dtype", "promote", "banned"
POLICY_KINDS = (LOWER, FP32, FP32_DTYPE, PROMOTE, BANNED)


def _kinds(**groups: str) -> dict[str, str]:
    """``_kinds(lower="mm bmm", fp32="exp")`` -> ``{"mm": "lower", "bmm": "lower", "exp": "fp32"}``."""
    table: dict[str, str] = {}
    for kind, names in groups.items():
        for name in names.split():
            if name in table:
                raise ValueError(f"{name} listed twice")
            table[name] = kind
    return table


# AutocastCUDA (AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE,
# AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE, AT_FORALL_PROMOTE, cudnn convolutions, the ban).
_CUDA = _kinds(
    lower="""_convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d
        conv_transpose3d convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear
        addbmm baddbmm bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell
        lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention
        scaled_dot_product_attention cudnn_convolution cudnn_convolution_transpose""",
    fp32="""acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow
        softplus layer_norm native_layer_norm rms_norm group_norm frobenius_norm nuclear_norm
        cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d
        hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss
        multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss
        binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp upsample_nearest1d
        _upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d
        _upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa
        upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa""",
    fp32_dtype="""prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm sum
        norm""",
    promote="""addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot
        scatter_add""",
    banned="binary_cross_entropy",
)

# AutocastCPU (aten/src/ATen/autocast_mode.cpp, TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)).
_CPU = _kinds(
    lower="""conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm _addmm_activation addbmm linear
        _convolution matmul conv_tbc mkldnn_rnn_layer conv_transpose1d conv_transpose2d
        conv_transpose3d prelu scaled_dot_product_attention _native_multi_head_attention""",
    fp32="""avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft cdist
        grid_sampler_2d _grid_sampler_2d_cpu_fallback grid_sampler_3d trace view_as_complex cholesky
        cholesky_inverse cholesky_solve inverse lu_solve orgqr ormqr pinverse max_pool3d
        max_unpool2d max_unpool3d adaptive_avg_pool3d reflection_pad1d reflection_pad2d
        replication_pad1d replication_pad2d replication_pad3d mse_loss cosine_embedding_loss
        nll_loss nll_loss2d hinge_embedding_loss poisson_nll_loss smooth_l1_loss cross_entropy_loss
        l1_loss huber_loss margin_ranking_loss soft_margin_loss triplet_margin_loss
        multi_margin_loss ctc_loss kl_div multilabel_margin_loss binary_cross_entropy_with_logits
        fft_fft fft_ifft fft_fft2 fft_ifft2 fft_fftn fft_ifftn fft_rfft fft_irfft fft_rfft2
        fft_irfft2 fft_rfftn fft_irfftn fft_hfft fft_ihfft linalg_cond linalg_matrix_rank
        linalg_solve linalg_cholesky linalg_svdvals linalg_eigvals linalg_eigvalsh linalg_inv
        linalg_householder_product linalg_tensorinv linalg_tensorsolve
        fake_quantize_per_tensor_affine geqrf _lu_with_info qr svd triangular_solve
        fractional_max_pool2d fractional_max_pool3d adaptive_max_pool3d
        multilabel_margin_loss_forward linalg_qr linalg_cholesky_ex linalg_svd linalg_eig
        linalg_eigh linalg_lstsq linalg_inv_ex""",
    promote="stack cat index_copy",
)

# C++ composites that are not registered themselves but whose parts are, so torch's result dtype
# follows from the parts. (policy, op) -> category.
COMPOSITES: dict[str, dict[str, str]] = {
    "cuda": {
        "cross_entropy_loss": FP32,   # log_softmax(x, dtype=x.dtype) then nll_loss (fp32)
        "nll_loss_nd": FP32,          # F.nll_loss -> nll_loss / nll_loss2d (fp32)
        "linalg_norm": FP32_DTYPE,    # -> linalg_vector_norm / linalg_matrix_norm (fp32_dtype)
        "pairwise_distance": FP32,    # -> norm(x1 - x2 + eps) (fp32_dtype)
    },
    "cpu": {
        "nll_loss_nd": FP32,          # F.nll_loss -> nll_loss / nll_loss2d (fp32)
        "pad": FP32,                  # reflect (1d/2d) and replicate -> *_pad kernels (fp32), see _pad_hits_fp32
        "linalg_multi_dot": LOWER,    # -> mm (lower)
        "chain_matmul": LOWER,        # -> linalg_multi_dot -> mm, when given two or more matrices
        "einsum": LOWER,              # -> bmm when two operands share a summed index, see _einsum_contracts
    },
}

# ATen aliases: CompositeImplicit ops that just call the op they alias (torch.arcsin -> asin).
ALIASES = {
    "arccos": "acos", "arcsin": "asin", "arctan2": "atan2", "linalg_matmul": "matmul",
    "special_expm1": "expm1", "special_erfinv": "erfinv", "special_log1p": "log1p",
    "special_logsumexp": "logsumexp", "special_softmax": "softmax",
    "special_log_softmax": "log_softmax",
    # Python operator spellings of listed ops (Tensor.__matmul__ is the matmul op)
    "__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow",
}

#: per policy, the ops torch registers for its autocast dispatch key (POLICIES less COMPOSITES)
REGISTERED: dict[str, dict[str, str]] = {"cuda": _CUDA, "cpu": _CPU}

POLICIES: dict[str, dict[str, str]] = {
    "cuda": {**_CUDA, **COMPOSITES["cuda"]},
    "cpu": {**_CPU, **COMPOSITES["cpu"]},
}

BCE_BANNED_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.")


def _is_deprecated_convolution(args, kwargs) -> bool:
    """The CPU policy registers only ``_convolution.deprecated`` (12 arguments, no allow_tf32)."""
    return len(args) + len(kwargs) == 12


def _pad_hits_fp32(args, kwargs) -> bool:
    """``pad`` reaches reflection_pad1d/2d or replication_pad1d/2d/3d, which the CPU policy lists."""
    names = ("input", "pad", "mode")
    got = dict(zip(names, args), **kwargs)
    mode, pad = got.get("mode", "constant"), got.get("pad", ())
    return mode == "replicate" or (mode == "reflect" and len(pad) in (2, 4))


def _einsum_contracts(args, kwargs) -> bool:
    """Two-operand einsum that sums over a shared index (torch's sumproduct_pair then calls bmm)."""
    if len(args) != 2 or not isinstance(args[0], str) or len(args[1]) != 2:
        return False
    eq = args[0].replace(" ", "").replace("...", "")
    lhs, _, out = eq.partition("->")
    a, _, b = lhs.partition(",")
    if "->" not in eq:
        out = "".join(c for c in sorted(set(a + b)) if (a + b).count(c) == 1)
    return any(c in b and c not in out for c in set(a))


def _two_or_more_matrices(args, kwargs) -> bool:
    mats = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    return len(mats) >= 2


# (policy, op) -> predicate(args, kwargs): the entry applies only when the call matches it.
_CONDITIONS: dict[tuple[str, str], Callable[[tuple, dict], bool]] = {
    ("cpu", "_convolution"): _is_deprecated_convolution,
    ("cpu", "pad"): _pad_hits_fp32,
    ("cpu", "einsum"): _einsum_contracts,
    ("cpu", "chain_matmul"): _two_or_more_matrices,
}

#: policy -> the ops whose table entry applies only to some calls (see ``_CONDITIONS``)
CONDITIONAL = {p: frozenset(op for q, op in _CONDITIONS if q == p) for p in ("cuda", "cpu")}

_KNOWN = set(_CUDA) | set(_CPU) | set(COMPOSITES["cuda"]) | set(COMPOSITES["cpu"])


def op_name(func: Any) -> str | None:
    """The ATen op name of a torch callable, or None if no policy lists it.

    >>> op_name(torch.mm), op_name(torch.Tensor.mm), op_name(torch.linalg.vecdot), op_name(torch.arcsin)
    ('mm', 'mm', 'linalg_vecdot', 'asin')
    >>> op_name(torch.ops.aten.mm.default), op_name(torch.ops.aten.mm)
    ('mm', 'mm')
    """
    name = getattr(func, "__name__", None)
    if not isinstance(name, str):
        return None
    if hasattr(func, "overloadpacket"):          # torch.ops.aten.mm.default is named "mm.default"
        name = name.split(".")[0]
    name = ALIASES.get(name, name)
    return name if name in _KNOWN else None


def kind_of(policy: str, name: str, args: tuple = (), kwargs: dict | None = None) -> str | None:
    """The category of op ``name`` under ``policy`` ('cuda' or 'cpu'), or None if untouched."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {policy!r}")
    kind = POLICIES[policy].get(ALIASES.get(name, name))
    cond = _CONDITIONS.get((policy, name))
    if kind is not None and cond is not None and not cond(args, kwargs or {}):
        return None
    return kind


def lookup(policy: str, name: str, args: tuple, kwargs: dict) -> str | None:
    """:func:`kind_of` without the checks, for the mode's hot path: ``policy`` must be a key of
    ``POLICIES`` and ``name`` an ATen name with its alias already resolved (what ``op_name`` returns)."""
    kind = POLICIES[policy].get(name)
    if kind is not None:
        cond = _CONDITIONS.get((policy, name))
        if cond is not None and not cond(args, kwargs):
            return None
    return kind


#: floating dtypes autocast may cast: every floating point dtype except float64
ELIGIBLE_DTYPES = frozenset(d for d in vars(torch).values()
                            if isinstance(d, torch.dtype) and d.is_floating_point and d is not torch.float64)
# "is this tensor on device_type?" without building a torch.device per tensor (the hot path)
_ON_DEVICE = {"cpu": operator.attrgetter("is_cpu"), "cuda": operator.attrgetter("is_cuda")}
_is_cpu = _ON_DEVICE["cpu"]


def _on_device(device_type: str):
    return _ON_DEVICE.get(device_type) or (lambda t: t.device.type == device_type)


def is_eligible(t: Any, device_type: str) -> bool:
    """Autocast casts ``t`` only if it is a floating tensor, not float64, on ``device_type``."""
    return isinstance(t, torch.Tensor) and t.dtype in ELIGIBLE_DTYPES and _on_device(device_type)(t)


def _cast_tree(obj, to: torch.dtype, on_device, cast):
    """``obj`` with every eligible tensor not already of dtype ``to`` replaced by ``cast(t)``,
    looking inside lists and tuples (and keeping their type)."""
    if isinstance(obj, torch.Tensor):
        dt = obj.dtype
        if dt is not to and dt in ELIGIBLE_DTYPES and on_device(obj):
            return cast(obj)
        return obj
    if isinstance(obj, (list, tuple)):
        return type(obj)([_cast_tree(item, to, on_device, cast) for item in obj])
    return obj


def cast_arguments(args: tuple, kwargs: dict, to: torch.dtype, device_type: str, cast=None):
    """``(args, kwargs)`` with every eligible tensor not already of dtype ``to`` replaced by
    ``cast(t)`` (default ``t.to(to)``), looking inside lists and tuples: the work of the ``lower``
    and ``fp32`` categories. :func:`decide` calls it, and so does the mode's hot path, which is
    why the common case (tensors on the CPU, none nested) is written out in one comprehension."""
    if cast is None:
        cast = _caster_to(to)
    if device_type != "cpu":
        return _cast_all(args, kwargs, to, _on_device(device_type), cast)
    eligible = ELIGIBLE_DTYPES
    args = tuple([(cast(a) if (dt := a.dtype) is not to and dt in eligible and a.is_cpu else a)
                  if isinstance(a, torch.Tensor) else
                  _cast_tree(a, to, _is_cpu, cast) if isinstance(a, (list, tuple)) else a
                  for a in args])
    if kwargs:
        for v in kwargs.values():
            if isinstance(v, (torch.Tensor, list, tuple)):
                return args, {k: _cast_tree(v, to, _is_cpu, cast) for k, v in kwargs.items()}
    return args, kwargs


def _cast_all(args: tuple, kwargs: dict, to: torch.dtype, on_device, cast):
    """:func:`_cast_tree` over the positional and keyword arguments (tensors checked inline)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            dt = a.dtype
            if dt is not to and dt in ELIGIBLE_DTYPES and on_device(a):
                a = cast(a)
        elif isinstance(a, (list, tuple)):
            a = _cast_tree(a, to, on_device, cast)
        out.append(a)
    if not kwargs:
        return tuple(out), kwargs
    return tuple(out), {k: _cast_tree(v, to, on_device, cast) for k, v in kwargs.items()}


def promote_dtype(args, kwargs, device_type: str, low_dtype: torch.dtype) -> torch.dtype:
    """The dtype torch's ``at::autocast::prioritize`` picks, reading the arguments in order.

    Start from ``low_dtype``; float64 tensors are ignored (they are not eligible and pass through); a
    float32 tensor makes the result float32 from then on; a low-precision tensor of another dtype
    (bf16 in an fp16 region) is an error -- but only if no float32 tensor came before it, exactly
    as in torch (``cat([fp32, fp16])`` in a bf16 region is float32, ``cat([fp16, fp32])`` raises).
    Keyword tensors are read after the positional ones, in the order given.
    """
    widest = low_dtype
    on_device = _on_device(device_type)
    for t in tensors((args, tuple(kwargs.values()))):
        dt = t.dtype
        if dt not in ELIGIBLE_DTYPES or not on_device(t) or widest is torch.float32:
            continue
        if dt is torch.float32:
            widest = torch.float32
        elif dt is not widest:
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return widest


def has_explicit_dtype(args, kwargs) -> bool:
    """Did the caller choose the result dtype (``dtype=`` keyword or a positional torch.dtype)?"""
    return kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args[1:])


def _first_tensor(args, kwargs):
    if args:
        return args[0]
    return kwargs.get("input", kwargs.get("self"))


def decide(kind: str, args: tuple, kwargs: dict, *, device_type: str, dtype: torch.dtype,
           cast: Callable[[torch.Tensor, torch.dtype], torch.Tensor] | None = None):
    """Apply category ``kind`` to one call: the ``(args, kwargs)`` to run the op with.

    ``dtype`` is the region's low-precision dtype; ``cast(t, to)`` performs one cast (the weight
    cache plugs in here; default ``t.to(to)``). Raises RuntimeError for a banned op.
    """
    cast = cast or plain_cast
    if kind in (LOWER, FP32, PROMOTE):
        to = (dtype if kind == LOWER else torch.float32 if kind == FP32
              else promote_dtype(args, kwargs, device_type, dtype))
        return cast_arguments(args, kwargs, to, device_type, lambda t: cast(t, to))
    if kind == FP32_DTYPE:
        # ask the kernel for a float32 result unless the caller chose a dtype
        if has_explicit_dtype(args, kwargs) or not is_eligible(_first_tensor(args, kwargs), device_type):
            return args, kwargs
        return args, {**kwargs, "dtype": torch.float32}
    if kind == BANNED:
        raise RuntimeError(BCE_BANNED_MESSAGE)
    raise ValueError(f"kind must be one of {POLICY_KINDS}, got {kind!r}")
