"""amp_edu.fp8.Float8Linear / convert_to_float8_training against torchao.float8, side by side.

Same weights, same inputs, same upstream gradient: the output and the input, weight and bias
gradients must be bit-identical (torch.equal) for torchao's three recipes ("tensorwise",
"rowwise", "rowwise_with_gw_hp"), in float32 and bfloat16, over shapes that include 3-D inputs,
one row, token counts that are not multiples of 16 (padded on both sides with pad_inner_dim, as
the GPU needs), no bias, inputs with outliers, zero inputs and mixed input/weight dtypes.

Feature sizes that are not multiples of 16 are refused by amp_edu (the GPU's _scaled_mm refuses
them too; torchao's CPU path accepts them because the CPU kernel does): that is tested as well.
"""

import copy
import dataclasses
import math

import pytest
import torch
from torch import nn

from amp_edu.fp8 import Float8Linear, convert_to_float8_training
from amp_edu.fp8 import Float8LinearConfig as ours_config
from amp_edu.fp8 import torchao_import
from amp_edu.fp8.torchao_import import import_torchao

STATUS = import_torchao("torchao.float8")
pytestmark = pytest.mark.skipif(not STATUS, reason=f"torchao unavailable: {STATUS}")

if STATUS:
    from torchao.float8 import Float8LinearConfig
    from torchao.float8 import convert_to_float8_training as ao_convert
    from torchao.float8.float8_linear import Float8Linear as AoFloat8Linear

RECIPES = ["tensorwise", "rowwise", "rowwise_with_gw_hp"]
# fp8 GEMMs on a GPU need compute capability 8.9+ (Ada, Hopper, ...); there the same check runs on
# the GPU's own _scaled_mm kernels (the CPU case runs everywhere).
_FP8_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
DEVICES = ["cpu"] + (["cuda"] if _FP8_GPU else [])
DTYPES = [torch.float32, torch.bfloat16]
SHAPES = [  # (input shape without the feature dim, in_features, out_features)
    ((16,), 32, 64), ((2, 7), 48, 80), ((1,), 16, 16), ((9,), 32, 16), ((3, 4, 5), 64, 16),
]


def _configs(recipe, pad):
    ours = ours_config.from_recipe_name(recipe, pad_inner_dim=pad)
    ao = Float8LinearConfig.from_recipe_name(recipe)
    if pad:
        ao = dataclasses.replace(ao, pad_inner_dim=True)
    return ours, ao


def _pair(in_f, out_f, bias, dtype, recipe, seed=0, device="cpu", pad=False):
    torch.manual_seed(seed)
    lin = nn.Linear(in_f, out_f, bias=bias).to(dtype).to(device)
    c_ours, c_ao = _configs(recipe, pad)
    ours = Float8Linear.from_float(copy.deepcopy(lin), config=c_ours)
    ao = AoFloat8Linear.from_float(copy.deepcopy(lin), config=c_ao)
    return ours, ao


def _run(mod, x, g):
    x = x.clone().requires_grad_()
    y = mod(x)
    y.backward(g)
    grads = [x.grad, mod.weight.grad] + ([mod.bias.grad] if mod.bias is not None else [])
    return [y] + grads


def _assert_bit_identical(ours, ao, what):
    names = ["output", "grad_input", "grad_weight", "grad_bias"]
    for name, a, b in zip(names, ours, ao):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {name} {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        assert torch.equal(a, b), f"{what}: {name} differs, max |diff| {(a.float() - b.float()).abs().max()}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}->{s[2]}")
def test_float8_linear_bit_identical(recipe, dtype, bias, shape, device):
    lead, in_f, out_f = shape
    pad = math.prod(lead) % 16 != 0            # tokens are K of grad_weight: padded, as on the GPU
    ours, ao = _pair(in_f, out_f, bias, dtype, recipe, device=device, pad=pad)
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(*lead, in_f, generator=gen) * 3).to(dtype).to(device)
    g = torch.randn(*lead, out_f, generator=gen).to(dtype).to(device)
    _assert_bit_identical(_run(ours, x, g), _run(ao, x, g), f"{recipe} {dtype} {shape} bias={bias}")


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("in_f,out_f", [(33, 16), (32, 17)])
def test_feature_sizes_off_16_are_refused_where_torchao_cpu_accepts_them(recipe, in_f, out_f):
    ours, ao = _pair(in_f, out_f, True, torch.float32, recipe, pad=True)
    x, g = torch.randn(16, in_f), torch.randn(16, out_f)
    _run(ao, x, g)                             # the CPU kernel takes any shape; a GPU would not
    with pytest.raises(ValueError, match="multiple of 16"):
        _run(ours, x, g)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("case", ["outlier", "zeros", "tiny", "huge_grad"])
def test_float8_linear_bit_identical_hard_inputs(recipe, case):
    ours, ao = _pair(64, 32, True, torch.float32, recipe, seed=3)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(16, 64, generator=gen)
    g = torch.randn(16, 32, generator=gen)
    if case == "outlier":
        x[3, 5] = 1e4
    elif case == "zeros":
        x = torch.zeros(16, 64)
        g[2] = 0
    elif case == "tiny":
        x, g = x * 1e-30, g * 1e-25
    elif case == "huge_grad":
        g = g * 1e30
    _assert_bit_identical(_run(ours, x, g), _run(ao, x, g), f"{recipe} {case}")


@pytest.mark.parametrize("recipe", RECIPES)
def test_bf16_input_fp32_weight(recipe):
    ours, ao = _pair(32, 48, True, torch.float32, recipe, seed=5, pad=True)
    x = torch.randn(6, 32).bfloat16()
    g = torch.randn(6, 48).bfloat16()
    _assert_bit_identical(_run(ours, x, g), _run(ao, x, g), f"{recipe} bf16 input, fp32 weight")


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 32)
        self.blocks = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, 20)                  # kept in high precision

    def forward(self, idx):
        return self.head(self.blocks(self.embed(idx)))


@pytest.mark.parametrize("recipe", RECIPES)
def test_convert_matches_torchao_over_training_steps(recipe):
    torch.manual_seed(0)
    base = _Net()
    keep = lambda m, fqn: fqn != "head"  # noqa: E731
    ours = convert_to_float8_training(copy.deepcopy(base), recipe, module_filter_fn=keep)
    assert ours.blocks[0].config == ours_config.from_recipe_name(recipe)
    ao = ao_convert(copy.deepcopy(base), config=Float8LinearConfig.from_recipe_name(recipe),
                    module_filter_fn=keep)
    assert [type(m).__name__ for m in ours.modules()] == [type(m).__name__ for m in ao.modules()]
    assert type(ours.head) is nn.Linear and isinstance(ours.blocks[0], Float8Linear)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ours, ao)]
    gen = torch.Generator().manual_seed(0)
    for step in range(3):
        idx = torch.randint(0, 20, (4, 8), generator=gen)
        losses = []
        for m, opt in zip((ours, ao), opts):
            loss = nn.functional.cross_entropy(m(idx).flatten(0, 1), idx.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
        assert torch.equal(losses[0], losses[1]), f"step {step}: {losses}"
    for (n, p), (_, q) in zip(ours.named_parameters(), ao.named_parameters()):
        assert torch.equal(p, q), n


def test_root_linear_is_returned_converted_like_torchao():
    lin = nn.Linear(16, 16)
    ours = convert_to_float8_training(lin, "rowwise")
    ao = ao_convert(nn.Linear(16, 16), config=Float8LinearConfig.from_recipe_name("rowwise"))
    assert isinstance(ours, Float8Linear) and isinstance(ao, AoFloat8Linear)
    assert ours.weight is lin.weight            # parameters shared, not copied


def test_import_torchao_filters_only_its_cpu_notices(monkeypatch):
    assert STATUS.ok and STATUS.version
    st = import_torchao("torchao.float8")
    assert st.ok

    def missing_module():
        import torchao.no_such_module_here  # noqa: F401
    monkeypatch.setitem(torchao_import.TORCHAO_MODULES, "torchao.no_such_module_here", missing_module)
    missing = import_torchao("torchao.no_such_module_here")
    assert not missing and "no_such_module_here" in missing.error     # a status, not an ImportError
    with pytest.raises(ValueError, match="torchao.float8"):
        import_torchao("torchao.sparsity")                              # not one the course compares with
