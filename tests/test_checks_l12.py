"""Grader 12 both ways: the reference answers pass; each plausible wrong answer fails with its own hint."""

import pytest
import torch

from amp_edu.checks import l12
from amp_edu.checks.core import CheckFailed


def _sr(rule="ok", bits=16, lo=0):
    def f(x, generator):
        b = x.view(torch.int32)
        low = b & 0xFFFF
        trunc = b & -65536
        if rule == "nearest":
            return x.bfloat16()
        if rule == "truncate":
            return trunc.view(torch.float32).bfloat16()
        if rule == "float":
            r = torch.rand(x.shape, generator=generator)
            return torch.where(r < low.float() / 65536, trunc + 0x10000, trunc).view(torch.float32).bfloat16()
        r = torch.randint(lo, (1 << bits) + lo, x.shape, generator=generator, dtype=torch.int32)
        up = r <= low if rule == "le" else r < low
        return torch.where(up, trunc + 0x10000, trunc).view(torch.float32).bfloat16()
    return f


def not_done(x, generator):
    raise NotImplementedError()


def test_reference_stochastic_round_passes(capsys):
    l12.check_stochastic_round(_sr())
    assert capsys.readouterr().out.startswith("PASS stochastic_round")


@pytest.mark.parametrize("fn,phrase", [
    (_sr("nearest"), "rounding to nearest"),
    (_sr("truncate"), "truncation"),
    (_sr(bits=15), "random bits are biased"),
    (_sr("le"), "strictly less"),
    (_sr("float"), "random stream"),
    (_sr(lo=1), "random stream"),
    (lambda x, generator: x.bfloat16().float(), "torch.bfloat16 tensor"),
    (not_done, "not done yet"),
])
def test_wrong_stochastic_rounds_fail_with_their_hint(fn, phrase):
    with pytest.raises(CheckFailed, match=phrase):
        l12.check_stochastic_round(fn)


def good_init(params):
    return [torch.zeros_like(p) for p in params]


def good_update(p, comp, update):
    y = comp.float() + update
    new = (p.float() + y).bfloat16()
    comp.copy_(y - (new.float() - p.float()))
    p.copy_(new)


def test_reference_kahan_passes(capsys):
    l12.check_kahan(good_init, good_update)
    assert capsys.readouterr().out.startswith("PASS kahan")


def fp32_for_biases(params):
    return [torch.zeros_like(p, dtype=torch.float32) if p.ndim == 1 else torch.zeros_like(p) for p in params]


def never_fed_back(p, comp, update):
    new = (p.float() + update).bfloat16()
    comp.copy_(update - (new.float() - p.float()))
    p.copy_(new)


def never_refreshed(p, comp, update):
    p.copy_((p.float() + comp.float() + update).bfloat16())


def rebinds(p, comp, update):
    y = comp.float() + update
    new = (p.float() + y).bfloat16()
    comp = (y - (new.float() - p.float())).bfloat16()     # noqa: F841 - the bug: a local name
    p.copy_(new)


def wrong_sign(p, comp, update):
    y = comp.float() + update
    new = (p.float() + y).bfloat16()
    comp.copy_((new.float() - p.float()) - y)
    p.copy_(new)


def makes_fp32(p, comp, update):
    p.data = p.float() + update


def in_float64(p, comp, update):
    y = comp.double() + update
    new = (p.double() + y).bfloat16()
    comp.copy_(y - (new.double() - p.double()))
    p.copy_(new)


def through_fp16(p, comp, update):
    y = comp.float() + update
    new = (p.half() + y).bfloat16()          # bf16 -> fp16 is exact only in fp16's normal range
    comp.copy_(y - (new.float() - p.float()))
    p.copy_(new)


def leaves_bit_0(x, generator):
    b = x.view(torch.int32)
    trunc = b & -65535                         # keeps the lowest bit
    r = torch.randint(0, 1 << 16, x.shape, generator=generator, dtype=torch.int32)
    return torch.where(r < (b & 0xFFFF), trunc + 0x10000, trunc).view(torch.float32).bfloat16()


def test_a_leftover_low_bit_makes_a_nan_at_the_top_of_the_range():
    with pytest.raises(CheckFailed, match="0x7F800001, a NaN"):
        l12.check_stochastic_round(leaves_bit_0)


@pytest.mark.parametrize("init,update,phrase", [
    (fp32_for_biases, good_update, "for every parameter"),
    (lambda ps: [torch.ones_like(p) for p in ps], good_update, "start at 0"),
    (lambda ps: [torch.zeros_like(p) for p in ps[:2]], good_update, "one compensation buffer per parameter"),
    (good_init, never_fed_back, "never fed back"),
    (good_init, never_refreshed, "left as it was"),
    (good_init, rebinds, "rebinds a local name"),
    (good_init, wrong_sign, "form y = comp"),
    (good_init, makes_fp32, "still bf16"),
    (good_init, in_float64, "form the sums in float32"),
    (good_init, through_fp16, "form y = comp"),
    (good_init, lambda p, c, u: (_ for _ in ()).throw(NotImplementedError()), "not done yet"),
])
def test_wrong_kahan_fails_with_its_hint(init, update, phrase):
    with pytest.raises(CheckFailed, match=phrase):
        l12.check_kahan(init, update)


def test_hints_are_distinct():
    hints = set()
    for fn in (_sr("nearest"), _sr("truncate"), _sr(bits=15), _sr("le"), _sr("float")):
        with pytest.raises(CheckFailed) as e:
            l12.check_stochastic_round(fn)
        hints.add(str(e.value).split("hint:")[1])
    assert len(hints) == 5


def test_kahan_hints_are_distinct():
    hints = set()
    for init, update in ((fp32_for_biases, good_update), (good_init, never_fed_back), (good_init, never_refreshed),
                         (good_init, wrong_sign)):
        with pytest.raises(CheckFailed) as e:
            l12.check_kahan(init, update)
        hints.add(str(e.value).split("hint:")[1])
    assert len(hints) == 4
