"""amp_edu.hf: what the Trainer's precision flags do here, and a hand loop equal to the Trainer's.

Tiny sizes (a 1-layer, 16-wide GPT-2, a few steps of a few windows) keep the whole file to seconds;
the lesson (notebooks/14) runs the same comparisons at its own size. Models come from a config:
nothing is downloaded (HF_HUB_OFFLINE=1).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

import amp_edu.autocast
import amp_edu.scaler
from amp_edu.hf import sources
from amp_edu.hf._lib import load, quiet
from amp_edu.hf.accel import accelerate_run
from amp_edu.hf.flags import (COPIED_CALL, FlagReport, fix_copied_call, inspect_flag, precision_warning,
                              try_training_args)
from amp_edu.hf.loop import (OFF, SETTINGS, Match, Plan, diff_runs, hand_run, make_trainer, plan_for, trainer_device,
                             trainer_run)
from amp_edu.hf.tiny import Sizes, tiny_gpt2, zen_lm_dataset, zen_vocab
from amp_edu.widgets import hf as whf

TINY = Sizes(steps=3, batch_size=8, block_size=8, stride=24, n_layer=1, n_embd=16, n_head=2)
ON_CPU = trainer_device().type == "cpu"


pytestmark = pytest.mark.usefixtures("one_thread")      # tests/conftest.py


@pytest.fixture(scope="module")
def trainer_fp32():
    torch.set_num_threads(1)
    return trainer_run("fp32", TINY)


def test_the_copied_call_raises_and_the_fix_constructs():
    args, err = try_training_args(**COPIED_CALL)
    assert args is None and isinstance(err, TypeError) and "evaluation_strategy" in str(err)
    fixed, notes = fix_copied_call(COPIED_CALL)
    assert "eval_strategy" in fixed and "evaluation_strategy" not in fixed and "logging_dir" not in fixed
    assert any("eval_strategy" in n for n in notes) and any("TENSORBOARD_LOGGING_DIR" in n for n in notes)
    args, err = try_training_args(**{**fixed, "output_dir": "/tmp/amp_edu_hf_test"})
    assert err is None and args.fp16 is True


def test_fix_copied_call_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="not a TrainingArguments argument.*evaluation_strategy"):
        fix_copied_call({"no_such_argument": 1})
    with pytest.raises(TypeError, match="dict"):
        fix_copied_call(["fp16"])


@pytest.mark.skipif(not ON_CPU, reason="asserts the CPU's answer; on a GPU the lesson compares with plan_for")
def test_what_each_flag_does_on_a_cpu():
    r32, r16, rbf = (inspect_flag(s, TINY) for s in ("fp32", "fp16", "bf16"))
    assert (r32.mixed_precision, r32.native_amp, r32.scaler, r32.forward_wrapped) == ("no", False, None, False)
    # fp16 on a CPU: requested, but off — no autocast, no scaler, fp32 inside
    assert (r16.mixed_precision, r16.native_amp, r16.scaler, r16.forward_wrapped) == ("fp16", False, None, False)
    assert r16.inside_dtype == r16.logits_dtype == torch.float32 and r16.plan == Plan("cpu", None, False)
    assert "trains in fp32" in precision_warning(r16) and precision_warning(r32) is None
    # bf16 (with use_cpu): autocast inside, fp32 outputs, no scaler
    assert (rbf.native_amp, rbf.scaler, rbf.forward_wrapped) == (True, None, True)
    assert rbf.inside_dtype == torch.bfloat16 and rbf.logits_dtype == torch.float32
    assert precision_warning(rbf) is None and rbf.plan == plan_for("bf16")
    refused = inspect_flag("bf16", TINY, use_cpu=False)
    assert refused.error.startswith("ValueError") and "use_cpu" in refused.error
    trainer = make_trainer("fp16", TINY)
    assert "trains in fp32" in precision_warning(trainer)


def test_the_rule_for_a_gpu():
    assert plan_for("fp16", "cuda") == Plan("cuda", torch.float16, True)
    assert plan_for("bf16", "cuda") == Plan("cuda", torch.bfloat16, False)
    assert plan_for("fp16", "cpu") == Plan("cpu", None, False)
    assert plan_for("fp32", "cuda") == Plan("cuda", None, False)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_hand_loop_equals_the_trainer_bit_for_bit(setting, trainer_fp32):
    t = trainer_fp32 if setting == "fp32" else trainer_run(setting, TINY)
    d = diff_runs(t, hand_run(t.plan, TINY))
    assert d.equal, d
    assert len(t.losses) == TINY.steps and t.plan == plan_for(setting)


def test_each_matching_point_changes_the_run(trainer_fp32):
    for name in OFF:
        d = diff_runs(trainer_fp32, hand_run(trainer_fp32.plan, TINY, Match().off(name)))
        assert not d.equal, f"turning {name} off changed nothing"
        assert not d.losses_equal or not d.weights_equal, name
    d = diff_runs(trainer_fp32, hand_run(trainer_fp32.plan, TINY, Match(sampler="no_dataloader")))
    assert not d.equal, "without a DataLoader's draw from the global RNG the dropout masks should move"
    d = diff_runs(trainer_fp32, hand_run(trainer_fp32.plan, TINY, Match(cache="on")))
    assert d.losses_equal and not d.weights_equal, "at this size use_cache changes the gradients' last bits only"


def test_the_gpu_code_path_with_the_course_scaler_and_autocast():
    kw = dict(init_scale=2.0 ** 24, growth_interval=2)
    steps = Sizes(**{**TINY.__dict__, "steps": 4})
    dev = trainer_device().type
    ref = trainer_run("fp16", steps, gpu_path=True, scaler=lambda: torch.amp.GradScaler(dev, **kw))
    ours = trainer_run("fp16", steps, gpu_path=True, scaler=lambda: amp_edu.scaler.GradScaler(dev, **kw),
                          autocast=lambda d, dt: amp_edu.autocast.autocast(d, dtype=dt))
    assert ref.plan == Plan(dev, torch.float16, True)
    assert diff_runs(ref, ours).equal
    assert diff_runs(ref, hand_run(ref.plan, steps, scaler=lambda: torch.amp.GradScaler(dev, **kw))).equal
    assert any(ref.skipped) and not any(ref.skip_seen), "fused AdamW: skips happen, accelerate sees none"
    assert ref.scales[0] == 2.0 ** 24 and ref.scales[1] == 2.0 ** 23
    foreach = trainer_run("fp16", steps, gpu_path=True, scaler=lambda: torch.amp.GradScaler(dev, **kw),
                             optim="adamw_torch")
    assert foreach.skip_seen == foreach.skipped and any(foreach.skipped)
    k = foreach.skipped.index(False) if False in foreach.skipped else len(foreach.skipped)
    waited = foreach.lrs[:k + 1]
    assert waited == [steps.lr] * len(waited), "the schedule waits while steps are seen skipped"
    assert ref.lrs[1] < steps.lr, "with fused AdamW the schedule moves on through the skipped steps"


def test_an_accelerator_loop_equals_the_trainer(trainer_fp32):
    assert diff_runs(trainer_fp32, accelerate_run("fp32", TINY)).equal
    assert not diff_runs(trainer_fp32, accelerate_run("fp32", TINY, seedable_sampler=False)).equal


@pytest.mark.skipif(any(sources.installed_version(p) != v for p, v in sources.PINNED.items()),
                    reason="citations are line numbers of the pinned versions")
@pytest.mark.parametrize("key", list(sources.CITES))
def test_every_citation_stands_on_its_lines(key):
    ok, detail = sources.check(key)
    assert ok, f"{sources.CITES[key]}: {detail}"


def test_bad_input_is_refused_naming_what_is_accepted():
    with pytest.raises(ValueError, match="Match.loss must be one of"):
        Match(loss="sum")
    with pytest.raises(TypeError, match="Match.clip must be a str"):
        Match(clip=None)
    with pytest.raises(ValueError, match="unknown matching point"):
        Match().off("seed")
    with pytest.raises(ValueError, match="Plan.dtype must be None, torch.float16 or torch.bfloat16"):
        Plan("cpu", torch.float32)
    with pytest.raises(TypeError, match="Plan.scaler must be a bool"):
        Plan("cpu", None, 1)
    with pytest.raises(ValueError, match="steps must be an int"):
        Sizes(steps=0)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        Sizes(batch_size=True)
    with pytest.raises(ValueError, match="multiple of n_head"):
        Sizes(n_embd=10, n_head=4)
    with pytest.raises(ValueError, match=r"setting must be one of \['fp32', 'fp16', 'bf16'\]"):
        plan_for("fp8")
    with pytest.raises(TypeError, match="setting must be a str"):
        inspect_flag(16)
    with pytest.raises(ValueError, match="gpu_path=True only means something for setting='fp16'"):
        trainer_run("bf16", TINY, gpu_path=True)
    with pytest.raises(TypeError, match="two amp_edu.hf.Run"):
        diff_runs([1.0], [1.0])
    with pytest.raises(ValueError, match="unknown citation"):
        sources.where("nope")
    with pytest.raises(TypeError, match="sizes must be an amp_edu.hf.Sizes"):
        hand_run("fp32", {"steps": 2})


@pytest.mark.skipif(not ON_CPU, reason="the replaced scaler needs a run that has one")
def test_replacing_a_scaler_that_is_not_there_says_how():
    with pytest.raises(ValueError, match="gpu_path=True"):
        trainer_run("fp16", TINY, scaler=lambda: torch.amp.GradScaler("cpu"))


def test_the_dataset_and_the_model_need_no_download():
    ds = zen_lm_dataset(8, 24)
    assert torch.equal(ds[0]["input_ids"], ds[0]["labels"]) and ds[0]["input_ids"].shape == (8,)
    model = tiny_gpt2(TINY)
    assert model.config.vocab_size == len(zen_vocab()) and model.config.n_layer == 1
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_load_is_offline_and_once_and_quiet_hides_only_its_two_notices():
    import logging
    import warnings

    transformers, accelerate = load()
    assert load() is load() and os.environ["HF_HUB_OFFLINE"] == "1"
    assert (transformers.__name__, accelerate.__name__) == ("transformers", "accelerate")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log, keep = logging.getLogger("transformers.modeling_utils"), Keep()
    log.addHandler(keep)
    loss_type = "`loss_type=None` was set in the config but it is unrecognized. Using the default loss."
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with quiet():
                log.error(loss_type)
                log.error("another notice")
                warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device "
                              "pinned memory won't be used.")
                warnings.warn("another warning")
            log.error(loss_type)                                   # outside the block it shows again
    finally:
        log.removeHandler(keep)
    assert seen == ["another notice", loss_type]
    assert [str(w.message) for w in caught] == ["another warning"]


def test_the_flag_explorer_shows_both_places():
    reports = {s: FlagReport(s, dict(SETTINGS[s]), device="cpu", mixed_precision={"fp32": "no"}.get(s, s),
                                native_amp=s == "bf16", scaler=None, forward_wrapped=s == "bf16",
                                inside_dtype=torch.bfloat16 if s == "bf16" else torch.float32,
                                logits_dtype=torch.float32, plan=plan_for(s, "cpu")) for s in SETTINGS}
    here = whf.flag_text("fp16", whf.WHERE[0], reports)
    assert "native_amp=False" in here and "trains in fp32" in here
    gpu = whf.flag_text("fp16", whf.WHERE[1], reports)
    assert "a GradScaler" in gpu and "accelerator.py:548-555" in gpu
    e = whf.flag_explorer(reports)
    assert "trains in fp32" in e.text.value
    e.setting.value = "bf16"
    assert "bfloat16" in e.text.value and "trains in fp32" not in e.text.value
    e.where.value = whf.WHERE[1]
    assert "Ampere" in e.text.value
    with pytest.raises(ValueError, match="where must be one of"):
        whf.flag_text("fp16", "a TPU", reports)
