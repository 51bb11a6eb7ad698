"""amp_edu.autocast against PyTorch's own autocast, op for op.

* The op tables equal the ops PyTorch registers for its AutocastCUDA / AutocastCPU dispatch keys.
* torch's own autocast test lists (torch.testing._internal.autocast_test_lists), replayed the way
  torch's tests replay them: 100% dtype agreement for both policies (exactly, so one regression
  fails), numbers bit-identical to the hand-cast control. The CPU policy is compared with
  torch.autocast("cpu") itself; the CUDA
  policy, on a machine without a GPU, with the dtypes the CUDA lists expect (torch's CUDA autocast
  only touches CUDA tensors, so it cannot run here) -- and with torch.autocast("cuda") when a GPU
  is present.
* Everyday layers and functions: equal to torch's CPU autocast except the documented gaps.
* A transformer block: loss and fp32 gradients equal torch.autocast's within bf16 rounding.
"""

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

from amp_edu import tree
from amp_edu.autocast import agreement, autocast, policy, versions



@pytest.fixture(scope="module")
def reports():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {p: agreement.run(p) for p in ("cpu", "cuda")}


def _registered(key):
    return {r.split("::")[1].split(".")[0] for r in torch._C._dispatch_get_registrations_for_dispatch_key(key)}


@pytest.mark.parametrize("key, pol", [("AutocastCUDA", "cuda"), ("AutocastCPU", "cpu")])
def test_tables_equal_torch_registrations(key, pol):
    """On torch versions.TABLES_FROM the tables are its registrations exactly; on a release whose
    changes are recorded (versions.KNOWN_CHANGES) the difference is exactly the recorded one; on
    any other the difference is reported ("your torch differs here"), not failed."""
    reg = _registered(key)
    diff = versions.differences(pol, reg)
    want = versions.expected(torch.__version__, pol)
    if want is None:
        pytest.skip(f"your torch differs here: {diff} (torch {torch.__version__}; the tables are "
                    f"{versions.TABLES_FROM}'s)" if not diff.same else "an unrecorded torch with the same ops")
    assert (diff.added, diff.removed) == want, (
        f"torch {torch.__version__}: {diff}; recorded for its release: added {want[0]}, removed {want[1]}")


def test_versions_report_says_where_a_torch_differs():
    same = {p: set(policy.REGISTERED[p]) for p in ("cpu", "cuda")}
    assert "registers the same ops" in versions.report(same, "2.13.0")
    other = {"cpu": (same["cpu"] - {"cholesky", "qr"}) | {"linalg_matrix_sqrth"},
             "cuda": same["cuda"] | {"_cudnn_rnn", "linalg_matrix_sqrth"}}
    text = versions.report(other, "2.14.1")
    assert text.startswith(f"The op tables are torch {versions.TABLES_FROM}'s. Your torch 2.14.1 differs here:")
    assert "CPU: also casts linalg_matrix_sqrth (fp32); no longer casts cholesky, qr" in text
    assert "CUDA: also casts _cudnn_rnn, linalg_matrix_sqrth" in text
    assert versions.expected("2.14.1+cu130", "cpu") == (("linalg_matrix_sqrth",), ("cholesky", "qr"))
    assert versions.expected("2.9.0", "cpu") is None
    with pytest.raises(ValueError, match="pol must be one of cuda, cpu"):
        versions.differences("mps")


def test_cuda_table_kinds_follow_the_header_lists():
    # spot checks of each category against AT_FORALL_* in aten/src/ATen/autocast_mode.h
    expect = {"mm": "lower", "linear": "lower", "exp": "fp32", "layer_norm": "fp32", "softmax": "fp32_dtype",
              "sum": "fp32_dtype", "norm": "fp32_dtype", "addcmul": "promote", "index_put": "promote",
              "binary_cross_entropy": "banned"}
    assert {k: policy.POLICIES["cuda"][k] for k in expect} == expect
    assert policy.POLICIES["cpu"]["cat"] == "promote" and "cat" not in policy.POLICIES["cuda"]


@pytest.mark.parametrize("pol", ["cpu", "cuda"])
def test_agreement_with_torch_test_lists(reports, pol):
    r = reports[pol]
    assert len(r.runnable) > 100, r.summary()
    assert r.agreement == 1.0, r.summary() + "".join(
        f"\n  {c.list_name} {c.variant} {c.amp_dtype}: ours {c.ours}, reference {c.reference}"
        for c in r.disagreements)
    assert not r.disagreements, "a disagreement must be explained in policy.py before it is accepted"
    assert all(c.bitwise for c in r.runnable if c.bitwise is not None), "numbers differ from the control"
    assert {c.op for c in r.not_runnable} <= {"cudnn_convolution", "cudnn_convolution_transpose"}


def test_cpu_reference_is_torch_and_meets_the_lists(reports):
    r = reports["cpu"]
    assert all(c.reference == c.expected for c in r.runnable), "torch itself disagrees with its lists?"
    lists = agreement.by_list(r)
    assert {"torch_16", "nn_16", "torch_fp32", "nn_fp32", "torch_need_autocast_promote"} <= set(lists)


def test_a_wrong_table_is_caught(monkeypatch):
    # the harness can fail: move linear to the fp32 category and the lists notice
    monkeypatch.setitem(policy.POLICIES["cpu"], "linear", policy.FP32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = agreement.run("cpu", only={"nn_16", "torch_fp32"})
    assert {c.op for c in r.disagreements} == {"linear"}
    with pytest.raises(ValueError, match="policy"):
        agreement.run("tpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU to run torch's CUDA autocast")
def test_cuda_policy_equals_torch_cuda_autocast():
    L = agreement.torch_lists().AutocastTestLists(torch.device("cuda"))
    for op, args in [e[:2] for e in L.torch_fp16 + L.torch_fp32 + L.torch_need_autocast_promote
                     if len(e) == 2 or isinstance(e[2], (dict, bool)) and not e[2]]:
        with torch.autocast("cuda"):
            t = getattr(torch, op)(*args)
        with autocast("cuda"):
            o = getattr(torch, op)(*args)
        assert next(tree.tensors(t)).dtype == next(tree.tensors(o)).dtype, op


def test_everyday_calls_match_torch_cpu_autocast_except_documented_gaps():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = agreement.everyday()
    differ = {r.name for r in results if not r.agrees}
    assert differ == set(agreement.KNOWN_GAPS), differ
    assert len(results) >= 40


class _Block(torch.nn.Module):
    """A pre-norm transformer block with a classifier head (dropout off, so runs are comparable)."""

    def __init__(self, d=32, heads=4, classes=10):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True,
                                                      norm_first=True)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.layer(x)).flatten(0, 1), y.flatten())


class _CourseTransformer(torch.nn.Module):
    """The course's own tiny GPT (amp_edu.models: TransformerBlock with attention written out)."""

    def __init__(self):
        super().__init__()
        from amp_edu.models import CharTransformer
        self.net = CharTransformer(16, 8, d_model=32, n_heads=4, n_layers=2)

    def forward(self, idx, y):
        return F.cross_entropy(self.net(idx).flatten(0, 1), y.flatten())


@pytest.mark.parametrize("make, inputs", [
    (_Block, lambda: (torch.randn(2, 6, 32), torch.randint(0, 10, (2, 6)))),
    (_CourseTransformer, lambda: (torch.randint(0, 16, (2, 8)), torch.randint(0, 16, (2, 8)))),
], ids=["nn.TransformerEncoderLayer", "amp_edu.models.CharTransformer"])
def test_transformer_block_loss_and_grads_equal_torch_within_bf16_rounding(make, inputs):
    torch.manual_seed(0)
    ref = make()
    mine = copy.deepcopy(ref)
    x, y = inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        l_ref = ref(x, y)
    l_ref.backward()
    with autocast("cpu", dtype=torch.bfloat16):
        l_mine = mine(x, y)
    l_mine.backward()
    eps = 2.0 ** -8     # bf16 rounding (8 significant bits)
    assert l_mine.dtype == l_ref.dtype == torch.float32
    torch.testing.assert_close(l_mine, l_ref, rtol=eps, atol=0)
    for (name, p_ref), p_mine in zip(ref.named_parameters(), mine.parameters()):
        assert p_mine.grad.dtype == torch.float32, name
        torch.testing.assert_close(p_mine.grad, p_ref.grad, rtol=eps, atol=eps * p_ref.grad.abs().max().item(),
                                   msg=name)
