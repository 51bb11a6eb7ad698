"""amp_edu.formats agrees with torch's casts bit for bit: every pattern, every tie, overflow."""

import math

import pytest
import torch

from amp_edu import formats
from amp_edu.formats.fate import FATES, fate, fate_counts
from amp_edu.formats.fields import decompose
from amp_edu.formats.format import (ALL_FORMATS, FORMATS, FP4_E2M1, FP8_E8M0, FP16, Format, dtype_name, get,
                                    name_of, short_name)
from amp_edu.formats.rounding import decode, encode, quantize

SMALL = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]          # the formats torch has a dtype for


def torch_bits(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """Bit patterns torch stores for float values ``x`` cast (from float32) to ``fmt``'s dtype."""
    f = FORMATS[fmt]
    y = x.to(torch.float32).to(f.dtype)
    view = {1: torch.uint8, 2: torch.int16}[y.element_size()]
    return y.view(view).to(torch.int64) & (2 ** f.bits - 1)


def torch_values(codes: torch.Tensor, fmt: str) -> torch.Tensor:
    """What torch says each bit pattern means."""
    f = FORMATS[fmt]
    view = {8: torch.uint8, 16: torch.int16}[f.bits]
    return codes.to(view).view(f.dtype).to(torch.float64)


def assert_same_bits(ours: torch.Tensor, theirs: torch.Tensor, fmt: str, inputs: torch.Tensor):
    """Equal patterns; NaN payloads differ between torch's code paths, so NaN only needs NaN."""
    f = FORMATS[fmt]
    nan_ours = decode(ours, f).isnan()
    nan_theirs = decode(theirs, f).isnan()
    assert torch.equal(nan_ours, nan_theirs), inputs[nan_ours != nan_theirs][:5]
    bad = (ours != theirs) & ~nan_ours
    assert not bad.any(), (f"{fmt}: inputs {inputs[bad][:5].tolist()} -> ours "
                           f"{[bin(c) for c in ours[bad][:5].tolist()]}, torch "
                           f"{[bin(c) for c in theirs[bad][:5].tolist()]}")


# --- the contract -----------------------------------------------------------------------------
def test_formats_contract_fields():
    assert list(FORMATS) == ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
    want = {  # name: (dtype, E, M, bias, max, smallest normal, smallest subnormal, eps)
        "fp32": (torch.float32, 8, 23, 127, torch.finfo(torch.float32).max, 2.0 ** -126, 2.0 ** -149, 2.0 ** -23),
        "tf32": (None, 8, 10, 127, (2 - 2.0 ** -10) * 2.0 ** 127, 2.0 ** -126, 2.0 ** -136, 2.0 ** -10),
        "fp16": (torch.float16, 5, 10, 15, 65504.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -10),
        "bf16": (torch.bfloat16, 8, 7, 127, torch.finfo(torch.bfloat16).max, 2.0 ** -126, 2.0 ** -133, 2.0 ** -7),
        "fp8_e4m3": (torch.float8_e4m3fn, 4, 3, 7, 448.0, 2.0 ** -6, 2.0 ** -9, 2.0 ** -3),
        "fp8_e5m2": (torch.float8_e5m2, 5, 2, 15, 57344.0, 2.0 ** -14, 2.0 ** -16, 2.0 ** -2),
    }
    for name, (dtype, E, M, bias, mx, normal, sub, eps) in want.items():
        f = FORMATS[name]
        got = (f.dtype, f.exponent_bits, f.mantissa_bits, f.bias, f.max, f.smallest_normal,
               f.smallest_subnormal, f.eps)
        assert got == (dtype, E, M, bias, mx, normal, sub, eps), name
        assert f.name == name
        for attr in ("max", "smallest_normal", "smallest_subnormal", "eps"):
            assert isinstance(getattr(f, attr), float)
        if dtype is not None:
            fi = torch.finfo(dtype)
            assert (fi.max, fi.smallest_normal, fi.eps) == (f.max, f.smallest_normal, f.eps), name


def test_overflow_thresholds():
    assert FORMATS["fp16"].overflow_threshold == 65520.0
    assert FORMATS["fp8_e4m3"].overflow_threshold == 464.0
    assert FORMATS["fp8_e5m2"].overflow_threshold == 61440.0


def test_e4m3_overflow_policy_is_what_this_torch_does():
    got = torch.tensor([1e4, -1e4]).to(torch.float8_e4m3fn).float()
    want = {"saturate": [448.0, -448.0], "nan": [math.nan, math.nan]}[FORMATS["fp8_e4m3"].overflow]
    assert torch.equal(got.isnan(), torch.tensor(want).isnan())
    assert got[~got.isnan()].tolist() == [w for w in want if not math.isnan(w)]


# --- every bit pattern --------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", SMALL)
def test_every_pattern_decodes_and_round_trips_like_torch(fmt):
    f = FORMATS[fmt]
    codes = torch.arange(2 ** f.bits)
    ours = decode(codes, f)
    theirs = torch_values(codes, fmt)
    assert torch.equal(ours.isnan(), theirs.isnan())
    ok = ~ours.isnan()
    assert torch.equal(ours[ok], theirs[ok])
    assert torch.equal(torch.signbit(ours[ok]), torch.signbit(theirs[ok]))      # -0.0 too
    # value -> our encode and torch's cast -> the same pattern again
    assert torch.equal(encode(ours[ok], f), codes[ok])
    assert_same_bits(encode(ours, f), torch_bits(ours, fmt), fmt, ours)


@pytest.mark.parametrize("fmt", SMALL)
def test_every_tie_and_its_neighbours(fmt):
    f = FORMATS[fmt]
    vals = formats.representable(f, 0.0)
    # pairs of neighbours, plus (max, the step above it) whose midpoint is the overflow threshold
    a = torch.cat([vals[:-1], vals[-1:]])
    b = torch.cat([vals[1:], torch.tensor([2 * f.overflow_threshold - f.max], dtype=torch.float64)])
    mid = (a + b) / 2
    assert torch.equal(mid.float().double(), mid), "midpoints must be exact in float32"
    mid32 = mid.float()
    below = torch.nextafter(mid32, torch.tensor(0.0))
    above = torch.nextafter(mid32, torch.tensor(math.inf))
    for sign in (1.0, -1.0):
        for x in (mid32, below, above):
            x = sign * x
            assert_same_bits(encode(x, f), torch_bits(x, fmt), fmt, x)
    # independent of torch: ties go to the neighbour with the even (last bit 0) pattern
    ca, cb = encode(a, f), encode(b[:-1], f)
    even = torch.where(ca[:-1] % 2 == 0, a[:-1], b[:-1])
    assert torch.equal(quantize(mid[:-1], f), even)
    assert torch.equal(quantize(below.double()[:-1], f), a[:-1])
    assert torch.equal(quantize(above.double()[:-1], f), b[:-1])


@pytest.mark.parametrize("fmt", SMALL)
def test_random_float32_patterns_including_nan_inf_subnormals(fmt):
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-2 ** 31, 2 ** 31, (50_000,), generator=g, dtype=torch.int64)
    x = bits.to(torch.int32).view(torch.float32)
    # and values near this format's own range, where its rounding happens
    f = FORMATS[fmt]
    near = torch.exp2(torch.empty(30_000).uniform_(math.log2(f.smallest_subnormal) - 3,
                                                    math.log2(f.max) + 2, generator=g))
    x = torch.cat([x, near, -near, torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan])])
    assert_same_bits(encode(x, f), torch_bits(x, fmt), fmt, x)


@pytest.mark.parametrize("fmt", SMALL)
def test_overflow_boundaries(fmt):
    f = FORMATS[fmt]
    t = torch.tensor([f.overflow_threshold], dtype=torch.float32)
    edge = torch.cat([torch.nextafter(t, torch.tensor(0.0)), t, torch.nextafter(t, torch.tensor(math.inf)),
                      torch.tensor([f.max, 2 * f.max, 3e38, math.inf])])
    x = torch.cat([edge, -edge])
    assert_same_bits(encode(x, f), torch_bits(x, fmt), fmt, x)


@pytest.mark.parametrize("fmt", SMALL)
def test_float64_input_goes_through_float32_like_torch(fmt):
    f = FORMATS[fmt]
    mid = (formats.representable(f, 0.0)[:-1] + formats.representable(f, 0.0)[1:]) / 2
    x = torch.cat([mid * (1 + 2.0 ** -40), mid * (1 - 2.0 ** -40)])    # off the tie, below float32's ulp
    theirs = x.to(f.dtype)                                              # float64 -> dtype in torch
    view = {8: torch.uint8, 16: torch.int16}[f.bits]
    theirs = theirs.view(view).to(torch.int64) & (2 ** f.bits - 1)
    assert_same_bits(encode(x, f), theirs, fmt, x)


# --- tf32: fp32 rounded to 10 mantissa bits ------------------------------------------------------
def tf32_by_bit_trick(x32: torch.Tensor) -> torch.Tensor:
    """The usual integer trick: add 0xFFF plus the last kept bit, clear the 13 dropped bits."""
    b = x32.view(torch.int32).to(torch.int64) & 0xFFFF_FFFF
    sign, mag = b >> 31, b & 0x7FFF_FFFF
    r = (mag + 0xFFF + ((mag >> 13) & 1)) & ~0x1FFF
    return (sign << 18) | (r >> 13)


def test_tf32_matches_the_bit_trick():
    g = torch.Generator().manual_seed(1)
    bits = torch.randint(-2 ** 31, 2 ** 31, (50_000,), generator=g, dtype=torch.int64)
    x = bits.to(torch.int32).view(torch.float32)
    x = x[~x.isnan()]
    fp32_max = torch.finfo(torch.float32).max
    ties = torch.tensor([0x3F801000, 0x3F803000, 0x3F800FFF, 0x3F801001, 0x00001000, 0x00003000,
                         0x7F7FF000, 0x7F7FEFFF, 0x7F7FFFFF, 0x00000001], dtype=torch.int32).view(torch.float32)
    x = torch.cat([x, ties, -ties, torch.tensor([0.0, -0.0, math.inf, -math.inf, fp32_max, 1.0, 1 / 3])])
    f = FORMATS["tf32"]
    assert torch.equal(encode(x, f), tf32_by_bit_trick(x))
    assert decompose(math.nan, "tf32").kind == "nan"
    assert decompose(3.402e38, "tf32").kind == "inf"         # above tf32's max + half an ulp


# --- decompose --------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_decompose_fields_are_consistent(fmt):
    f = FORMATS[fmt]
    for x in [1.0, -2.5, 0.1, 1e-3, 3e-8, 2.0 ** -25, 65519.99, 65520.0, 1e5, 1e-40, -0.0, 0.0,
              math.inf, -math.inf, math.nan, 1e39, 2 ** 70]:
        d = decompose(x, fmt)
        assert len(d.bits) == f.bits and set(d.bits) <= {"0", "1"}
        assert int(d.bits, 2) == (d.sign << (f.bits - 1)) | (d.exponent << f.mantissa_bits) | d.mantissa
        assert d.kind in ("zero", "subnormal", "normal", "inf", "nan")
        assert "".join(d.fields) == d.bits
        q = quantize(torch.tensor([x], dtype=torch.float64), f)[0].item()
        assert (math.isnan(q) and math.isnan(d.value)) or (q == d.value and math.copysign(1, q) == math.copysign(1, d.value))
        if f.dtype is not None:
            t = torch.tensor([x], dtype=torch.float32).to(f.dtype).double().item()
            assert (math.isnan(t) and math.isnan(d.value)) or (t == d.value), (fmt, x)


def test_decompose_teaches_the_fp16_landmarks():
    assert decompose(2.0 ** -24, "fp16").bits == "0000000000000001"
    assert decompose(2.0 ** -24, "fp16").kind == "subnormal"
    tie = decompose(2.0 ** -25, "fp16")
    assert (tie.kind, tie.value, tie.rounded_to_zero) == ("zero", 0.0, True)
    just_above = float(torch.nextafter(torch.tensor(2.0 ** -25), torch.tensor(1.0)))
    assert decompose(just_above, "fp16").value == 2.0 ** -24
    assert decompose(1.5 * 2.0 ** -24, "fp16").value == 2.0 ** -23          # tie to even (2 is even)
    assert decompose(65519.99, "fp16").value == 65504.0
    big = decompose(65520.0, "fp16")
    assert (big.kind, big.value, big.overflowed, big.bits) == ("inf", math.inf, True, "0111110000000000")
    neg = decompose(-0.0, "fp16")
    assert (neg.sign, neg.kind, neg.bits) == (1, "zero", "1000000000000000")
    one = decompose(1.0, "fp16")
    assert (one.exponent, one.mantissa, one.true_exponent) == (15, 0, 0)
    assert one.equation() == "+1.0000000000₂ × 2^0 = 1.0"
    assert decompose(1 + 1e-4, "fp16").value == 1.0
    assert decompose(2049, "fp16").value == 2048.0


def test_decompose_errors_and_rel_error():
    d = decompose(0.1, "fp16")
    assert d.abs_error == abs(d.value - 0.1) and d.rel_error == d.abs_error / 0.1
    assert decompose(1e-9, "fp16").rel_error == 1.0
    assert decompose(0.0, "fp16").rel_error == 0.0
    assert decompose(math.inf, "fp16").abs_error == 0.0 and not decompose(math.inf, "fp16").overflowed
    assert decompose(1000.0, "fp8_e4m3").overflowed
    assert not decompose(464.0, "fp8_e4m3").overflowed      # the tie rounds down to 448 (110 is even)
    assert decompose(61440.0, "fp8_e5m2").overflowed        # the tie rounds up: 57344 is 1.11₂


def test_decompose_accepts_ints_numpy_and_dtypes():
    import numpy as np
    assert decompose(3, "fp16").value == 3.0
    assert decompose(np.float32(0.5), "fp16").value == 0.5
    assert decompose(10 ** 400, "fp16").kind == "inf"
    assert decompose(-(10 ** 400), "fp32").value == -math.inf
    assert decompose(2.0, torch.bfloat16).format is FORMATS["bf16"]
    assert decompose(2.0, FORMATS["fp8_e5m2"]).bits == "01000000"


@pytest.mark.parametrize("bad", [True, "1.0", None, torch.tensor(1.0), [1.0], 1j])
def test_decompose_rejects_non_numbers(bad):
    with pytest.raises(TypeError, match="real number"):
        decompose(bad, "fp16")


def test_decompose_tensor_hint_and_bad_formats():
    with pytest.raises(TypeError, match=r"\.item\(\)"):
        decompose(torch.tensor(1.0), "fp16")
    with pytest.raises(ValueError, match="fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2"):
        decompose(1.0, "fp12")
    with pytest.raises(TypeError, match="format name"):
        decompose(1.0, 16)
    with pytest.raises(ValueError, match="accepted dtypes"):
        decompose(1.0, torch.float64)


def test_custom_format_and_validation():
    e3m2 = Format("e3m2", 3, 2)
    assert e3m2.bias == 3 and e3m2.max == 14.0 and e3m2.smallest_subnormal == 2.0 ** -4
    assert decompose(15.0, e3m2).kind == "inf"
    assert decompose(13.0, e3m2).value == 12.0                 # tie between 12 (1.10₂) and 14 (1.11₂)
    for kwargs, err in [(dict(exponent_bits=1), ValueError), (dict(exponent_bits=9), ValueError),
                        (dict(mantissa_bits=0), ValueError), (dict(mantissa_bits=2.0), TypeError),
                        (dict(overflow="clip"), ValueError), (dict(dtype="float16"), TypeError)]:
        args = dict(name="x", exponent_bits=3, mantissa_bits=2) | kwargs
        with pytest.raises(err):
            Format(**args)


# --- ulp, representable, neighbours -------------------------------------------------------------
@pytest.mark.parametrize("fmt", SMALL)
def test_ulp_is_the_gap_to_the_next_value(fmt):
    vals = formats.representable(fmt, 0.0)
    gaps = vals[1:] - vals[:-1]
    got = torch.tensor([formats.ulp(v, fmt) for v in vals[:-1].tolist()], dtype=torch.float64)
    assert torch.equal(got, gaps)


def test_ulp_values_and_errors():
    assert formats.ulp(1.0, "fp16") == 2.0 ** -10
    assert formats.ulp(2048.0, "fp16") == 2.0
    assert formats.ulp(0.0, "fp16") == 2.0 ** -24
    assert formats.ulp(-3.0, "bf16") == 2.0 ** -6
    assert formats.ulp(1.0, "fp32") == 2.0 ** -23 and formats.ulp(1.0, "tf32") == 2.0 ** -10
    with pytest.raises(ValueError, match="max"):
        formats.ulp(70000.0, "fp16")
    with pytest.raises(ValueError, match="finite"):
        formats.ulp(math.nan, "fp16")
    with pytest.raises(TypeError):
        formats.ulp("1", "fp16")


def test_representable_and_neighbours():
    fp16 = formats.representable("fp16")
    assert fp16.numel() == 2 * 31 * 1024 - 1                    # finite patterns, one zero
    assert fp16[0] == -65504 and fp16[-1] == 65504 and bool((fp16[1:] > fp16[:-1]).all())
    assert formats.representable("fp8_e4m3", 0.0).numel() == 127
    assert formats.representable("fp16", 1.0, 2.0).numel() == 1025
    with pytest.raises(ValueError, match="at most 16 bits"):
        formats.representable("fp32")
    with pytest.raises(ValueError, match="lo <= hi"):
        formats.representable("fp16", 2.0, 1.0)
    below, above = formats.neighbours(1.0, "fp16", 2)
    assert below.tolist() == [1 - 2.0 ** -11, 1.0] and above.tolist() == [1 + 2.0 ** -10, 1 + 2.0 ** -9]
    with pytest.raises(ValueError, match="count"):
        formats.neighbours(1.0, "fp16", 0)


def test_decode_and_encode_errors():
    with pytest.raises(ValueError, match="0 .. 2"):
        decode([256], "fp8_e4m3")
    with pytest.raises(TypeError, match="integers"):
        decode(torch.tensor([1.0]), "fp16")
    with pytest.raises(TypeError, match="real numbers"):
        encode(torch.tensor([True]), "fp16")


# --- accumulation -------------------------------------------------------------------------------
def test_running_sum_stalls_in_fp16_not_in_fp32():
    s16 = formats.running_sum(0.01, 4000, acc_dtype=torch.float16)
    assert s16[-1] == 32.0 and s16[3500] == 32.0                # half an ulp at 32 is 1/64 > 0.01
    s32 = formats.running_sum(0.01, 4000, acc_dtype=torch.float32, input_dtype=torch.float16)
    x16 = torch.tensor(0.01, dtype=torch.float16).item()
    assert abs(s32[-1].item() - 4000 * x16) < 1e-3
    with pytest.raises(ValueError):
        formats.running_sum(0.01, 0, acc_dtype=torch.float16)
    with pytest.raises(TypeError):
        formats.running_sum(0.01, 10, acc_dtype=torch.int32)


# --- the MX formats: e8m0 (scales) and e2m1 (fp4 elements) ---------------------------------------
def _all_float32_exponents_sample() -> torch.Tensor:
    """Every float32 exponent field × mantissas that hit every rounding case (ties, guard, sticky)."""
    fields = torch.arange(256, dtype=torch.int64)
    mants = torch.tensor([0, 1, 0x1FFFFF, 0x200000, 0x3FFFFF, 0x400000, 0x400001, 0x5FFFFF, 0x600000,
                          0x7FFFFE, 0x7FFFFF], dtype=torch.int64)
    bits = (fields[:, None] << 23 | mants[None, :]).reshape(-1)
    bits = torch.cat([bits, bits | (1 << 31)])                     # and the negatives
    g = torch.Generator().manual_seed(0)
    bits = torch.cat([bits, torch.randint(0, 2 ** 32, (200_000,), generator=g, dtype=torch.int64)])
    return _int_to_f32(bits)


def _int_to_f32(bits: torch.Tensor) -> torch.Tensor:
    signed = torch.where(bits >= 2 ** 31, bits - 2 ** 32, bits)
    return signed.to(torch.int32).view(torch.float32)


def test_e8m0_is_torchs_float8_e8m0fnu_bit_for_bit():
    x = _all_float32_exponents_sample()
    theirs = x.to(torch.float8_e8m0fnu).view(torch.uint8).to(torch.int64)
    ours = encode(x, "fp8_e8m0")
    bad = ours != theirs
    assert not bad.any(), (x[bad][:5].tolist(), ours[bad][:5].tolist(), theirs[bad][:5].tolist())
    codes = torch.arange(256)
    want = codes.to(torch.uint8).view(torch.float8_e8m0fnu).to(torch.float64)
    got = decode(codes, "fp8_e8m0")
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got[:255], want[:255])


def test_e8m0_fields_and_constants_match_torch_finfo():
    f = FP8_E8M0
    fi = torch.finfo(torch.float8_e8m0fnu)
    assert (f.bits, f.bias, f.signed, f.has_inf, f.has_zero) == (8, 127, False, False, False)
    assert (f.max, f.smallest_normal, f.eps) == (fi.max, fi.smallest_normal, fi.eps)
    assert f.smallest_subnormal == f.smallest_normal == 2.0 ** -127   # no subnormals
    assert formats.representable(f).numel() == 255                       # 2^-127 .. 2^127
    d = decompose(-3.0, "e8m0")           # no sign bit: torch stores |x|; 3 is a tie, it goes up
    assert (d.bits, d.sign, d.fields, d.kind, d.value) == ("10000001", 0, ("", "10000001", ""), "normal", 4.0)
    assert d.equation() == "+2^2 = 4.0"
    assert decompose(0.0, "fp8_e8m0").value == 2.0 ** -127               # no zero
    assert fate(0.0, "fp8_e8m0") == "normal"
    assert decompose(1.5 * 2.0 ** 127, "fp8_e8m0").kind == "nan"         # overflow → NaN
    assert decompose(math.inf, "fp8_e8m0").kind == "nan"
    assert fate(1.5 * 2.0 ** 127, "fp8_e8m0") == "overflow"


# OCP MX v1.0 spec, table of FP4 E2M1 values: S.EE.M with bias 1; field 0 is 0.M × 2^0.
E2M1_TABLE = {0b000: 0.0, 0b001: 0.5, 0b010: 1.0, 0b011: 1.5, 0b100: 2.0, 0b101: 3.0, 0b110: 4.0, 0b111: 6.0}


def test_e2m1_decodes_the_ocp_table():
    f = FP4_E2M1
    assert (f.bits, f.bias, f.max, f.smallest_normal, f.smallest_subnormal, f.eps) == (4, 1, 6.0, 1.0, 0.5, 0.5)
    assert f.dtype is None and get(torch.float4_e2m1fn_x2) is f and f.nan_code is None
    for code, v in E2M1_TABLE.items():
        assert decode(code, f).item() == v and decode(code | 0b1000, f).item() == -v
    assert formats.representable(f).tolist() == sorted({s * v for v in E2M1_TABLE.values() for s in (1, -1)})


def _nearest_even(x: float) -> float:
    """Round x to the e2m1 grid from the table alone: nearest, ties to the even code, saturate."""
    grid = sorted(E2M1_TABLE.items(), key=lambda kv: kv[1])
    a = min(abs(x), 6.0)
    best = min(grid, key=lambda kv: (abs(kv[1] - a), kv[0] & 1))
    return math.copysign(best[1], x)


def test_e2m1_rounds_to_nearest_even_and_saturates():
    xs = [i / 16 for i in range(-120, 121)] + [6.5, 7.0, 7.5, 100.0, -1e30, math.inf, -math.inf]
    got = quantize(torch.tensor(xs, dtype=torch.float64), "fp4_e2m1").tolist()
    assert got == [_nearest_even(x) for x in xs]
    assert decompose(0.25, "fp4_e2m1").kind == "zero"          # the tie between 0 and 0.5
    assert decompose(0.75, "fp4").value == 1.0 and decompose(5.0, "e2m1").value == 4.0
    assert fate(7.0, "fp4_e2m1") == "overflow" and fate(0.2, "fp4_e2m1") == "flush"
    with pytest.raises(ValueError, match="no NaN"):
        encode(torch.tensor([1.0, math.nan]), "fp4_e2m1")


def test_e2m1_matches_torchao_mx_helpers():
    kernels = pytest.importorskip("torchao.prototype.mx_formats.kernels")
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.arange(-160, 161) / 16, torch.randn(20_000, generator=g) * 3,
                   torch.tensor([1e-30, -1e-30, 7.0, -7.0, 1e30, -1e30, math.inf, -math.inf])]).float()
    theirs = kernels.f32_to_f4_unpacked(x).to(torch.int64)
    ours = encode(x, "fp4_e2m1")
    bad = ours != theirs
    assert not bad.any(), (x[bad][:5].tolist(), ours[bad][:5].tolist(), theirs[bad][:5].tolist())
    codes = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(kernels.f4_unpacked_to_f32(codes).double(), decode(codes, "fp4_e2m1"))


def test_format_allows_the_mx_layouts_and_checks_them():
    Format("u4", 4, 0, overflow="nan", signed=False, subnormals=False)
    for kwargs in [dict(mantissa_bits=0), dict(nan=False), dict(nan=False, overflow="nan")]:
        with pytest.raises(ValueError):
            Format(**(dict(name="x", exponent_bits=3, mantissa_bits=2) | kwargs))
    with pytest.raises(TypeError):
        Format("x", 3, 2, signed=1)


# --- lookup, names and the fate of a value ---------------------------------------------------------
def test_lookup_by_name_alias_dtype_or_format():
    for x in ("fp16", "half", "float16", torch.float16, FP16):
        assert get(x) is FP16 and name_of(x) == "fp16"
    assert name_of("bfloat16") == name_of(torch.bfloat16) == "bf16"
    assert get("float8_e8m0fnu") is FP8_E8M0
    assert set(ALL_FORMATS) == set(FORMATS) | {"fp8_e8m0", "fp4_e2m1"}
    with pytest.raises(ValueError, match="half"):
        get("fp12")
    with pytest.raises(ValueError, match="accepted dtypes"):
        get(torch.int8)
    with pytest.raises(TypeError, match="format name"):
        get(3.0)


def test_labels_colours_and_dtype_names():
    labels = [f.label for f in ALL_FORMATS.values()]
    colours = [f.color for f in ALL_FORMATS.values()]
    assert len(set(labels)) == len(labels) and len(set(colours)) == len(colours) and None not in colours
    assert dtype_name(torch.float8_e4m3fn) == "float8_e4m3fn"
    assert [short_name(d) for d in (torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.bool)] \
        == ["fp32", "bf16", "fp64", "int64", "bool"]
    with pytest.raises(TypeError):
        dtype_name("float16")


@pytest.mark.parametrize("fmt", SMALL + ["fp4_e2m1", "fp8_e8m0"])
def test_fate_of_a_tensor_agrees_with_decompose(fmt):
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.randn(3000, generator=g) * 2.0 ** torch.randint(-40, 40, (3000,), generator=g),
                   torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan])]).float()
    got = fate(x, fmt)
    assert got.dtype == torch.int8 and got.shape == x.shape
    for v, k in zip(x.tolist()[::7] + x.tolist()[-5:], got.tolist()[::7] + got.tolist()[-5:]):
        assert FATES[k] == fate(v, fmt)
        if math.isfinite(v):
            d = decompose(v, fmt)
            assert (FATES[k] == "overflow") == d.overflowed
            assert (FATES[k] == "flush") == d.rounded_to_zero
            assert (FATES[k] == "subnormal") == (d.kind == "subnormal")


def test_fate_scale_counts_and_errors():
    x = torch.tensor([0.0, 1e-9, 1e-6, 1.0, 7e4, math.inf])
    assert fate(x, "fp16").tolist() == [0, 1, 2, 3, 4, 5]
    assert fate(1e-10, "fp16", scale=2.0 ** 16) == "subnormal"
    assert fate_counts(x, "bf16") == {"zero": 1, "flush": 0, "subnormal": 0, "normal": 4,
                                              "overflow": 0, "nonfinite": 1}
    with pytest.raises(ValueError, match="scale"):
        fate(1.0, "fp16", scale=0)
    with pytest.raises(TypeError):
        fate(torch.tensor([1]), "fp16")


# --- thresholds the grid sets: the lost-update band, the squared-gradient flush ---------------------

@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32"])
def test_lost_update_band_matches_torch_additions(fmt):
    lo, hi = formats.lost_update_band(fmt)
    m = FORMATS[fmt].mantissa_bits
    assert (lo, hi) == (2.0 ** -(m + 2), 2.0 ** -(m + 1))
    dt = FORMATS[fmt].dtype
    w = torch.linspace(1.0, 2.0, 257, dtype=torch.float64)[:-1].to(dt)         # one binade of weights
    w = torch.cat([w, -w, w * 2.0 ** 10, w * 2.0 ** -4])                        # the ratio repeats per binade
    for sign in (1.0, -1.0):
        below = (w.double() * lo * (1 - 2 ** -4) * sign).to(dt)                 # just under lo: always lost
        assert bool(((w + below) == w).all()), (fmt, sign)
        above = (w.double() * hi * (1 + 2 ** -4) * sign).to(dt)                 # just over hi: always kept
        assert bool(((w + above) != w).all()), (fmt, sign)
    mid = (w.double() * (lo * hi) ** 0.5).to(dt)                                # inside the band: it depends
    kept = (w + mid) != w
    assert bool(kept.any()) and bool((~kept).any())


def test_square_flush_cutoff_is_where_adams_first_v_vanishes():
    cut = formats.square_flush_cutoff("fp16", 1 - 0.999)
    assert cut == pytest.approx(math.sqrt(2.0 ** -25 / 0.001))
    for g, zero in ((cut * 0.99, True), (cut * 1.01, False)):
        v = torch.zeros(1, dtype=torch.float16)
        grad = torch.tensor([g], dtype=torch.float16)
        v.mul_(0.999).addcmul_(grad, grad, value=1 - 0.999)                     # torch.optim.Adam's update of v
        assert bool(v.item() == 0.0) is zero, g
    assert formats.square_flush_cutoff("bf16", 0.001) < 1e-18                   # bf16 has fp32's range
    with pytest.raises(ValueError, match="> 0"):
        formats.square_flush_cutoff("fp16", 0.0)
    with pytest.raises(TypeError):
        formats.square_flush_cutoff("fp16", "0.001")
