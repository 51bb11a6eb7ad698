"""amp_edu.gradients: fp16 fates exact at every boundary, histograms, capture per layer."""

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from amp_edu import data, models
from amp_edu import gradients as G


def nextafter(x, d):
    return torch.nextafter(torch.tensor(x, dtype=torch.float32), torch.tensor(d, dtype=torch.float32)).item()


@pytest.mark.parametrize("value, fate", [
    (0.0, "zero"), (-0.0, "zero"),
    (2.0 ** -26, "flush"), (2.0 ** -25, "flush"),                 # the tie at 2^-25 goes to even: 0
    (nextafter(2.0 ** -25, 1.0), "subnormal"),                    # just above the tie rounds up to 2^-24
    (-(2.0 ** -24), "subnormal"), (1e-45, "flush"),               # an fp32 subnormal
    (2.0 ** -14 - 2.0 ** -25, "normal"),                          # tie between max subnormal and 2^-14
    (nextafter(2.0 ** -14 - 2.0 ** -25, 0.0), "subnormal"),
    (2.0 ** -14, "normal"), (65504.0, "normal"), (nextafter(65520.0, 0.0), "normal"),
    (65520.0, "overflow"), (-1e6, "overflow"), (float("inf"), "nonfinite"), (float("nan"), "nonfinite"),
])
def test_fp16_fate_boundaries_match_the_cast(value, fate):
    got = G.FATES[int(G.fp16_fate(torch.tensor([value]))[0])]
    assert got == fate, f"{value!r}: {got} != {fate}"


def test_fate_agrees_with_torch_cast_on_random_magnitudes():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20000, generator=g) * torch.exp2(torch.randint(-40, 20, (20000,), generator=g).float())
    fate = G.fp16_fate(x)
    h = x.half()
    assert torch.equal(fate == G.FATES.index("flush"), (h == 0) & (x != 0))
    assert torch.equal(fate == G.FATES.index("overflow"), torch.isinf(h))
    sub = (h != 0) & (h.abs() < 2.0 ** -14)
    assert torch.equal(fate == G.FATES.index("subnormal"), sub)


def test_scale_shifts_the_fates():
    x = torch.tensor([2.0 ** -30, 2.0 ** -20, 1.0, 2.0 ** 10])
    f1 = G.fp16_fractions(x)
    assert (f1["flush"], f1["subnormal"], f1["normal"], f1["overflow"]) == (0.25, 0.25, 0.5, 0.0)
    f2 = G.fp16_fractions(x, 2.0 ** 10)
    assert (f2["flush"], f2["subnormal"], f2["normal"], f2["overflow"]) == (0.0, 0.25, 0.5, 0.25)
    f3 = G.fp16_fractions([x, torch.zeros(4)])
    assert f3["n"] == 8 and f3["zero"] == 0.5 and f3["flush"] == 0.125 and f3["flush_of_nonzero"] == 0.25


def test_log2_histogram_is_exact_at_powers_of_two():
    x = torch.tensor([1.0, 1.999, 2.0, -0.5, 0.0, 2.0 ** -30, float("inf")])
    exps, counts, n_zero, n_bad = G.log2_histogram(x, lo=-10, hi=5)
    c = dict(zip(exps.tolist(), counts.tolist()))
    assert c[0] == 2 and c[1] == 1 and c[-1] == 1 and c[-10] == 1    # 2^-30 clamps into the lowest bin
    assert n_zero == 1 and n_bad == 1 and int(counts.sum()) == 5
    _, counts8, _, _ = G.log2_histogram(x, 8.0, lo=-10, hi=5)
    assert dict(zip(exps.tolist(), counts8.tolist()))[3] == 2        # x 8 shifts by three bins


def test_max_safe_scale():
    assert G.max_safe_scale(torch.tensor([1.0])) == 2.0 ** 15        # 2^16 = 65536 > 65504
    assert G.max_safe_scale(torch.tensor([65504.0 / 1024])) == 1024.0  # equality is safe
    assert G.max_safe_scale([torch.tensor([1e-3]), torch.tensor([-3.0])]) == 2.0 ** 14
    assert G.max_safe_scale(torch.tensor([1e6])) == 2.0 ** -4     # 1e6 / 16 = 62500
    with pytest.raises(ValueError, match="non-zero"):
        G.max_safe_scale(torch.zeros(3))


def test_scale_sweep_rows():
    rows = G.scale_sweep(torch.tensor([2.0 ** -30, 1.0]), [0, 10, 20])
    assert [r["log2_scale"] for r in rows] == [0, 10, 20]
    assert [r["flush"] for r in rows] == [0.5, 0.0, 0.0]
    assert [r["overflow"] for r in rows] == [0.0, 0.0, 0.5]


def test_capture_records_every_leaf_and_all_weights():
    task = data.get_task("shapes", device="cpu", n=64)
    m = models.build("cnn", task)
    x, y = task.batch(8, torch.Generator().manual_seed(0))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    rec = G.capture(m, x, y, task.loss)
    assert list(rec.activations) == ["features.0", "features.1", "features.2", "features.3", "features.4",
                                     "features.5", "head"]
    assert rec.activations["head"].numel() == 8 * task.n_classes
    assert set(rec.weights) == {n for n, _ in m.named_parameters()}
    # the activation gradient of the head is d(mean CE)/d(logits) = (softmax - onehot) / batch
    logits = m(x)
    want = (torch.softmax(logits, 1) - torch.nn.functional.one_hot(y, task.n_classes)) / 8
    assert torch.allclose(rec.activations["head"], want.detach().flatten(), atol=1e-7)
    assert math.isfinite(rec.loss)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    rows = G.layer_report(rec, "weights", scale=4.0)
    assert [r["name"] for r in rows] == list(rec.weights) and all(0 <= r["flush"] <= 1 for r in rows)
    text = G.format_report(rows)
    assert "features.0.weight" in text and "%" in text


def test_capture_names_repeated_modules():
    lin = torch.nn.Linear(3, 3)

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            return self.lin(self.lin(x))

    rec = G.capture(Twice(), torch.randn(2, 3), None, lambda out, _: out.sum())
    assert set(rec.activations) == {"lin", "lin#2"}


def test_plots_draw_and_return_fractions():
    import matplotlib.pyplot as plt
    x = torch.cat([torch.zeros(10), torch.exp2(-torch.arange(0, 40, dtype=torch.float32))])
    fig, ax = plt.subplots()
    f = G.plot_histogram(ax, x, 2.0 ** 8, label="test")
    assert f == G.fp16_fractions(x, 2.0 ** 8)
    assert ax.get_yscale() == "log" and "log2" in ax.get_xlabel()
    fig2, ax2 = plt.subplots()
    rows = [{"name": "a", "flush": 0.5, "subnormal": 0.2, "overflow": 0.0},
            {"name": "b", "flush": 0.1, "subnormal": 0.0, "overflow": 0.3}]
    assert G.plot_layer_fractions(ax2, rows) is ax2
    bars = ax2.patches                                  # flush bars, then subnormal, then overflow
    assert [round(b.get_width(), 9) for b in bars] == [50.0, 10.0, 20.0, 0.0, 0.0, 30.0]
    assert [round(b.get_x(), 9) for b in bars] == [0.0, 0.0, 50.0, 10.0, 70.0, 10.0]   # stacked
    assert [t.get_text() for t in ax2.get_legend().get_texts()] == ["flush", "subnormal", "overflow"]
    assert [t.get_text() for t in ax2.get_yticklabels()] == ["a", "b"]
    plt.close("all")


@pytest.mark.parametrize("bad, err", [("x", TypeError), ([1.0, 2.0], TypeError),
                                      (torch.tensor([1, 2]), TypeError)])
def test_bad_values(bad, err):
    with pytest.raises(err, match="tensor"):
        G.fp16_fractions(bad)


@pytest.mark.parametrize("scale, err", [(0.0, ValueError), (float("inf"), ValueError), ("8", TypeError),
                                        (True, TypeError)])
def test_bad_scale(scale, err):
    with pytest.raises(err, match="scale"):
        G.fp16_fate(torch.ones(2), scale)
