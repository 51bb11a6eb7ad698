"""Grader 12 both ways: the reference answers pass; each plausible wrong answer fails with its own hint."""

import pytest
import torch

from amp_edu.checks import l12
from amp_edu.checks.core import CheckFailed
from checkhelp import verdict  # noqa: E402  (tests/ is on sys.path)


def _sr(rule="ok", bits=13, lo=0):
    def f(x, generator):
        b = x.view(torch.int32)
        low = b & 0x1FFF
        trunc = b & -8192
        if rule == "nearest":
            return x.half()
        if rule == "truncate":
            return trunc.view(torch.float32).half()
        if rule == "bf16":                               # the lesson's sr_bf16, returned as fp16
            t16 = b & -65536
            r = torch.randint(0, 1 << 16, x.shape, generator=generator, dtype=torch.int32)
            return torch.where(r < (b & 0xFFFF), t16 + 0x10000, t16).view(torch.float32).half()
        if rule == "lesson":                             # the lesson's sr_bf16 verbatim
            t16 = b & -65536
            r = torch.randint(0, 1 << 16, x.shape, generator=generator, dtype=torch.int32)
            return torch.where(r < (b & 0xFFFF), t16 + 0x10000, t16).view(torch.float32).bfloat16()
        if rule == "float":
            r = torch.rand(x.shape, generator=generator)
            return torch.where(r < low.float() / 8192, trunc + 0x2000, trunc).view(torch.float32).half()
        r = torch.randint(lo, (1 << bits) + lo, x.shape, generator=generator, dtype=torch.int32)
        up = r <= low if rule == "le" else r < low
        return torch.where(up, trunc + 0x2000, trunc).view(torch.float32).half()
    return f


def not_done(x, generator):
    raise NotImplementedError()


def test_reference_stochastic_round_passes(capsys):
    l12.check_stochastic_round(_sr())
    assert capsys.readouterr().out.startswith("PASS stochastic_round")


@pytest.mark.parametrize("fn,phrase", [
    (_sr("nearest"), "rounding to nearest"),
    (_sr("truncate"), "truncation"),
    (_sr("bf16"), "bf16's grid"),
    (_sr("lesson"), "returns bf16"),
    (_sr(bits=16), "random bits are biased"),
    (_sr(bits=12), "random bits are biased"),
    (_sr("le"), "strictly less"),
    (_sr("float"), "random stream"),
    (_sr(lo=1), "random stream"),
    (lambda x, generator: x.half().float(), "torch.float16 tensor"),
    (not_done, "not done yet"),
])
def test_wrong_stochastic_rounds_fail_with_their_hint(fn, phrase):
    with pytest.raises(CheckFailed, match=phrase):
        l12.check_stochastic_round(fn)


def good_init(params, dtype=None):
    return [torch.zeros_like(p, dtype=dtype) for p in params]


def good_update(p, comp, update):
    y = comp.float() + update
    new = (p.float() + y).to(p.dtype)
    comp.copy_(y - (new.float() - p.float()))
    p.copy_(new)


def test_reference_kahan_passes(capsys):
    l12.check_kahan(good_init, good_update)
    assert capsys.readouterr().out.startswith("PASS kahan")


def lesson_init(params):                                 # the lesson's: no dtype
    return [torch.zeros_like(p) for p in params]


def lesson_update(p, comp, update):                      # the lesson's cell verbatim: rounds to bf16
    y = comp.float() + update
    new = (p.float() + y).bfloat16()
    comp.copy_(y - (new.float() - p.float()))
    p.copy_(new)


def ignores_dtype(params, dtype=None):
    return [torch.zeros_like(p) for p in params]


def always_fp32(params, dtype=None):
    return [torch.zeros_like(p, dtype=torch.float32) for p in params]


def comp_in_p_dtype(p, comp, update):
    y = comp.float() + update
    new = (p.float() + y).to(p.dtype)
    comp.copy_((y - (new.float() - p.float())).to(p.dtype))
    p.copy_(new)


def never_fed_back(p, comp, update):
    new = (p.float() + update).to(p.dtype)
    comp.copy_(update - (new.float() - p.float()))
    p.copy_(new)


def never_refreshed(p, comp, update):
    p.copy_((p.float() + comp.float() + update).to(p.dtype))


def rebinds(p, comp, update):
    y = comp.float() + update
    new = (p.float() + y).to(p.dtype)
    comp = (y - (new.float() - p.float())).to(comp.dtype)     # noqa: F841 - the bug: a local name
    p.copy_(new)


def wrong_sign(p, comp, update):
    y = comp.float() + update
    new = (p.float() + y).to(p.dtype)
    comp.copy_((new.float() - p.float()) - y)
    p.copy_(new)


def makes_fp32(p, comp, update):
    p.data = p.float() + update


def in_float64(p, comp, update):
    y = comp.double() + update
    new = (p.double() + y).to(p.dtype)
    comp.copy_(y - (new.double() - p.double()))
    p.copy_(new)


@pytest.mark.parametrize("init,update,phrase", [
    (lesson_init, good_update, "positional arguments but 2 were given|takes 1 positional argument"),
    (ignores_dtype, good_update, "pass dtype on"),
    (always_fp32, good_update, "weight's own dtype"),
    (lambda ps, dtype=None: [torch.ones_like(p, dtype=dtype) for p in ps], good_update, "start at 0"),
    (lambda ps, dtype=None: [torch.zeros_like(p, dtype=dtype) for p in ps[:2]], good_update,
     "one compensation buffer per parameter"),
    (good_init, lesson_update, "rounded to bf16"),
    (good_init, comp_in_p_dtype, "rounded to the weight's dtype"),
    (good_init, never_fed_back, "never fed back"),
    (good_init, never_refreshed, "left as it was"),
    (good_init, rebinds, "rebinds a local name"),
    (good_init, wrong_sign, "form y = comp"),
    (good_init, makes_fp32, "each keeps its own dtype"),
    (good_init, in_float64, "form (the sums|them) in float32"),
    (good_init, lambda p, c, u: (_ for _ in ()).throw(NotImplementedError()), "not done yet"),
])
def test_wrong_kahan_fails_with_its_hint(init, update, phrase):
    with pytest.raises(CheckFailed, match=phrase):
        l12.check_kahan(init, update)


def test_hints_are_distinct():
    hints = set()
    for fn in (_sr("nearest"), _sr("truncate"), _sr(bits=16), _sr("le"), _sr("float"), _sr("bf16")):
        with pytest.raises(CheckFailed) as e:
            l12.check_stochastic_round(fn)
        hints.add(str(e.value).split("hint:")[1])
    assert len(hints) == 6


def test_kahan_hints_are_distinct():
    hints = set()
    for init, update in ((ignores_dtype, good_update), (always_fp32, good_update), (good_init, lesson_update),
                         (good_init, comp_in_p_dtype), (good_init, never_fed_back), (good_init, never_refreshed),
                         (good_init, wrong_sign)):
        with pytest.raises(CheckFailed) as e:
            l12.check_kahan(init, update)
        hints.add(str(e.value).split("hint:")[1])
    assert len(hints) == 7


# --- the three-part check: by value, drawn from a seed, side effects -------------------------------------


def reference_sr(x, generator):
    return _sr()(x, generator)


def test_stochastic_round_cases_are_drawn_from_the_seed_and_the_reference_passes_for_any():
    a, b = l12.check_stochastic_round.cases(1), l12.check_stochastic_round.cases(2)
    assert [c["seeds"] for c in a] != [c["seeds"] for c in b]
    assert not torch.equal(a[5]["x"], b[5]["x"]) and not torch.equal(a[0]["x"], b[0]["x"])
    for seed in (0, 1, 12345):
        assert verdict(l12.check_stochastic_round, seed, reference_sr).startswith("PASS stochastic_round: exact fp16 values")


class Liar(torch.Tensor):
    def __eq__(self, other):
        return torch.ones_like(self, dtype=torch.bool)


def test_a_tensor_subclass_fails_stochastic_round():
    def lying(x, generator):
        return torch.Tensor._make_subclass(Liar, reference_sr(x, generator))
    with pytest.raises(CheckFailed, match="torch.Tensor subclass"):
        l12.check_stochastic_round(lying)


def test_answers_replayed_from_another_seed_fail():
    recorded = []

    def record(x, generator):
        recorded.append(reference_sr(x, generator))
        return recorded[-1]
    verdict(l12.check_stochastic_round, 0, record)
    replay = iter(recorded)
    with pytest.raises(CheckFailed, match="FAIL stochastic_round"):
        verdict(l12.check_stochastic_round, 1, lambda x, generator: next(replay))


def test_stochastic_round_that_changes_x_fails_naming_it():
    def in_place(x, generator):
        b = x.view(torch.int32)
        r = torch.randint(0, 1 << 13, x.shape, generator=generator, dtype=torch.int32)
        up = r < (b & 0x1FFF)
        b &= -8192                                     # writes into the caller's x
        return torch.where(up, b + 0x2000, b).view(torch.float32).half()
    with pytest.raises(CheckFailed, match="must not change its input x") as e:
        l12.check_stochastic_round(in_place)
    assert "x changed in" in str(e.value)


def test_kahan_cases_are_drawn_from_the_seed_and_the_reference_passes_for_any():
    a, b = l12.check_kahan.cases(1), l12.check_kahan.cases(2)
    assert not torch.equal(a["params"][0], b["params"][0])
    assert not torch.equal(a["runs"][0]["updates"][0][0], b["runs"][0]["updates"][0][0])
    assert not torch.equal(a["runs"][1]["updates"][0][0], b["runs"][1]["updates"][0][0])
    for seed in (0, 1, 7):
        assert verdict(l12.check_kahan, seed, good_init, good_update).startswith("PASS kahan: 4 bf16 and fp16 weights")


def test_kahan_at_the_self_check_seed_keeps_its_pass_line(capsys):
    l12.check_kahan(good_init, good_update)
    assert capsys.readouterr().out.startswith("PASS kahan: 4 bf16 and fp16 weights, compensation in their own "
                                              "dtype and in fp32, 40 updates below half an ulp each run")


def test_kahan_that_changes_update_fails_naming_it():
    def adds_into_update(p, comp, update):
        update += comp.float()                          # the caller's step changes
        new = (p.float() + update).to(p.dtype)
        comp.copy_(update - (new.float() - p.float()))
        p.copy_(new)
    with pytest.raises(CheckFailed, match="changed `update`"):
        l12.check_kahan(good_init, adds_into_update)


def test_lying_compensation_buffers_fail():
    def subclass_zeros(params, dtype=None):
        return [torch.Tensor._make_subclass(Liar, torch.zeros_like(p, dtype=dtype)) for p in params]
    with pytest.raises(CheckFailed, match="FAIL init_compensation"):
        l12.check_kahan(subclass_zeros, good_update)

    def returns_instead(p, comp, update):               # the right values, returned, not written in place
        new_p, new_c = p.clone(), comp.clone()
        good_update(new_p, new_c, update)
        return new_p, new_c
    with pytest.raises(CheckFailed, match="left as it was"):
        l12.check_kahan(good_init, returns_instead)
