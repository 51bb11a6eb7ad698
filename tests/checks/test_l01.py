"""Exercise 01's graders, both ways: the reference passes, plausible wrong answers fail usefully."""

import math

import pytest

from amp_edu.checks import l01
from amp_edu.checks.core import CheckFailed


# --- part A: decode -------------------------------------------------------------------------
def decode_ok(bits, exponent_bits=5, mantissa_bits=10):
    bits = bits.replace(" ", "")
    sign = -1.0 if bits[0] == "1" else 1.0
    field, frac = int(bits[1:1 + exponent_bits], 2), int(bits[1 + exponent_bits:], 2)
    bias = 2 ** (exponent_bits - 1) - 1
    if field == 2 ** exponent_bits - 1:
        return sign * math.inf if frac == 0 else math.nan
    if field == 0:
        return sign * frac * 2.0 ** (1 - bias - mantissa_bits)
    return sign * (1 + frac / 2 ** mantissa_bits) * 2.0 ** (field - bias)


def make_decode(*, bias_fn=lambda E: 2 ** (E - 1) - 1, subnormal="ok", top="ok", signed_zero=True,
                implicit_one=True):
    """decode_ok with one mistake switched in."""
    def decode(bits, exponent_bits=5, mantissa_bits=10):
        bits = bits.replace(" ", "")
        E, M = exponent_bits, mantissa_bits
        sign = -1.0 if bits[0] == "1" else 1.0
        field, frac = int(bits[1:1 + E], 2), int(bits[1 + E:], 2)
        bias = bias_fn(E)
        if field == 2 ** E - 1 and top != "normal":
            if top == "swap":
                return math.nan if frac == 0 else sign * math.inf
            return sign * math.inf if frac == 0 else math.nan
        if field == 0 and subnormal != "like_normal":
            if frac == 0 and not signed_zero:
                return 0.0
            exp = 1 - bias if subnormal == "ok" else -bias
            return sign * frac * 2.0 ** (exp - M)
        lead = 1 if implicit_one else 0
        return sign * (lead + frac / 2 ** M) * 2.0 ** (field - bias)
    return decode


def test_reference_decode_passes(capsys):
    l01.check_decode(decode_ok)
    assert capsys.readouterr().out.startswith("PASS decode: ")


@pytest.mark.parametrize("wrong, where, hint", [
    (make_decode(bias_fn=lambda E: 2 ** (E - 1)), "0 01111 0000000000", "not 2^(E-1) = 16"),
    (make_decode(subnormal="like_normal"), "0 00000 0000000001", "no implicit leading 1"),
    (make_decode(subnormal="minus_bias"), "0 00000 0000000001", "1 - bias = -14"),
    (make_decode(signed_zero=False), "1 00000 0000000000", "-0.0"),
    (make_decode(top="normal"), "0 11111 0000000000", "all ones is special"),
    (make_decode(top="swap"), "0 11111 0000000000", "mantissa 0 is ±inf"),
    (make_decode(implicit_one=False), "0 01111 0000000000", "implicit leading 1"),
    (make_decode(bias_fn=lambda E: 15), "0 01111111 0000000", "not fp16's 15"),
])
def test_wrong_decoders_fail_with_input_and_hint(wrong, where, hint):
    with pytest.raises(CheckFailed) as err:
        l01.check_decode(wrong)
    msg = str(err.value)
    assert msg.startswith("FAIL decode")
    assert where in msg and "expected:" in msg and "got:" in msg
    assert hint in msg


def test_sign_mistake_and_wrong_types_fail():
    def unsigned(bits, E=5, M=10):
        return abs(decode_ok(bits, E, M))
    with pytest.raises(CheckFailed, match="1 means negative"):
        l01.check_decode(unsigned)
    with pytest.raises(CheckFailed, match="Python float"):
        l01.check_decode(lambda bits, E=5, M=10: str(decode_ok(bits, E, M)))


def test_a_single_wrong_pattern_is_caught_by_the_sweep():
    def almost(bits, E=5, M=10):
        if bits.replace(" ", "") == "0101010101010101":        # not among the named cases
            return 0.0
        return decode_ok(bits, E, M)
    with pytest.raises(CheckFailed, match="0 10101 0101010101"):
        l01.check_decode(almost)


# --- part B: fp16_fate ----------------------------------------------------------------------
def make_fate(*, zero_below=2.0 ** -25, zero_tie=True, normal_from=2.0 ** -14 - 2.0 ** -25,
              inf_from=65520.0, inf_tie=True, use_abs=True, nan=True):
    def fate(x):
        if nan and math.isnan(x):
            return "nan"
        a = abs(x) if use_abs else x
        if a < zero_below or (zero_tie and a == zero_below):
            return "zero"
        if a < normal_from:
            return "subnormal"
        if a < inf_from or (not inf_tie and a == inf_from):
            return "normal"
        return "inf"
    return fate


def test_reference_fate_passes(capsys):
    l01.check_fp16_fate(make_fate())
    assert capsys.readouterr().out.startswith("PASS fp16_fate: ")


@pytest.mark.parametrize("wrong, where, hint", [
    (make_fate(zero_below=6e-8, zero_tie=False), "5.960464477539063e-08", "smallest value fp16 stores"),  # the tutorial's 6e-8
    (make_fate(zero_tie=False), "2.9802322387695312e-08", "a tie"),                          # 2^-25 kept
    (make_fate(zero_below=2.0 ** -24, zero_tie=False), "2.999999892949745e-08", "round UP to 2^-24"),  # truncating
    (make_fate(zero_below=2.0 ** -24), "5.960464477539063e-08", "smallest value fp16 stores"),  # 2^-24 for 2^-25
    (make_fate(normal_from=2.0 ** -14), "6.100535", "halfway between it and 2^-14"),
    (make_fate(inf_from=65504.0, inf_tie=False), "65519.98828125", "round DOWN"),
    (make_fate(inf_tie=False), "65520.0", "ties go to even, so it overflows"),
    (make_fate(use_abs=False), "-2.9999999242136255e-05", "abs(x)"),
    (make_fate(nan=False), "nan", "math.isnan"),
])
def test_wrong_fates_fail_with_input_and_hint(wrong, where, hint):
    with pytest.raises(CheckFailed) as err:
        l01.check_fp16_fate(wrong)
    msg = str(err.value)
    assert msg.startswith("FAIL fp16_fate")
    assert f"input:    {where}" in msg, msg
    assert hint in msg, msg


def test_fate_rejects_odd_return_values():
    with pytest.raises(CheckFailed, match="return one of"):
        l01.check_fp16_fate(lambda x: "Normal")
    with pytest.raises(CheckFailed, match="return one of"):
        l01.check_fp16_fate(lambda x: 1)
