"""torchao 0.18's own low-bit optimizer tests, ported to the CPU and run against both libraries.

Source: pytorch/ao at tag v0.18.0 (commit 5f2baf9d575cf732362594c998c399902942531f),
``test/test_low_bit_optim.py`` (written here again, not copied: same inputs, same tolerances, same
assertions; torchao's unittest classes become plain pytest functions with torchao's test names).
Every ported test runs twice through its ``lib`` parameter: ``[torchao]`` with ``torchao.optim``
and ``[amp_edu]`` with ``amp_edu.optim`` in its place, side by side, so a failure says which side
broke. torchao parametrizes over ``get_available_devices()``; on this CPU-only machine that is
``["cpu"]``, so the device parameter is dropped and every test runs on the CPU.

What stands for what on the amp_edu side:

=========================================  ======================================================
torchao                                    amp_edu
=========================================  ======================================================
``optim.Adam8bit`` ... ``optim._AdamW``    ``amp_edu.optim.Adam8bit`` ... ``amp_edu.optim._AdamW``
                                           (``drop_in``: torchao's names over ``AdamW``)
``OptimState8bit/4bit/Fp8.zeros(shape)``   ``QuantizedState.zeros("8bit"/"4bit"/"fp8", shape)``
``quantize_8bit_with_qmap(x, qmap)``,      ``nearest_code(x, qmap)``
``quantize_4bit_with_qmap(x, qmap)``
``_fp32_to_bf16_sr(x)``                    ``stochastic_round(x)``
=========================================  ======================================================

Tiers: torchao's optimizers compile their step with Inductor (seconds per shape on a cold cache),
so the ``[torchao]`` cases that step an optimizer, and every ``compile=True`` case, are marked
``slow`` (CONTRIBUTING: a test that compiles is in the course tier); amp_edu's steps are eager.

Not runnable here, skipped with the reason (both libraries):

* ``test_optim_8bit_correctness``: bitsandbytes' 8-bit Adam runs on CUDA only (and torchao skips
  it for torch >= 2.7, "Failing in CI").
* ``test_optim_4bit_correctness``: lpmm's 4-bit AdamW runs on CUDA only.
* ``test_optim_cpu_offload_correctness``, ``test_optim_cpu_offload_save_load``: torchao's
  ``CPUOffloadOptimizer`` offloads from CUDA or XPU; amp_edu has no CPU-offload optimizer.
* ``TestFSDP2.test_fsdp2``, ``TestFSDP2.test_uneven_shard``: two CUDA GPUs (and torchao skips them
  for torch >= 2.11, "Failing in CI"). Their CPU counterparts (gloo ranks, DTensor shards, uneven
  shards, ``full_tensor()``, DCP save at one world size and load at another) are in
  ``tests/optim/test_checkpoint_sharded.py``.
"""

from __future__ import annotations

import copy
import tempfile

import pytest
import torch
from torch import nn

from amp_edu.device import num_threads

pytest.importorskip("torchao.optim")

import amp_edu.optim as ae_optim  # noqa: E402
from amp_edu.optim import QuantizedState, nearest_code, stochastic_round  # noqa: E402
from torchao import optim as ao_optim  # noqa: E402
from torchao.optim import quant_utils  # noqa: E402
from torchao.optim.subclass_4bit import OptimState4bit  # noqa: E402
from torchao.optim.subclass_8bit import OptimState8bit  # noqa: E402
from torchao.optim.subclass_fp8 import OptimStateFp8  # noqa: E402

SEED = 1234                 # torchao: common_utils.SEED = 1234 when unset
LIBS = ["torchao", "amp_edu"]
# torchao's step compiles (course tier); amp_edu's is eager (fast tier)
STEPPING = ["torchao", "amp_edu"]
CUDA = "needs CUDA"
OPTIMS = ["Adam8bit", "AdamW8bit", "Adam4bit", "AdamW4bit", "AdamFp8", "AdamWFp8"]
KINDS = ["4bit", "8bit", "fp8"]       # torchao: [OptimState4bit, OptimState8bit, OptimStateFp8]


@pytest.fixture(autouse=True)
def _seeded_one_thread():
    """torchao's TestCase seeds every test; small tensors run fastest on one thread."""
    torch.manual_seed(SEED)
    with num_threads(1):
        yield


# --- the pieces each library provides, behind one interface --------------------------------------
def optim_module(lib):
    return ao_optim if lib == "torchao" else ae_optim


def quantize_with_qmap(lib, x, qmap, bits):
    if lib == "torchao":
        return (quant_utils.quantize_8bit_with_qmap if bits == 8 else quant_utils.quantize_4bit_with_qmap)(x, qmap)
    return nearest_code(x, qmap)


def sr(lib):
    return quant_utils._fp32_to_bf16_sr if lib == "torchao" else stochastic_round


def zeros(lib, kind, shape, **kw):
    if lib == "torchao":
        return {"4bit": OptimState4bit, "8bit": OptimState8bit, "fp8": OptimStateFp8}[kind].zeros(shape, **kw)
    return QuantizedState.zeros(kind, shape, **kw)


def _fill_torchao_qmap_caches():
    """torchao builds its code books with the default dtype and caches the first (quant_utils.py,
    subclass_8bit.py ``get_qmap_signed``): fill the caches in fp32 before a test switches the default
    dtype, or later tests in this process would compare against a bf16-built map."""
    from torchao.optim import subclass_4bit, subclass_8bit
    for mod in (subclass_4bit, subclass_8bit):
        mod.get_qmap_signed()
        mod.get_qmap_unsigned()


# === TestQuantize ===================================================================================
@pytest.mark.parametrize("lib", LIBS)
def test_quantize_8bit_with_qmap_correctness(lib):
    x = torch.rand(32, 1024)
    qmap = torch.rand(256).sort().values
    actual = (x.unsqueeze(-1) - qmap).abs().argmin(-1).to(torch.uint8)
    expected = quantize_with_qmap(lib, x, qmap, 8)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("lib", LIBS)
def test_quantize_8bit_with_qmap_compile(lib):
    x = torch.rand(32, 1024)
    qmap = torch.rand(256).sort().values
    f = quant_utils.quantize_8bit_with_qmap if lib == "torchao" else nearest_code
    actual = torch.compile(f, fullgraph=True)(x, qmap)
    torch.testing.assert_close(actual, f(x, qmap))


@pytest.mark.parametrize("lib", LIBS)
def test_quantize_4bit_with_qmap_correctness(lib):
    x = torch.rand(32, 1024)
    qmap = torch.rand(16).sort().values
    actual = (x.unsqueeze(-1) - qmap).abs().argmin(-1).to(torch.uint8)
    expected = quantize_with_qmap(lib, x, qmap, 4)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("lib", LIBS)
def test_quantize_4bit_with_qmap_compile(lib):
    x = torch.rand(32, 1024)
    qmap = torch.rand(16).sort().values
    f = quant_utils.quantize_4bit_with_qmap if lib == "torchao" else nearest_code
    actual = torch.compile(f, fullgraph=True)(x, qmap)
    torch.testing.assert_close(actual, f(x, qmap))


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("lib", LIBS)
def test_bf16_stochastic_round(lib, compile):
    x = torch.rand(32) * 100
    x_rep = x.view(-1, 1).repeat(1, 100_000)
    func = torch.compile(sr(lib), fullgraph=True, dynamic=False, disable=not compile)
    x_rep_bf16 = func(x_rep)
    assert x_rep_bf16.dtype is torch.bfloat16
    # must cast BF16 tensor back to FP32 so that .mean() is accurate
    torch.testing.assert_close(x_rep_bf16.float().mean(1), x, atol=3e-5, rtol=3e-5)


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("lib", LIBS)
def test_bf16_stochastic_round_dtensor(lib, compile):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    created_pg = False
    if dist.is_available() and not dist.is_initialized():
        store = dist.FileStore(tempfile.mktemp(), 1)
        dist.init_process_group(backend="gloo", store=store, rank=0, world_size=1)
        created_pg = True
    try:
        torch.manual_seed(SEED)
        x = torch.rand(32) * 100
        x_rep = x.view(-1, 1).repeat(1, 100_000)
        func = torch.compile(sr(lib), fullgraph=True, dynamic=False, disable=not compile)
        out_plain = func(x_rep)
        mesh = init_device_mesh("cpu", (1,))
        x_dt = DTensor.from_local(x_rep, mesh, [Replicate()], run_check=False)
        out_dt = func(x_dt)          # a second draw: bf16's tolerance covers the one-ulp differences
        assert isinstance(out_dt, DTensor)
        torch.testing.assert_close(out_dt.to_local(), out_plain)
    finally:
        if created_pg:
            dist.destroy_process_group()


# === TestOptim ======================================================================================
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("optim_name", OPTIMS)
@pytest.mark.parametrize("lib", STEPPING)
def test_optim_smoke(lib, optim_name, dtype):
    optim = optim_module(lib)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 32))
    model.to(dtype=dtype)
    optimizer = getattr(optim, optim_name)(model.parameters())

    x = torch.randn(4, 32, dtype=dtype)
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

    # test serialization. also test the case CUDA optim loads CPU state dict
    with tempfile.NamedTemporaryFile() as f:
        torch.save(optimizer.state_dict(), f.name)
        state_dict = torch.load(f.name, map_location="cpu")

    model2 = copy.deepcopy(model)
    optim2 = getattr(optim, optim_name)(model2.parameters())
    optim2.load_state_dict(state_dict)

    for _ in range(2):
        x = torch.randn(4, 32, dtype=dtype)

        model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

        model2(x).sum().backward()
        optim2.step()
        optim2.zero_grad()

    for p1, p2 in zip(model.parameters(), model2.parameters()):
        torch.testing.assert_close(p2, p1)


@pytest.mark.parametrize("optim_name", ["Adam8bit", "Adam4bit", "AdamFp8"])
@pytest.mark.parametrize("lib", STEPPING)
def test_optim_default_dtype_bf16(lib, optim_name):
    _fill_torchao_qmap_caches()
    optim = optim_module(lib)
    old_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 32))
        optimizer = getattr(optim, optim_name)(model.parameters())

        x = torch.randn(4, 32)
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    finally:
        torch.set_default_dtype(old_dtype)


@pytest.mark.parametrize("optim_name", ["Adam8bit", "Adam4bit", "AdamFp8"])
@pytest.mark.parametrize("lib", STEPPING)
def test_param_groups(lib, optim_name):
    optim = optim_module(lib)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 32))
    param_groups = [
        dict(params=list(model[0].parameters()), lr=1e-4),
        dict(params=list(model[2].parameters()), lr=1e-5),
    ]
    optimizer = getattr(optim, optim_name)(param_groups)

    x = torch.randn(4, 32)
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


# aten.slice is required for dcp.load() when world size changes i.e. re-sharding (torchao's note;
# tests/optim/test_checkpoint_sharded.py does the re-sharding itself, with gloo ranks)
@pytest.mark.parametrize("shape", [(4096,), (256, 256)])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lib", LIBS)
def test_subclass_slice(lib, kind, shape):
    tensor = zeros(lib, kind, shape)
    offset = shape[0] // 2

    torch.testing.assert_close(tensor.dequantize()[:offset], tensor[:offset].dequantize())
    torch.testing.assert_close(tensor.dequantize()[offset:offset * 2], tensor[offset:offset * 2].dequantize())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lib", LIBS)
def test_subclass_appearance_dtype(lib, kind):
    shape = (1024,)

    # default creation should be FP32
    tensor = zeros(lib, kind, shape)
    assert tensor.dtype == torch.float32

    # dtype casting
    tensor_bf16 = tensor.to(torch.bfloat16)
    assert tensor_bf16.dtype == torch.bfloat16

    # moving to another device should preserve dtype
    if not tensor_bf16.is_cpu:
        assert tensor_bf16.cpu().dtype == torch.bfloat16

    # recast to FP32
    assert tensor_bf16.to(torch.float32).dtype == torch.float32

    # direct BF16 creation
    assert zeros(lib, kind, shape, dtype=torch.bfloat16).dtype == torch.bfloat16


@pytest.mark.skip(reason=f"{CUDA}: bitsandbytes' 8-bit Adam runs on CUDA only (torchao also skips it for "
                         "torch >= 2.7, 'Failing in CI')")
@pytest.mark.parametrize("optim_name", ["Adam8bit", "AdamW8bit"])
@pytest.mark.parametrize("lib", LIBS)
def test_optim_8bit_correctness(lib, optim_name):
    pass


@pytest.mark.skip(reason=f"{CUDA}: lpmm's 4-bit AdamW runs on CUDA only (not installable in torchao's CI either)")
@pytest.mark.parametrize("optim_name", ["Adam4bit", "AdamW4bit"])
@pytest.mark.parametrize("lib", LIBS)
def test_optim_4bit_correctness(lib, optim_name):
    pass


@pytest.mark.skip(reason=f"{CUDA} or XPU: torchao's CPUOffloadOptimizer offloads a GPU model's optimizer to "
                         "the CPU; amp_edu has no CPU-offload optimizer")
@pytest.mark.parametrize("offload_grad,grad_accum", [(False, 1), (False, 2), (True, 1)])
@pytest.mark.parametrize("lib", LIBS)
def test_optim_cpu_offload_correctness(lib, offload_grad, grad_accum):
    pass


@pytest.mark.skip(reason=f"{CUDA} or XPU: torchao's CPUOffloadOptimizer offloads a GPU model's optimizer to "
                         "the CPU; amp_edu has no CPU-offload optimizer")
@pytest.mark.parametrize("lib", LIBS)
def test_optim_cpu_offload_save_load(lib):
    pass


@pytest.mark.parametrize("lib", STEPPING)
def test_optim_bf16_stochastic_round_correctness(lib):
    torch.manual_seed(2024)
    model1 = nn.Sequential(nn.Linear(32, 1024), nn.ReLU(), nn.Linear(1024, 128))
    model2 = copy.deepcopy(model1).bfloat16()

    # small LR so that weight update is small
    # when bf16_stochastic_round=False, the test will fail after 1 iteration
    optim1 = torch.optim.AdamW(model1.parameters(), lr=1e-5)
    optim2 = optim_module(lib)._AdamW(model2.parameters(), lr=1e-5, bf16_stochastic_round=True)

    # overfit on this sample
    x = torch.randn(4, 32)

    for idx in range(5):
        # mixed-precision training
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss1 = model1(x)
        loss1 = loss1.sum()  # under autocast context, bf16.sum() will return fp32
        loss1.backward()
        optim1.step()
        optim1.zero_grad()

        # full BF16 training with stochastic round weight update
        loss2 = model2(x.bfloat16()).sum()
        loss2.backward()
        optim2.step()
        optim2.zero_grad()

        torch.testing.assert_close(loss1, loss2, msg=lambda msg: f"Iteration {idx}. {msg}")


# === TestFSDP2 ======================================================================================
@pytest.mark.skip(reason=f"{CUDA}: two GPUs with NCCL (torchao also skips it for torch >= 2.11, 'Failing in "
                         "CI'); the CPU counterpart is tests/optim/test_checkpoint_sharded.py")
@pytest.mark.parametrize("lib", LIBS)
def test_fsdp2(lib):
    pass


@pytest.mark.skip(reason=f"{CUDA}: two GPUs with NCCL (torchao also skips it for torch >= 2.11, 'Failing in "
                         "CI'); the CPU counterpart is tests/optim/test_checkpoint_sharded.py")
@pytest.mark.parametrize("lib", LIBS)
def test_uneven_shard(lib):
    pass
