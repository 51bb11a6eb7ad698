"""amp_edu.debug: finding the first non-finite module, backward anomalies, eps and scale checks."""

import math

import pytest
import torch
from torch import nn

from amp_edu import debug
from amp_edu.debug.anomaly import backward_anomaly
from amp_edu.debug.eps import effective_eps, effective_floor, preflight
from amp_edu.debug.modules import first_nonfinite, nonfinite_rows, trace_modules
from amp_edu.debug.plot import plot_module_calls
from amp_edu.debug.scale import diagnose_scales, scale_verdict


class Blowup(nn.Module):
    """Multiplies by a constant inline, between two submodules."""

    def __init__(self, factor=1e5):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.factor = factor

    def forward(self, x):
        return self.b(self.a(x) * self.factor)


class Reordered(nn.Module):
    """Registers `late` before `early` but calls `early` first."""

    def __init__(self):
        super().__init__()
        self.late = nn.Linear(4, 4)
        self.early = nn.Linear(4, 4)

    def forward(self, x):
        return self.late(self.early(x))


def _x(dtype=torch.float32):
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).to(dtype)


def test_trace_records_calls_in_finishing_order_and_removes_hooks():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), Reordered(), nn.ReLU())
    out, calls = trace_modules(net, _x())
    assert [c.name for c in calls] == ["0", "1.early", "1.late", "1", "2", ""]
    assert [c.leaf for c in calls] == [True, True, True, False, True, False]
    assert all(c.finite and c.dtype == "float32" for c in calls)
    assert calls[-1].absmax == pytest.approx(float(out.detach().abs().max()))
    assert all(not m._forward_hooks for m in net.modules())


def test_first_nonfinite_finds_the_producer_not_the_consumer():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), Blowup(1e5), nn.ReLU(), nn.Linear(4, 2)).half()
    with torch.no_grad():
        net[1].a.weight.fill_(1.0)
    found = first_nonfinite(net, _x(torch.float16).abs() + 1)
    # the inline `* factor` overflows fp16; the first module *holding* inf is 1.b, which received it
    assert found.name == "1.b" and not found.finite
    assert found.inputs_finite is False
    assert "between modules" in str(found)


def test_first_nonfinite_inner_module_reported_before_its_parent():
    net = nn.Sequential(nn.Sequential(nn.Identity(), nn.Linear(4, 4)), nn.ReLU())
    with torch.no_grad():
        net[0][1].weight.fill_(float("nan"))
    found = first_nonfinite(net, _x())
    assert (found.name, found.module, found.kind, found.inputs_finite) == ("0.1", "Linear", "nan", True)


def test_first_nonfinite_sees_through_a_later_relu_and_handles_tuples_and_kwargs():
    class TupleOut(nn.Module):
        def forward(self, x, *, shift):
            return x, torch.log(x - shift)        # log of a negative number: NaN

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.t = TupleOut()
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(torch.nan_to_num(self.t(x, shift=10.0)[1]))

    net = Net()
    out = net(_x())
    assert torch.isfinite(out).all()              # the final output hides it
    found = first_nonfinite(net, _x())
    assert found.name == "t" and found.kind == "nan"
    assert first_nonfinite(nn.Linear(4, 4), _x()) is None


def test_trace_removes_hooks_when_forward_raises():
    class Bad(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    net = nn.Sequential(nn.Linear(4, 4), Bad())
    with pytest.raises(RuntimeError, match="boom"):
        trace_modules(net, _x())
    assert all(not m._forward_hooks for m in net.modules())


def test_trace_rejects_non_modules():
    with pytest.raises(TypeError, match="nn.Module"):
        trace_modules(lambda x: x, _x())


def test_backward_anomaly_names_the_function_and_forward_line():
    w = nn.Parameter(torch.tensor([0.0, 4.0]))

    def loss_fn():
        root = torch.sqrt(w)          # the backward of sqrt at 0 is inf; inf * 0 = NaN
        return (root * torch.tensor([0.0, 1.0])).sum()

    rep = backward_anomaly(loss_fn)
    assert rep.function == "SqrtBackward0"
    assert rep.forward_function == "loss_fn" and "torch.sqrt(w)" in rep.forward_line
    assert "SqrtBackward0" in str(rep)
    w.grad = None

    def via_operator():
        return ((w ** 0.5) * torch.tensor([0.0, 1.0])).sum()   # `**` runs through torch's Python wrapper

    rep = backward_anomaly(via_operator)
    assert rep.function == "PowBackward0" and "w ** 0.5" in rep.forward_line, rep
    w.grad = None
    assert backward_anomaly(lambda: (w * 2).sum()) is None
    with pytest.raises(TypeError):
        backward_anomaly(3)


def test_effective_eps_and_floor():
    assert effective_eps(1e-8, torch.float16) == 0.0
    assert effective_eps(1e-8, torch.bfloat16) > 0
    assert effective_eps(2.0 ** -25, torch.float16) == 0.0          # tie rounds to even: 0
    assert effective_eps(2.0 ** -25 * 1.01, torch.float16) == 2.0 ** -24
    assert effective_floor(torch.float16) == 2.0 ** -24
    with pytest.raises(TypeError):
        effective_eps("1e-8", torch.float16)
    with pytest.raises(TypeError):
        effective_eps(1e-8, torch.int32)


def test_preflight_flags_eps_and_fp16_params():
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3, eps=1e-12), nn.LayerNorm(3, eps=1e-8),
                          nn.LayerNorm(3))
    opt = torch.optim.Adam(model.parameters())               # eps=1e-8
    found = preflight(model, opt)
    assert len(found) == 3, found
    assert "Adam" in found[0] and "rounds to 0" in found[0]
    assert found[1].startswith("1 (LayerNorm)") and "1/sqrt(eps) = 1e+06" in found[1]
    assert found[2].startswith("2 (LayerNorm)") and "rounds to 0" in found[2] and "1/sqrt" not in found[2]
    assert preflight(model, opt, dtype=torch.bfloat16) == []
    half = nn.Linear(3, 3).half()
    msgs = preflight(half, torch.optim.SGD(half.parameters(), lr=0.1))
    assert len(msgs) == 1 and "Attempting to unscale FP16 gradients." in msgs[0]
    assert preflight(half, scaler=False) == []
    with pytest.raises(ValueError):
        preflight()
    with pytest.raises(TypeError):
        preflight(model, "adam")


def test_preflight_agrees_with_what_gradscaler_does():
    half = nn.Linear(3, 3).half()
    opt = torch.optim.SGD(half.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(half(torch.ones(2, 3, dtype=torch.float16)).float().sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients."):
        scaler.step(opt)


def test_scale_verdict_separates_calibration_probing_and_nan():
    healthy = [2.0 ** 16, 2.0 ** 15, 2.0 ** 14] + [2.0 ** 14] * 50
    v = scale_verdict(healthy)
    assert v.startswith("2 calibration back-off(s)") and v.endswith("healthy.")
    # growth every 20 steps that overshoots once in a while: skips above the best scale are probes
    probing = [2.0 ** 10] * 20 + [2.0 ** 11] + [2.0 ** 10] * 20 + [2.0 ** 11] + [2.0 ** 10] * 20
    v = scale_verdict(probing)
    assert "2 skip(s) while probing" in v and v.endswith("healthy.")
    falling = [2.0 ** 16] * 3 + [2.0 ** (16 - k // 4) for k in range(80)]
    v = scale_verdict(falling)
    assert "keeps falling" in v and "instead of tuning" in v
    # a fast-regrowing scaler hides the same NaN batches: still flagged, differently worded
    regrow = []
    for k in range(60):
        regrow += [2.0 ** 12, 2.0 ** 11] if k % 3 == 0 else [2.0 ** 12]
    v = scale_verdict([2.0 ** 12] + regrow)
    assert "re-grows" in v and "instead of tuning" in v
    for bad in ([1.0], [1.0, math.nan], [1.0, -2.0]):
        with pytest.raises(ValueError):
            scale_verdict(bad)


def test_nonfinite_rows():
    x = torch.tensor([[1.0, math.nan], [1.0, 2.0], [math.inf, 0.0], [0.0, 0.0]])
    assert nonfinite_rows(x).tolist() == [0, 2]
    assert nonfinite_rows(torch.ones(3, 2, 2)).tolist() == []
    assert nonfinite_rows(torch.ones(3, dtype=torch.long)).tolist() == []
    with pytest.raises(ValueError):
        nonfinite_rows(torch.tensor(1.0))


def test_plot_module_calls_marks_the_first_nonfinite():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    net = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4)), nn.ReLU())
    with torch.no_grad():
        net[1][0].weight.fill_(float("inf"))
    _, calls = trace_modules(net, _x().abs() + 1)
    fig, ax = plt.subplots()
    plot_module_calls(calls, ax)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["0", "1.0", "1", "2", "(model)"]      # leaves, plus parents that went non-finite
    assert "first non-finite output: 1.0 (Linear, " in ax.get_title()
    assert ax.get_yscale() == "log"
    with pytest.raises(ValueError):
        plot_module_calls([], ax)
    plt.close(fig)


@pytest.mark.parametrize("call, exc, words", [
    (lambda: effective_eps(-1e-8, torch.float16), ValueError, ">= 0"),
    (lambda: effective_eps(float("nan"), torch.float16), ValueError, "eps must be a finite number"),
    (lambda: effective_eps(True, torch.float16), TypeError, "eps must be a number"),
    (lambda: effective_eps("1e-8", torch.float16), TypeError, "eps must be a number"),
    (lambda: scale_verdict("abc"), TypeError, "iterable of numbers"),
    (lambda: scale_verdict([65536.0, None]), TypeError, "iterable of numbers"),
])
def test_bad_input_names_what_is_accepted(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_preflight_rejects_a_dtype_or_scaler_flag_it_cannot_judge():
    m = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="float16 or torch.bfloat16"):
        preflight(m, dtype=torch.int8)
    with pytest.raises(TypeError, match="True or False"):
        preflight(m, scaler="yes")


def test_the_package_keeps_every_name_and_one_module_per_tool():
    import importlib
    for mod, names in {"modules": ["ModuleCall", "trace_modules", "first_nonfinite", "nonfinite_rows"],
                       "plot": ["plot_module_calls"], "anomaly": ["AnomalyReport", "backward_anomaly"],
                       "eps": ["effective_eps", "effective_floor", "preflight"],
                       "scale": ["ScaleDiagnosis", "diagnose_scales", "scale_verdict"]}.items():
        m = importlib.import_module(f"amp_edu.debug.{mod}")
        assert all(getattr(debug, n) is getattr(m, n) for n in names), mod
    assert set(debug.__all__) == {n for n in dir(debug) if not n.startswith("_")} - {
        "anomaly", "eps", "modules", "plot", "scale"}


def test_diagnose_scales_counts_what_the_verdict_says():
    start = [2.0 ** 16, 2.0 ** 15, 2.0 ** 14]                       # two calibration back-offs
    worked = [2.0 ** 14] * 5
    d = diagnose_scales(start + worked + [2.0 ** 15, 2.0 ** 14] + worked + [2.0 ** 13] * 3)
    assert (d.warm, d.probes, d.unexplained) == (2, 1, 1) and not d.sick
    sick = diagnose_scales(start + (worked + [2.0 ** 13]) * 4)
    assert sick.unexplained >= 3 and sick.sick and not sick.falling
    assert "healthy" in scale_verdict(start + worked)


def test_effective_eps_works_for_every_format_with_a_dtype():
    assert effective_eps(1e-3, torch.float8_e4m3fn) == 2.0 ** -9         # e4m3's smallest subnormal
    assert effective_eps(1e-8, torch.float32) == float(torch.tensor(1e-8))
    assert effective_floor(torch.float32) == 2.0 ** -149
    with pytest.raises(TypeError, match="32 bits"):
        effective_eps(1e-8, torch.float64)
