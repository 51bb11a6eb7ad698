"""amp_edu.study: runs recipes over seeds, summarises, and derives its verdict from the numbers."""

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from amp_edu import data, recipes, study  # noqa: E402
from studyfake import fake  # noqa: E402  (tests/ is on sys.path)


def test_compare_calls_follow_the_paired_rule():
    base = [(1.00, 0.70), (1.02, 0.72), (0.98, 0.68)]          # loss std 0.02 across seeds
    s = fake({
        "fp32": base,
        "amp_fp16": [(l + d, a) for (l, a), d in zip(base, (0.01, -0.012, 0.003))],   # pairs disagree
        "amp_bf16": [(l + d, a - 0.1 + e) for (l, a), d, e in zip(base, (0.009, 0.011, 0.010), (0.001, -0.001, 0))],
        "bf16_pure": [(l + d, a) for (l, a), d in zip(base, (0.01, 0.025, 0.005))],    # same sign, wide
        "fp16_pure": [(math.nan, 0.125)] * 3,
    })
    c = study.compare_to_baseline(s, "amp_fp16", "eval_loss")
    assert c.call == "within" and c.paired.n == 3 and c.paired.p_t > 0.2
    assert c.diff == pytest.approx(0.001 / 3) and c.spread == pytest.approx(0.02)
    assert study.compare_to_baseline(s, "amp_fp16", "eval_accuracy").call == "same"
    # a +0.01 shift on every seed: half fp32's unpaired spread, but the pairs all agree
    c = study.compare_to_baseline(s, "amp_bf16", "eval_loss")
    assert (c.call, c.better) == ("clear", False) and c.paired.p_t < 0.05
    assert (c.paired.above, c.paired.below, c.paired.p_sign) == (3, 0, 0.25)
    assert study.compare_to_baseline(s, "amp_bf16", "eval_accuracy").call == "clear"
    assert study.compare_to_baseline(s, "bf16_pure", "eval_loss").call == "unclear"
    c = study.compare_to_baseline(s, "fp16_pure", "eval_loss")
    assert (c.call, c.diverged, c.n) == ("diverged", 3, 3)
    better = fake({"fp32": base, "amp_fp16": [(l - 0.1, a + 0.1) for l, a in base]})
    assert study.compare_to_baseline(better, "amp_fp16", "eval_accuracy").better is True
    assert study.compare_to_baseline(better, "amp_fp16", "eval_loss").better is True
    with pytest.raises(ValueError):
        study.compare_to_baseline(s, "amp_fp16", "speed")
    with pytest.raises(ValueError):
        study.compare_to_baseline(s, "fp8", "eval_loss")


def test_verdict_sentences_are_derived_from_the_numbers():
    base = [(1.00, 0.70), (1.02, 0.72), (0.98, 0.68)]
    ok = fake({"fp32": base, "amp_fp16": [(l + d, a + d) for (l, a), d in zip(base, (0.001, -0.002, 0.0015))],
               "amp_bf16": [(l + d, a) for (l, a), d in zip(base, (0.002, -0.001, 0.0))]})
    v = study.verdict(ok)
    assert len(v) == 5
    assert "no evidence of a difference" in v[1] and "paired over 3 seeds" in v[1] and "sign test" in v[1]
    assert v[-1].startswith("Claim 'mixed precision barely changes accuracy': holds here for amp_fp16, amp_bf16")
    bad = fake({"fp32": base, "amp_fp16": [(l, a - 0.2 + d) for (l, a), d in zip(base, (0.01, -0.01, 0))],
                "fp16_pure": [(math.nan, 0.1)] * 3})
    v = study.verdict(bad)
    assert "clearly worse" in v[1]
    assert v[2].startswith("fp16_pure: diverged") and "3 of 3" in v[2]
    assert "not shown here for amp_fp16" in v[-1]
    with pytest.raises(ValueError):
        study.verdict(bad, baseline="bf16_pure")


def test_stats_and_summary():
    s = study.stats([1.0, 3.0, math.nan])
    assert (s["mean"], s["min"], s["max"], s["n"], s["diverged"]) == (2.0, 1.0, 3.0, 2, 1)
    assert s["std"] == pytest.approx(math.sqrt(2))
    assert study.stats([math.inf])["n"] == 0
    rows = study.summary(fake({"fp32": [(1.0, 0.5), (2.0, 0.7)]}))
    assert rows[0]["recipe"] == "fp32" and rows[0]["eval_loss"]["mean"] == 1.5


@pytest.fixture(scope="module")
def tiny():
    return data.get_task("blobs", device="cpu", n=256)


def test_run_study_trains_each_recipe_with_each_seed(tiny, capsys):
    threads = torch.get_num_threads()
    s = study.run_study(tiny, ("fp32", "amp_bf16"), seeds=(0, 1), model="mlp", steps=6, evals=2,
                        threads=1, batch_size=16)
    out = capsys.readouterr().out
    assert out.count("[blobs] seed") == 4
    assert s.recipes == ("fp32", "amp_bf16") and len(s.runs["fp32"]) == 2
    assert s.runs["fp32"][0].eval_steps == [3, 6]
    assert all(h.model is None for hs in s.runs.values() for h in hs)
    f0, f1 = s.finals("fp32")
    assert f0 != f1, "different seeds must give different runs"
    xs, ys = s.curves("amp_bf16", "eval_accuracy")
    assert xs == [3, 6] and len(ys) == 2
    assert len(s.curves("fp32", "train_loss")[1][0]) == 6
    assert torch.get_num_threads() == threads, "threads=1 is undone after the study"


def test_run_study_rejects_bad_input(tiny):
    with pytest.raises(ValueError, match="seeds"):
        study.run_study(tiny, seeds=(0,), steps=2)
    with pytest.raises(ValueError, match="seed"):
        study.run_study(tiny, seeds=(0, 1), steps=2, seed=3)
    with pytest.raises(ValueError, match="unknown recipe"):
        study.run_study(tiny, ("fp32", "fp7"), seeds=(0, 1), steps=2)
    with pytest.raises(TypeError):
        study.run_study(42, seeds=(0, 1), steps=2)
    with pytest.raises(ValueError, match="distinct"):
        study.run_study(tiny, seeds=(1, 1), steps=2)
    with pytest.raises(TypeError, match="seed"):
        study.run_study(tiny, seeds=(0, "1"), steps=2)
    with pytest.raises(TypeError, match="seed"):
        study.run_study(tiny, seeds=(0, True), steps=2)
    with pytest.raises(ValueError, match="evals"):
        study.run_study(tiny, seeds=(0, 1), steps=2, evals=0)
    for bad in (True, 2.0, "3"):
        with pytest.raises(TypeError, match="evals"):
            study.run_study(tiny, seeds=(0, 1), steps=2, evals=bad)


def test_num_threads_restores_the_setting():
    n = torch.get_num_threads()
    with study.num_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == n
    with study.num_threads(None):
        assert torch.get_num_threads() == n
    with pytest.raises(ValueError):
        with study.num_threads(0):
            pass


def test_step_times_side_by_side(tiny):
    from amp_edu.measure.verdict import verdict_table

    t = study.step_times(tiny, ("fp32", "amp_bf16"), model="mlp", steps=2, rounds=1, repeats=1,
                         min_time_s=0.0, threads=1, batch_size=8)
    assert set(t) == {"fp32", "amp_bf16"} and all(v.median_s > 0 for v in t.values())
    lines = verdict_table(t, "fp32", note=" on this CPU")
    assert len(lines) == 3 and "amp_bf16" in lines[1] and "on this CPU" in lines[-1]   # a verdict, or none: busy


def test_recipe_factories_and_the_no_scaler_recipe(tiny):
    s = study.run_study(tiny, ("fp32", recipes.AmpWithoutScaler), (0, 1), model="mlp", steps=3, evals=1,
                        log=False, batch_size=8)
    assert s.recipes == ("fp32", "amp_fp16_noscaler")
    assert all(h.scale == [1.0] * 3 for h in s.runs["amp_fp16_noscaler"])     # the scaler is disabled
    with pytest.raises(TypeError, match="factory"):
        study.run_study(tiny, ("fp32", recipes.AmpWithoutScaler()), (0, 1), steps=2, log=False)
    with pytest.raises(ValueError, match="twice"):
        study.run_study(tiny, ("fp32", "fp32"), (0, 1), steps=2, log=False)


def test_plots_draw_a_line_and_band_per_recipe():
    import matplotlib.pyplot as plt
    base = [(1.00, 0.70), (1.02, 0.72), (0.98, 0.68)]
    s = fake({"fp32": base, "fp16_pure": [(math.nan, 0.1)] * 3})
    fig, (a, b) = plt.subplots(1, 2)
    study.plot_curves(s, a, "eval_loss")
    assert len(a.lines) == 2 and len(a.collections) == 2
    assert "loss" in a.get_ylabel() and a.get_xlabel() == "optimizer step"
    study.plot_finals(s, b, "eval_accuracy")
    assert [t.get_text() for t in b.get_xticklabels()] == ["fp32", "fp16_pure"]
    with pytest.raises(ValueError):
        study.plot_curves(s, a, band="iqr")
    plt.close(fig)


@pytest.mark.parametrize("call, exc", [
    (lambda: study.summary("not a study"), TypeError),
    (lambda: study.verdict({"fp32": []}), TypeError),
    (lambda: study.compare_to_baseline(None, "amp_fp16"), TypeError),
    (lambda: study.step_times("blobs", ["fp32"], rounds=0), ValueError),
    (lambda: study.step_times("blobs", ["fp32"], repeats=-1), ValueError),
    (lambda: study.step_times("blobs", ["fp32"], steps=0), ValueError),
    (lambda: study.step_times("blobs", ["fp32"], steps=True), TypeError),
    (lambda: study.step_times("blobs", ["fp32"], steps=2.0), TypeError),
    (lambda: study.step_times("blobs", ["fp32"], rounds=True), TypeError),
    (lambda: study.step_times("blobs", ["fp32"], repeats="3"), TypeError),
])
def test_reports_reject_bad_input(call, exc):
    with pytest.raises(exc):
        call()


def test_step_times_names_the_argument_of_the_wrong_type():
    for kw in (dict(steps="2"), dict(rounds=1.0), dict(repeats=False)):
        with pytest.raises(TypeError, match=f"{next(iter(kw))} must be an int"):
            study.step_times("blobs", ["fp32"], **kw)


def test_the_default_recipes_are_the_registry_s_everyday_set_read_at_call_time(tiny, monkeypatch):
    from amp_edu import recipes
    monkeypatch.setattr(recipes, "names", lambda set=None, **kw: ("fp32", "amp_bf16") if set == "everyday" else ())
    s = study.run_study(tiny, seeds=(0, 1), model="mlp", steps=2, evals=1, log=False, batch_size=8)
    assert s.recipes == ("fp32", "amp_bf16")


def test_smooth_is_a_trailing_mean_that_keeps_nan_visible():
    assert study.smooth([1.0, 3.0, 5.0, 7.0], window=2) == [1.0, 2.0, 4.0, 6.0]
    out = study.smooth([1.0, math.nan, 1.0, 1.0], window=2)
    assert out[0] == 1.0 and math.isnan(out[1]) and math.isnan(out[2]) and out[3] == 1.0
    with pytest.raises(ValueError, match="window"):
        study.smooth([1.0], window=0)
    with pytest.raises(TypeError, match="window"):
        study.smooth([1.0], window=True)
