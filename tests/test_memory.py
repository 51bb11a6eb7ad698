"""amp_edu.memory: saved-activation bytes counted with saved_tensors_hooks, on the CPU."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_edu import memory


def _expected(widths, batch, itemsize, amp):
    """Hand count for relu_mlp: input, each hidden ReLU output (shared with the next Linear), and
    under autocast a copy of every weight after the first (the first layer's input needs no grad)."""
    acts = batch * (widths[0] + sum(widths[1:-1])) * itemsize
    copies = sum(widths[i] * widths[i + 1] for i in range(1, len(widths) - 1)) * itemsize if amp else 0
    return acts, copies


@pytest.mark.parametrize("dtype, itemsize, amp", [(None, 4, False), (torch.bfloat16, 2, True),
                                                  (torch.float16, 2, True)])
def test_relu_mlp_counts_match_the_hand_count(dtype, itemsize, amp):
    widths, batch = [12, 20, 6, 5], 7
    r = memory.saved_bytes(memory.relu_mlp(widths), torch.randn(batch, 12), dtype=dtype)
    acts, copies = _expected(widths, batch, itemsize, amp)
    assert (r.activation_bytes, r.weight_copy_bytes) == (acts, copies)
    assert r.total_bytes == acts + copies


def test_parameters_are_not_counted_and_weights_gain_a_copy():
    m = memory.relu_mlp([8, 16, 4])
    x = torch.randn(3, 8)
    fp32 = memory.saved_bytes(m, x)
    amp = memory.saved_bytes(m, x, dtype=torch.bfloat16)
    assert fp32.bytes_of("parameter") == 16 * 4 * 4       # the 2nd weight, saved as itself
    assert fp32.weight_copy_bytes == 0
    assert amp.bytes_of("parameter") == 0 and amp.weight_copy_bytes == 16 * 4 * 2
    assert all(p.dtype == torch.float32 for p in m.parameters()), "autocast never changes parameters"


def test_each_storage_counted_once_and_attributed_to_its_module():
    m = memory.relu_mlp([8, 16, 4])
    r = memory.saved_bytes(m, torch.randn(5, 8), dtype=torch.bfloat16)
    by = r.by_module()
    assert list(by) == ["0", "1", "2"]
    assert by["1"] == {"activation": 5 * 16 * 2}   # the ReLU output, also the next Linear's input
    assert by["2"] == {"weight_copy": 16 * 4 * 2}
    assert len({(t.shape, t.dtype) for t in r.tensors}) == len(r.tensors)


def test_loss_outside_modules_and_gradients_stay_fp32():
    m = memory.relu_mlp([8, 16, 4])
    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    r = memory.saved_bytes(m, x, dtype=torch.bfloat16, loss_fn=F.cross_entropy, target=y)
    assert "(outside modules)" in r.by_module()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(m(x), y)
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in m.parameters())


def test_saving_grows_with_batch_and_fit_line_recovers_it():
    widths = [16, 32, 32, 4]
    batches = [1, 2, 4, 8]
    amp = [memory.saved_bytes(memory.relu_mlp(widths), torch.randn(b, 16), dtype=torch.float16).total_bytes
           for b in batches]
    fixed, per_sample = memory.fit_line(batches, amp)
    acts1, copies = _expected(widths, 1, 2, True)
    assert fixed == pytest.approx(copies) and per_sample == pytest.approx(acts1)


def test_largest_batch():
    assert memory.largest_batch(1000, 100, 90) == 10
    assert memory.largest_batch(1000, 1000, 1) == 0
    assert memory.largest_batch(100, 200, 1) == 0
    with pytest.raises(ValueError):
        memory.largest_batch(100, 0, 0)
    with pytest.raises(ValueError):
        memory.largest_batch(float("inf"), 0, 1)


def test_training_state_bytes():
    m = nn.Linear(10, 10)
    assert memory.training_state_bytes(m) == {"parameters": 440, "gradients": 440, "optimizer": 880}
    assert memory.training_state_bytes(m, optimizer_states=1)["optimizer"] == 440


@pytest.mark.parametrize("call, exc, name", [
    (lambda: memory.relu_mlp_saved_bytes([4, 2], True), TypeError, "batch"),
    (lambda: memory.relu_mlp_saved_bytes([4, 2], 2.0), TypeError, "batch"),
    (lambda: memory.relu_mlp_saved_bytes([4, 2], 0), ValueError, "batch"),
    (lambda: memory.fit_line([1, True], [2, 3]), TypeError, r"xs\[1\]"),
    (lambda: memory.fit_line([1, 2], [2, "3"]), TypeError, r"ys\[1\]"),
    (lambda: memory.fit_line([1, 2], [2, float("inf")]), ValueError, r"ys\[1\]"),
    (lambda: memory.largest_batch("100", 0, 1), TypeError, "budget_bytes"),
    (lambda: memory.largest_batch(100, True, 1), TypeError, "fixed_bytes"),
    (lambda: memory.largest_batch(100, 0, -1), ValueError, "per_sample_bytes"),
    (lambda: memory.training_state_bytes(nn.Linear(2, 2), optimizer_states=True), TypeError, "optimizer_states"),
    (lambda: memory.training_state_bytes(nn.Linear(2, 2), optimizer_states=2.0), TypeError, "optimizer_states"),
    (lambda: memory.training_state_bytes(nn.Linear(2, 2), optimizer_states=-1), ValueError, "2 for Adam"),
])
def test_wrong_type_is_a_type_error_and_out_of_range_a_value_error(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_peak_cuda_bytes_is_none_without_a_gpu():
    if torch.cuda.is_available():
        assert memory.peak_cuda_bytes(lambda: torch.ones(1024, device="cuda")) >= 4096
    else:
        assert memory.peak_cuda_bytes(lambda: None) is None


@pytest.mark.parametrize("call, exc", [
    (lambda: memory.saved_tensors(42), TypeError),
    (lambda: memory.saved_tensors(lambda: None, model="m"), TypeError),
    (lambda: memory.saved_bytes(nn.Linear(2, 2), [1.0, 2.0]), TypeError),
    (lambda: memory.saved_bytes(nn.Linear(2, 2), torch.randn(1, 2), dtype=torch.float64), ValueError),
    (lambda: memory.relu_mlp([4]), ValueError),
    (lambda: memory.relu_mlp([4, 0]), ValueError),
    (lambda: memory.fit_line([1, 1], [2, 3]), ValueError),
    (lambda: memory.fit_line([1], [2]), ValueError),
    (lambda: memory.SavedReport().bytes_of("weights"), ValueError),
    (lambda: memory.training_state_bytes("m"), TypeError),
    (lambda: memory.fit_line([1, 2], [float("nan"), 3]), ValueError),
    (lambda: memory.fit_line("ab", [1, 2]), TypeError),
    (lambda: memory.training_state_bytes(nn.Linear(2, 2), optimizer_states=-1), ValueError),
    (lambda: memory.peak_cuda_bytes(5), TypeError),
])
def test_bad_input(call, exc):
    with pytest.raises(exc):
        call()


def test_policy_changes_what_stays_fp32():
    """The CUDA table keeps softmax/layer-norm outputs in fp32, so it saves more bytes than the CPU
    table on a transformer block; policy=None is torch.autocast on the CPU, i.e. the CPU table."""
    import torch.nn.functional as F

    from amp_edu.models import CharTransformer

    model = CharTransformer(16, 8, d_model=16, n_heads=2, n_layers=1)
    idx = torch.randint(0, 16, (4, 8), generator=torch.Generator().manual_seed(0))

    def loss(out, y):
        return F.cross_entropy(out.flatten(0, 1), y.flatten())

    got = {p: memory.saved_bytes(model, idx, dtype=torch.float16, loss_fn=loss, target=idx, policy=p).total_bytes
           for p in (None, "cpu", "cuda")}
    assert got[None] == got["cpu"] < got["cuda"]
    with pytest.raises(ValueError, match="policy"):
        memory.saved_bytes(model, idx, dtype=torch.float16, policy="tpu")
