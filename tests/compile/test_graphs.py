"""amp_edu.compile: graph capture and reading, kernel parsing, eager counts, ulps, break-even.

Capturing traces with dynamo and AOTAutograd but compiles no C++ (about a second per graph); the
one test that runs Inductor is marked slow.
"""

import math

import pytest
import torch
from torch import nn

from amp_edu import compile as comp


def _ln_linear(x):
    lin = _ln_linear.lin
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.relu(lin(torch.nn.functional.layer_norm(x, x.shape[-1:])))


_ln_linear.lin = nn.Linear(8, 8)


@pytest.fixture(scope="module")
def cap():
    return comp.capture(_ln_linear, torch.randn(4, 8), backward=True)


def test_dynamo_graph_holds_the_region_as_two_nodes_and_no_cast(cap):
    code = cap.dynamo[0].code
    assert "_enter_autocast" in code and "_exit_autocast" in code
    assert "bfloat16()" not in code and "convert_element_type" not in code


def test_aten_graph_has_the_casts_with_their_dtypes(cap):
    casts = comp.casts(cap.forward[0])
    # input (after layer_norm), weight and bias go down to bf16
    assert sum(1 for c in casts if (c[1], c[2]) == ("float32", "bfloat16")) == 3
    assert cap.backward, "backward=True captures the backward graph too"


def test_low_precision_ops_reads_output_dtypes_not_casts_or_views(cap):
    assert comp.low_precision_ops(cap.forward[0]) == {"addmm", "relu"}
    rows = dict((n, (op, dt)) for n, op, dt in comp.dtype_rows(cap.forward[0]))
    assert rows["addmm"] == ("addmm", "bfloat16")
    assert any(op == "var_mean" and dt == "float32" for op, dt in rows.values())


def test_type_promotion_is_read_from_the_output():
    lin = nn.Linear(4, 4)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x + lin(x)            # bf16 + fp32 -> fp32
    gm = comp.capture(f, torch.randn(2, 4)).forward[0]
    assert comp.low_precision_ops(gm) == {"addmm"}
    assert any(op == "add" and dt == "float32" for _, op, dt in comp.dtype_rows(gm))


def test_capture_rejects_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        comp.capture(3)
    with pytest.raises(TypeError, match="bool"):
        comp.capture(torch.relu, torch.ones(1), backward=1)
    with pytest.raises(TypeError, match="GraphModule"):
        comp.casts("not a graph")


CODE = '''
cpp_fused__to_copy_native_layer_norm_0 = async_compile.cpp_pybinding([], r"""...""")
cpp_fused__softmax_native_layer_norm_2 = async_compile.cpp_pybinding([], r"""...""")
def call(args):
    with torch.no_grad():
        buf0 = empty_strided_cpu((8, 32), (32, 1), torch.bfloat16)
        cpp_fused__to_copy_native_layer_norm_0(primals_1, buf0)
        extern_kernels.addmm(buf2, buf0, reinterpret_tensor(buf1, (32, 64), (1, 32), 0), alpha=1, beta=1, out=buf3)
        cpp_fused__to_copy_1(primals_4, buf5)
        cpp_fused__softmax_native_layer_norm_2(buf3, buf6)
        buf7 = torch.ops.mkldnn._linear_pointwise(buf6, buf5, None, 'none', [], '')
        return (buf7, )
'''


def test_kernels_split_names_into_the_fused_ops():
    ks = comp.kernels(CODE, {"native_layer_norm", "_softmax", "addmm"})
    assert [k.name for k in ks] == ["cpp_fused__to_copy_native_layer_norm_0", "extern_kernels.addmm",
                                    "cpp_fused__to_copy_1", "cpp_fused__softmax_native_layer_norm_2",
                                    "torch.ops.mkldnn._linear_pointwise"]
    assert ks[0].ops == ("_to_copy", "native_layer_norm") and ks[3].ops == ("_softmax", "native_layer_norm")
    assert [comp.kernel_kind(k) for k in ks] == ["cast + compute", "library call", "cast only", "compute only",
                                                 "library call"]
    assert ks[1].ops == ("addmm",) and ks[4].ops == ("_linear_pointwise",)


def test_triton_kernels_are_read_the_same_way():
    code = """def call(args):
    triton_poi_fused__to_copy_0.run(primals_1, buf0, 4096, stream=stream0)
    extern_kernels.addmm(primals_2, buf1, buf0, alpha=1, beta=1, out=buf2)
    triton_per_fused__softmax_native_layer_norm_1.run(buf2, buf3, 256, 64, stream=stream0)
"""
    ks = comp.kernels(code, {"native_layer_norm", "_softmax"})
    assert [k.name for k in ks] == ["triton_poi_fused__to_copy_0", "extern_kernels.addmm",
                                    "triton_per_fused__softmax_native_layer_norm_1"]
    assert [comp.kernel_kind(k) for k in ks] == ["cast only", "library call", "compute only"]
    assert ks[2].ops == ("_softmax", "native_layer_norm")


def test_kernel_without_vocabulary_keeps_its_name_as_one_op():
    k = comp.kernels(CODE)[3]
    assert k.generated and k.ops == ("_softmax_native_layer_norm",)
    with pytest.raises(TypeError, match="output code"):
        comp.kernel_calls(None)
    with pytest.raises(TypeError, match="Kernel"):
        comp.kernel_kind("cpp_fused_relu_0")


def test_count_eager_counts_casts_and_skips_views():
    w = torch.randn(8, 8, requires_grad=True)

    def f():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (torch.randn(4, 8) @ w.t()).relu()
    c = comp.count_eager(f)
    assert c.ops["_to_copy"] == 2 and c.ops["mm"] == 1 and c.ops["relu"] == 1
    assert "t" not in c.ops and "transpose" not in c.ops
    assert c.kernels == sum(c.ops.values()) and c.bytes > 0
    with pytest.raises(TypeError):
        comp.count_eager(5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_ulp_distance_counts_representable_steps(dtype):
    a = torch.tensor([1.0, -1.0, 0.0, 2.0], dtype=dtype)
    up = torch.nextafter(a.float(), torch.tensor(math.inf)).to(dtype) if dtype == torch.float32 else None
    if up is None:                      # the next 16-bit float up: add one to the bit pattern of a positive value
        up = (a.view(torch.int16) + torch.where(a >= 0, 1, -1).to(torch.int16)).view(dtype)
        up[2] = torch.tensor(0.0).to(dtype)   # keep 0 for the zero cases below
    d = comp.ulp_distance(a, up)
    assert d[0] == 1 and d[1] == 1 and d[3] == 1
    z = torch.tensor([0.0, -0.0], dtype=dtype)
    assert comp.ulp_distance(z[:1], z[1:]).item() == 0          # +0 and -0: the same number
    tiny = torch.tensor([torch.finfo(dtype).tiny], dtype=dtype)
    smallest = tiny * torch.finfo(dtype).eps                      # smallest subnormal
    assert comp.ulp_distance(smallest, -smallest).item() == 2     # across zero


def test_compare_bits_reports_where_and_how_far():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.bfloat16)
    b = a.clone()
    b[1, 0] = (b[1, 0].view(torch.int16) + 3).view(torch.bfloat16)
    r = comp.compare_bits(b, a)
    assert (r.n, r.differ, r.max_ulps, r.worst_index) == (4, 1, 3, (1, 0))
    assert "1 of 4" in r.sentence() and "3 ulp" in r.sentence()
    assert "bit-identical" in comp.compare_bits(a, a).sentence()


def test_ulp_distance_rejects_bad_input():
    with pytest.raises(TypeError):
        comp.ulp_distance([1.0], torch.ones(1))
    with pytest.raises(ValueError, match="share dtype"):
        comp.ulp_distance(torch.ones(2), torch.ones(2, dtype=torch.float16))
    with pytest.raises(ValueError, match="dtype must be"):
        comp.ulp_distance(torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="NaN"):
        comp.ulp_distance(torch.tensor([math.nan]), torch.tensor([1.0]))


def test_inductor_fuses_autocast_casts_and_matches_eager_with_emulated_casts():
    """Runs Inductor (a C++ build on a cold cache): the kernels it reports, its byte count, and
    emulate_precision_casts giving eager's bits."""
    import torch._inductor.config as config
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16), nn.LayerNorm(16))

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return m(x).softmax(-1)
    x = torch.randn(8, 16)
    torch._dynamo.reset()
    cf = torch.compile(f)
    _, codes, nbytes = comp.run_and_count(cf, x)
    ks = comp.kernels(codes[0], {"gelu", "native_layer_norm", "_softmax", "addmm"})
    kinds = [comp.kernel_kind(k) for k in ks]
    assert kinds.count("library call") == 2 and "cast + compute" in kinds
    assert any(k.ops == ("_softmax", "native_layer_norm") for k in ks)
    assert nbytes > 0
    again, codes2, nbytes2 = comp.run_and_count(cf, x)    # dynamo reset first: compiled again, same count
    assert nbytes2 == nbytes and len(codes2) == len(codes)
    torch._dynamo.reset()
    with config.patch(emulate_precision_casts=True):
        y = torch.compile(f)(x)
    torch._dynamo.reset()
    assert comp.compare_bits(y.detach(), f(x).detach()).differ == 0
