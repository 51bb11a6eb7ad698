"""amp_edu.optim's states as tensor subclasses, and the optimizer's torchao behaviours: documented-
behaviour checks beside the ported tests (tests/optim/test_torchao_port.py).

Where torchao has the same behaviour, the check runs for both (``[torchao]``/``[amp_edu]``): the
op table of the state subclasses (``torchao/optim/subclass_*.py`` in torchao 0.18.0), states that
follow the parameter's device through ``load_state_dict``, the optimizers' defaults. The rest are
amp_edu's own contracts: what each op does to codes and scales, the errors, tensor ``lr``,
``amsgrad``, DTensor-free pickling with ``map_location``.
"""

from __future__ import annotations

import inspect
import io

import pytest
import torch
from torch import nn

from amp_edu.device import num_threads

pytest.importorskip("torchao.optim")

import amp_edu.optim as ae_optim  # noqa: E402
from amp_edu.optim import QUANTIZED_STATES, AdamW, QuantizedState  # noqa: E402
from amp_edu.optim.drop_in import TORCHAO_CLASSES  # noqa: E402
from torchao import optim as ao_optim  # noqa: E402
from torchao.optim.subclass_4bit import OptimState4bit  # noqa: E402
from torchao.optim.subclass_8bit import OptimState8bit  # noqa: E402
from torchao.optim.subclass_fp8 import OptimStateFp8  # noqa: E402

LIBS = ["torchao", "amp_edu"]
STEPPING = ["torchao", "amp_edu"]   # torchao's step compiles
KINDS = QUANTIZED_STATES            # the state kinds amp_edu.optim owns
NAMES = ["Adam8bit", "AdamW8bit", "Adam4bit", "AdamW4bit", "AdamFp8", "AdamWFp8", "_AdamW"]


@pytest.fixture(autouse=True)
def _one_thread():
    with num_threads(1):
        yield


def zeros(lib, kind, shape, **kw):
    if lib == "torchao":
        return {"4bit": OptimState4bit, "8bit": OptimState8bit, "fp8": OptimStateFp8}[kind].zeros(shape, **kw)
    return QuantizedState.zeros(kind, shape, **kw)


def filled(lib, kind, shape=(256, 64), signed=True, seed=0):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) ** 3
    kw = {} if kind == "fp8" else dict(signed=signed)
    return zeros(lib, kind, shape, **kw).copy_(x if signed else x.abs())


def raw(t):
    return t.codes.view(torch.uint8), t.scale


# --- the op table, side by side -------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_states_equal_torchaos_bit_for_bit(kind):
    for signed in ((True, False) if kind != "fp8" else (True,)):
        a, b = filled("torchao", kind, signed=signed), filled("amp_edu", kind, signed=signed)
        assert all(torch.equal(x, y) for x, y in zip(raw(a), raw(b)))
        assert torch.equal(a.dequantize(), b.dequantize())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lib", LIBS)
def test_detach_view_and_slice_share_the_codes(lib, kind):
    """What DTensor.from_local, to_local and DCP's narrow do: views, so a copy_ into them writes
    into the state itself."""
    s = filled(lib, kind)
    new = filled(lib, kind, seed=1)
    for make in (lambda t: t.detach(), lambda t: t.view(t.shape), lambda t: t[:128]):
        v = make(s)
        assert type(v) is type(s)
        src = new if v.shape == s.shape else new[:128]
        v.copy_(src)
        assert torch.equal(make(s).dequantize(), src.dequantize())
        s = filled(lib, kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lib", LIBS)
def test_copy_into_a_plain_tensor_dequantizes(lib, kind):
    s = filled(lib, kind)
    out = torch.empty(s.shape)
    out.copy_(s)
    assert torch.equal(out, s.dequantize())


@pytest.mark.parametrize("kind", KINDS)
def test_clone_and_to_copy_do_not_alias(kind):
    """amp_edu's clone and .to(dtype) copy the codes (torchao's .to(dtype) keeps them shared,
    ``subclass_8bit.py`` lines 149-161: a later copy_ into one changes both)."""
    s = filled("amp_edu", kind)
    before = s.dequantize()
    for other in (s.clone(), s.to(torch.bfloat16)):
        other.copy_(filled("amp_edu", kind, seed=5))
        assert torch.equal(s.dequantize(), before)
    assert s.to(torch.bfloat16).dtype == torch.bfloat16 and s.to(torch.bfloat16).codes.dtype == s.codes.dtype


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lib", LIBS)
def test_to_meta_moves_every_inner_tensor(lib, kind):
    m = filled(lib, kind).to("meta")
    assert m.device.type == "meta"
    assert all(t.device.type == "meta" for t in (m.codes, m.scale))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lib", LIBS)
def test_save_and_load_with_weights_only(lib, kind):
    s = filled(lib, kind)
    buf = io.BytesIO()
    torch.save({"s": s}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)["s"]
    assert type(back) is type(s) and torch.equal(back.dequantize(), s.dequantize())


def test_load_with_map_location_moves_the_wrapper_too():
    s = filled("amp_edu", "8bit")
    buf = io.BytesIO()
    torch.save(s, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True, map_location="meta")
    assert back.device.type == "meta" and back.codes.device.type == "meta"


@pytest.mark.parametrize("lib", STEPPING)
def test_load_state_dict_moves_states_to_the_parameters_device(lib):
    """torch's load_state_dict calls value.to(dtype=p.dtype, device=p.device) on each state: a
    CPU checkpoint loaded into a model on another device (here "meta", the one other device a
    CPU-only machine has) puts the quantized states there, with the parameter's dtype as looks."""
    opt_cls = (ao_optim if lib == "torchao" else ae_optim).AdamW8bit
    w = torch.randn(64, 64, requires_grad=True)
    opt = opt_cls([w])
    w.grad = torch.randn(64, 64)
    opt.step()
    sd = opt.state_dict()
    w2 = torch.empty(64, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
    opt2 = opt_cls([w2])
    opt2.load_state_dict(sd)
    for key in ("exp_avg", "exp_avg_sq"):
        st = opt2.state[w2][key]
        assert st.device.type == "meta" and st.codes.device.type == "meta" and st.dtype == torch.bfloat16
    assert opt.state[w]["exp_avg"].device.type == "cpu"


# --- refusals -------------------------------------------------------------------------------------
def test_slices_only_whole_blocks_along_dim_0():
    s = filled("amp_edu", "8bit", (256, 64))         # blocks of 256 = 4 rows
    assert s[4:8].shape == (4, 64) and s[:].shape == (256, 64) and s[-4:].shape == (4, 64)
    for bad in (lambda: s[1:5], lambda: s[::2], lambda: s[:, :32]):
        with pytest.raises(ValueError, match="block|step|first dimension"):
            bad()


def test_unsupported_ops_name_dequantize():
    s = filled("amp_edu", "4bit")
    with pytest.raises(NotImplementedError, match="dequantize"):
        s + 1
    with pytest.raises(NotImplementedError, match="dequantize"):
        s.t()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="kind"):
        QuantizedState("2bit", (256,))
    with pytest.raises(ValueError, match="blocks"):
        QuantizedState("8bit", (100,))
    with pytest.raises(TypeError, match="shape"):
        QuantizedState("8bit", "256")
    with pytest.raises(TypeError, match="dtype"):
        QuantizedState("8bit", (256,), dtype="float32")
    with pytest.raises(ValueError, match="floating-point"):
        QuantizedState("8bit", (256,), dtype=torch.int32)
    s = filled("amp_edu", "8bit")
    with pytest.raises(ValueError, match="shape"):
        s.copy_(torch.zeros(3))
    with pytest.raises(ValueError, match="same kind"):
        s.copy_(filled("amp_edu", "fp8"))


def test_nbytes_counts_what_is_stored():
    s = QuantizedState("8bit", (256, 64))
    assert s.nbytes == 256 * 64 + 4 * 64 + 4 * 256


# --- the optimizer: torchao's defaults, tensor lr, amsgrad ---------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_defaults_are_torchaos(name):
    p = [nn.Parameter(torch.zeros(4))]
    assert TORCHAO_CLASSES[name] is getattr(ae_optim, name) and TORCHAO_CLASSES[name].__name__ == name
    ao, ae = getattr(ao_optim, name)(p), TORCHAO_CLASSES[name](p)
    assert ae.defaults == ao.defaults
    if name != "_AdamW":
        assert ae.block_size == ao.block_size
    assert ae.decoupled == ao.is_adamw
    ao_sr = getattr(ao_optim, name)(p, bf16_stochastic_round=True).bf16_stochastic_round
    assert ao_sr and TORCHAO_CLASSES[name](p, bf16_stochastic_round=True).rounding == "stochastic"
    assert inspect.signature(TORCHAO_CLASSES[name]).parameters == inspect.signature(getattr(ao_optim, name)).parameters


def test_the_drop_ins_are_torchaos_classes_all_of_them():
    assert set(TORCHAO_CLASSES) == set(NAMES) == {n for n in dir(ao_optim) if n.lstrip("_").startswith("Adam")}


def test_adam_without_decay_by_default():
    assert AdamW([torch.zeros(2, requires_grad=True)], decoupled=False).defaults["weight_decay"] == 0.0
    assert AdamW([torch.zeros(2, requires_grad=True)]).defaults["weight_decay"] == 1e-2


def _run(lr, amsgrad=False, steps=3, states="8bit", sched=False):
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(0)).requires_grad_()
    opt = AdamW([w], lr=lr, amsgrad=amsgrad, states=states)
    s = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5) if sched else None
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        w.grad = torch.randn(64, 64, generator=g)
        opt.step()
        if s:
            s.step()
    return w.detach(), opt


def test_tensor_lr_equals_float_lr_and_takes_scheduler_updates():
    a, _ = _run(1e-2)
    lr = torch.tensor(1e-2)
    b, opt = _run(lr)
    assert torch.equal(a, b) and opt.param_groups[0]["lr"] is lr
    c, _ = _run(1e-2, sched=True)
    d, opt = _run(torch.tensor(1e-2), sched=True)
    assert torch.equal(c, d) and isinstance(opt.param_groups[0]["lr"], torch.Tensor)
    assert not torch.equal(a, c)


def test_bad_lr_is_refused():
    p = [torch.zeros(3, requires_grad=True)]
    for lr, err in [(torch.tensor([1e-3, 1e-3]), TypeError), (torch.tensor(1), TypeError),
                    (torch.tensor(-1.0), ValueError), (torch.tensor(float("nan")), ValueError),
                    (torch.tensor(1e-3, requires_grad=True), ValueError), ("1e-3", TypeError)]:
        with pytest.raises(err, match="lr"):
            AdamW(p, lr=lr)
    with pytest.raises(ValueError, match="lr"):
        AdamW([{"params": p, "lr": -1.0}])
    with pytest.raises(TypeError, match="amsgrad"):
        AdamW(p, amsgrad=1)
    with pytest.raises(TypeError, match="bf16_stochastic_round"):
        ae_optim.AdamW8bit(p, bf16_stochastic_round="yes")


@pytest.mark.parametrize("states", ["param", "8bit", "4bit", "fp8"])
def test_amsgrad_keeps_the_largest_second_moment(states):
    _, opt = _run(1e-2, amsgrad=True, states=states, steps=4)
    st = next(iter(opt.state.values()))
    vmax = st["max_exp_avg_sq"]
    assert type(vmax) is type(st["exp_avg_sq"])
    deq = (lambda t: t.dequantize() if isinstance(t, QuantizedState) else t)
    if states == "param":
        assert bool((deq(vmax) >= deq(st["exp_avg_sq"])).all())
    w_plain, _ = _run(1e-2, amsgrad=False, states=states, steps=4)
    w_ams, _ = _run(1e-2, amsgrad=True, states=states, steps=4)
    assert not torch.equal(w_plain, w_ams)


def test_recipes_carry_amsgrad_over():
    from amp_edu.recipes import adam_settings
    p = [torch.zeros(2, requires_grad=True)]
    assert adam_settings(torch.optim.AdamW(p, amsgrad=True))["amsgrad"] is True
    assert adam_settings(torch.optim.Adam(p))["amsgrad"] is False
