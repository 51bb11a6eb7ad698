"""Lesson 08's grader runs the learner's loop: the recipe passes, each classic mistake fails."""

import pytest
import torch
import torch.nn.functional as F

from amp_edu.checks import l08
from amp_edu.checks.core import CheckFailed
from checkhelp import verdict  # noqa: E402  (tests/ is on sys.path)

clip = torch.nn.utils.clip_grad_norm_


def recipe(model, optimizer, scaler, batches, *, accum_steps=1, max_norm=None, device_type="cpu",
           dtype=torch.float16):
    """A correct loop written differently from the reference (zero_grad first, loss scaled then divided)."""
    for i, (x, y) in enumerate(batches):
        if i % accum_steps == 0:
            optimizer.zero_grad(set_to_none=False)
        with torch.amp.autocast(device_type, dtype=dtype):
            out = model(x)
            loss = F.cross_entropy(out, y)
        (scaler.scale(loss) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            if max_norm is not None:
                clip([p for g in optimizer.param_groups for p in g["params"]], max_norm)
            scaler.step(optimizer)
            scaler.update()


def _loop(*, autocast_loss=True, divide=True, clip_mode="unscale_first", step="scaler", update="step",
          zero="after_step", step_when="last", double_step=False, unscale_every=False):
    def fn(model, optimizer, scaler, batches, *, accum_steps=1, max_norm=None, device_type="cpu",
           dtype=torch.float16):
        optimizer.zero_grad()
        for i, (x, y) in enumerate(batches, start=1):
            if zero == "every_micro":
                optimizer.zero_grad()
            with torch.autocast(device_type, dtype=dtype):
                out = model(x)
                if autocast_loss:
                    loss = F.cross_entropy(out, y)
            if not autocast_loss:
                loss = F.cross_entropy(out, y)
            if divide:
                loss = loss / accum_steps
            scaler.scale(loss).backward()
            if unscale_every:
                scaler.unscale_(optimizer)
            if zero == "before_step":
                optimizer.zero_grad()
            if update == "every_micro":
                scaler.update()
            stepping = {"last": i % accum_steps == 0, "first": (i - 1) % accum_steps == 0,
                        "every": True}[step_when]
            if stepping:
                if max_norm is not None:
                    if clip_mode == "unscale_first":
                        scaler.unscale_(optimizer)
                        clip(model.parameters(), max_norm)
                    elif clip_mode == "clip_first":
                        clip(model.parameters(), max_norm)
                        scaler.unscale_(optimizer)
                    else:
                        clip(model.parameters(), max_norm)
                if step == "scaler":
                    scaler.step(optimizer)
                    if double_step:
                        scaler.step(optimizer)
                else:
                    scaler.unscale_(optimizer) if clip_mode != "unscale_first" or max_norm is None else None
                    optimizer.step()
                if update == "step":
                    scaler.update()
                if zero == "after_step" or (zero == "after_group" and i % accum_steps == 0):
                    optimizer.zero_grad()
    return fn


def tutorial_loop(model, optimizer, scaler, batches, *, accum_steps=1, max_norm=None, device_type="cpu",
              dtype=torch.float16):
    """A widely copied tutorial's loop, modernised: correct for one micro-batch per step, knows no
    accumulation or clipping."""
    for x, y in batches:
        with torch.autocast(device_type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def test_reference_and_an_equivalent_loop_pass(capsys):
    assert l08.check_train_amp(l08.reference_train_amp).startswith("PASS train_amp")
    assert l08.check_train_amp(recipe).startswith("PASS train_amp")
    assert capsys.readouterr().out.count("PASS") == 2


def test_situations_do_what_they_claim():
    by = {s[0]: s for s in l08.situations()}

    def run(label):
        _, _, setup, batches, kw = by[label]
        model, opt, scaler = l08._setup(**setup)
        scales = []
        orig = scaler.update

        def update(*a):
            scales.append(scaler.get_scale())
            orig(*a)
        scaler.update = update
        l08.reference_train_amp(model, opt, scaler, batches, **kw)
        return scales + [scaler.get_scale()]

    assert run("plain") == [2.0 ** 10, 2.0 ** 10, 2.0 ** 11, 2.0 ** 11, 2.0 ** 12]
    s = run("first_steps_overflow")
    assert s[1] < s[0] and s[2] < s[1], "the first steps must overflow and back off"
    s = run("bad_batch")
    assert s[3] == s[2] / 2 and s[1] == s[0]
    assert len(run("accumulation")) == 3


@pytest.mark.parametrize("wrong, situation, text", [
    (tutorial_loop, "clipping", "unscale_"),
    (_loop(clip_mode="clip_first"), "clipping", "unscale_"),
    (_loop(clip_mode="no_unscale"), "clipping", "unscale_"),
    (_loop(step="optimizer"), "first_steps_overflow", "skipped"),
    (_loop(double_step=True), "plain", "once per optimizer step"),
    (_loop(update="every_micro"), "plain", "only after scaler.step"),
    (_loop(update="never"), "plain", "once per optimizer step"),
    (_loop(autocast_loss=False), "plain", "autocast"),
    (_loop(divide=False), "accumulation", "Divide"),
    (_loop(zero="every_micro"), "accumulation", "accum_steps"),
    (_loop(zero="before_step"), "plain", "between backward and step"),
    (_loop(zero="never"), "plain", "zeroed"),
    (_loop(step_when="first"), "accumulation", "accum_steps"),
    (_loop(unscale_every=True), "clipping", "unscale_"),
    # the silent one: step and update on every micro-batch, zero only once per group (lesson 04 pitfall 3)
    (_loop(step_when="every", zero="after_group"), "accumulation", "accum_steps"),
])
def test_classic_mistakes_fail_in_the_situation_that_exposes_them(wrong, situation, text):
    with pytest.raises(CheckFailed) as err:
        l08.check_train_amp(wrong)
    msg = str(err.value)
    assert f"situation {situation!r}" in msg, msg
    assert "expected:" in msg and "got:" in msg and text in msg, msg


def no_zero_before_the_loop(model, optimizer, scaler, batches, *, accum_steps=1, max_norm=None,
                            device_type="cpu", dtype=torch.float16):
    """Zeroes after each step only: gradients the model arrived with go into the first step."""
    for i, (x, y) in enumerate(batches, start=1):
        with torch.autocast(device_type, dtype=dtype):
            loss = F.cross_entropy(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        if i % accum_steps == 0:
            if max_norm is not None:
                scaler.unscale_(optimizer)
                clip(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)


def test_stale_gradients_on_arrival_fail():
    with pytest.raises(CheckFailed, match="before the first backward") as err:
        l08.check_train_amp(no_zero_before_the_loop)
    assert "stale_gradients" in str(err.value)


# --- the by-value design: drawn situations, answers that lie --------------------------------


def test_drawn_situations_differ_by_seed_and_the_recipe_passes_for_several():
    a, b = l08.check_train_amp.cases(1), l08.check_train_amp.cases(2)
    assert [s[2]["seed"] for s in a] != [s[2]["seed"] for s in b]
    assert not torch.equal(a[0][3][0][0], b[0][3][0][0])
    for seed in (1, 2):
        assert verdict(l08.check_train_amp, seed, recipe).startswith("PASS train_amp: 7 situations")


@pytest.mark.parametrize("seed", [3, 4])
def test_drawn_situations_still_do_what_they_claim(seed):
    for label, _, setup, batches, kw in l08.situations(seed):
        model, opt, scaler = l08._setup(**setup)
        scales, orig = [], scaler.update

        def update(*a, orig=orig, scaler=scaler):
            scales.append(scaler.get_scale())
            orig(*a)
        scaler.update = update
        l08.reference_train_amp(model, opt, scaler, batches, **kw)
        if label == "plain":
            assert scales + [scaler.get_scale()] == [2.0 ** 10, 2.0 ** 10, 2.0 ** 11, 2.0 ** 11, 2.0 ** 12]
        if label == "first_steps_overflow":
            assert scales[1] < scales[0] and scales[2] < scales[1]
        if label == "bad_batch":
            assert scales[1] == scales[0] and scaler.get_scale() < scales[0]


def test_wrong_loops_fail_for_other_seeds_too():
    with pytest.raises(CheckFailed, match="situation 'clipping'"):
        verdict(l08.check_train_amp, 5, tutorial_loop)
    with pytest.raises(CheckFailed, match="situation 'first_steps_overflow'"):
        verdict(l08.check_train_amp, 5, _loop(step="optimizer"))


class Liar(torch.Tensor):
    """A parameter type that says it equals anything."""

    def __eq__(self, other):
        return True

    __hash__ = torch.Tensor.__hash__


def test_lying_loops_fail():
    def swaps_in_liars(model, optimizer, scaler, batches, **kw):
        recipe(model, optimizer, scaler, batches, **kw)
        for m in model.modules():
            for n, p in list(m.named_parameters(recurse=False)):
                setattr(m, n, torch.nn.Parameter(p.detach().as_subclass(Liar)))
    with pytest.raises(CheckFailed, match="Liar"):
        l08.check_train_amp(swaps_in_liars)

    def other_batches(model, optimizer, scaler, batches, **kw):
        recipe(model, optimizer, scaler, batches[::-1], **kw)       # not the order it was given
    with pytest.raises(CheckFailed, match="situation 'plain'"):
        l08.check_train_amp(other_batches)

    def reports_a_made_up_scale(model, optimizer, scaler, batches, **kw):
        tutorial_loop(model, optimizer, scaler, batches, **kw)
        scaler.state_dict = lambda: {"scale": 4096.0, "_growth_tracker": 0}   # read past by the plan
    with pytest.raises(CheckFailed):
        l08.check_train_amp(reports_a_made_up_scale)
