"""The random Hadamard transform (RHT): spread a block's outlier over its 16 values before NVFP4.

An NVFP4 block of 16 values shares one scale, set by its largest magnitude (the block amax):
``scale = amax / 6`` so that the amax lands on e2m1's top value, 6. e2m1 has only the
magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}, so every value of the block below about ``amax / 24`` (a
quarter of the smallest step, 0.5, in units of the scale) rounds to 0 and the others keep about
one significant bit. One outlier in a block therefore costs the other 15 values nearly everything.

A Hadamard matrix mixes the block first. The 16×16 Sylvester matrix ``H`` (entries ±1,
``H Hᵀ = 16 I``) divided by ``sqrt(16) = 4`` is orthogonal, and each output is ``±x_1 ± x_2 ...
± x_16`` over 4: an outlier ``A`` alone becomes 16 values of magnitude ``A / 4``, and the small
values are summed in with random-looking signs. The block amax falls relative to the block's
other values (its root-mean-square is unchanged, the transform being orthogonal), so fewer of
them round to 0. That is for a block with an outlier; a block of Gaussian-like values comes out
about as peaked as it went in (lesson 10 measures both). A diagonal of random signs ``D`` first (``M = D H / 4``) makes the mixing
differ from a fixed pattern that real data could line up with.

Because ``M`` is orthogonal, applying it block-wise along a GEMM's reduction dimension to *both*
operands leaves the product unchanged in exact arithmetic::

    (A Mb)(B Mb)ᵀ = A Mb Mbᵀ Bᵀ = A Bᵀ        Mb = I ⊗ M, one M per 16 along K

so only the quantization sees the transformed values; the GEMM needs no inverse transform.

What Transformer Engine does (``NVFP4BlockScaling``; TE at commit d0067d0):

* RHT only on the weight-gradient GEMM ``dW = dYᵀ · X``: the column-wise quantization of the
  input ``X`` and of the gradient ``dY``, whose reduction dimension is the tokens
  (``transformer_engine/common/recipe/__init__.py`` lines 593-609: ``random_hadamard_transform``
  is set for ``fp4_quant_fwd_inp`` and ``fp4_quant_bwd_grad``, "only applied to column-wise usage
  so that it can be used for wgrad GEMM"; the docs, ``docs/features/low_precision_training/
  nvfp4/nvfp4.rst`` lines 116-118, call that GEMM "particularly sensitive to quantization
  errors"). The reference quantizer transforms ``tensor.t()`` (``reference_nvfp4.py`` lines
  870-874) and takes the column-wise per-tensor amax *after* the transform (lines 891-897).
* Hadamard size 16, the NVFP4 block (``transformer_engine/pytorch/tensor/nvfp4_tensor.py``
  lines 62-91, which writes the Sylvester matrix out and multiplies it by ``1 / sqrt(16)``).
* The sign vector is *fixed*, one for all layers and all steps, hard-coded in
  ``get_wgrad_sign_vector`` (``nvfp4_tensor.py`` lines 49-59); the docs (lines 152-153): "a
  single random sign vector is shared across all linear layers throughout training. In the
  implementation, this vector is fixed". The matrix is ``diag(signs) @ H / 4`` (``get_rht_matrix``,
  lines 94-103), stored in bf16, where its entries ±0.25 are exact; the reference applies it as
  ``x.view(-1, 16) @ M`` (``reference_nvfp4.py`` lines 421-448).

torchao 0.18's NVFP4 training prototype (``torchao/prototype/moe_training/nvfp4_training/``,
Triton kernels for Blackwell) builds the same matrix (``hadamard_utils.py`` lines 111-129,
``get_rht_matrix``: equal to :func:`rht_matrix` for the same signs, ``tests/recipes/test_fp4.py``)
and applies it to the same two operands, but by default draws a random sign vector for each layer
(``nvfp4_training.py`` lines 86-93; ``get_wgrad_sign_vector``, ``hadamard_utils.py`` lines 66-74).

:func:`rht_matrix` builds that matrix (float32 by default, float64 for exact checks), with TE's
signs (:data:`TE_SIGNS`) or any others (:func:`random_signs` draws some from a generator), and
:func:`rht` applies it block-wise along the last dimension. This is an emulation: TE fuses the
transform into its quantization kernel; here it is a float32 matmul.
"""

from __future__ import annotations

import torch

from ..validate import check_int

__all__ = ["HADAMARD_SIZE", "TE_SIGNS", "sylvester", "random_signs", "rht_matrix", "rht"]

HADAMARD_SIZE = 16      # one NVFP4 block
#: Transformer Engine's fixed sign vector (``get_wgrad_sign_vector``, ``nvfp4_tensor.py`` lines 49-59).
TE_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def sylvester(n: int = HADAMARD_SIZE, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The ``n × n`` Sylvester Hadamard matrix (entries ±1, ``H Hᵀ = n I``): ``H_1 = [1]``,
    ``H_2n = [[H, H], [H, -H]]``; ``n`` a power of two."""
    n = check_int(n, "n", min=1)
    if n & (n - 1):
        raise ValueError(f"a Sylvester Hadamard matrix has a power-of-two size, got n={n}")
    h = torch.ones(1, 1, dtype=dtype)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], dim=1), torch.cat([h, -h], dim=1)], dim=0)
    return h


def _check_signs(signs) -> tuple:
    s = tuple(signs.tolist()) if isinstance(signs, torch.Tensor) else signs
    if not isinstance(s, (tuple, list)) or len(s) != HADAMARD_SIZE or any(v not in (1, -1) for v in s):
        raise ValueError(f"signs must be {HADAMARD_SIZE} values, each +1 or -1, got {signs!r}")
    return tuple(int(v) for v in s)


def random_signs(generator: torch.Generator) -> tuple:
    """A fresh vector of 16 random ±1 signs drawn from ``generator`` (TE uses the fixed
    :data:`TE_SIGNS` instead)."""
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    bits = torch.randint(0, 2, (HADAMARD_SIZE,), generator=generator, device=generator.device)
    return tuple(int(v) for v in (1 - 2 * bits).tolist())


def rht_matrix(signs=TE_SIGNS, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """``M = diag(signs) @ H_16 / 4``: orthogonal (``M Mᵀ = I``), TE's ``get_rht_matrix`` with
    its default signs."""
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    d = torch.tensor(_check_signs(signs), dtype=torch.float64)
    m = d.unsqueeze(1) * sylvester(HADAMARD_SIZE) / HADAMARD_SIZE ** 0.5     # exact: entries ±1/4
    return m.to(dtype=dtype, device=device)


def rht(x: torch.Tensor, matrix: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` transformed block-wise along its last dimension (a multiple of 16): each 16
    consecutive values ``v`` become ``v @ matrix`` (default: :func:`rht_matrix` with TE's signs,
    in ``x``'s dtype, float32 or float64). Apply it to both operands along their shared
    reduction dimension and the product is unchanged."""
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.float64):
        raise TypeError("x must be a float32 or float64 tensor"
                        + (f", got {x.dtype}" if isinstance(x, torch.Tensor) else f", got {type(x).__name__}"))
    if x.dim() < 1 or x.shape[-1] % HADAMARD_SIZE:
        raise ValueError(f"the transformed dimension (the last) must be a multiple of {HADAMARD_SIZE}, "
                         f"got shape {tuple(x.shape)}")
    m = rht_matrix(dtype=x.dtype, device=x.device) if matrix is None else matrix
    if not isinstance(m, torch.Tensor) or m.shape != (HADAMARD_SIZE, HADAMARD_SIZE):
        raise ValueError(f"matrix must be a {HADAMARD_SIZE}×{HADAMARD_SIZE} tensor (see rht_matrix)")
    return (x.reshape(-1, HADAMARD_SIZE) @ m.to(x.dtype)).reshape(x.shape)
