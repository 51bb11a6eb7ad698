"""amp_edu.compile.inductor: kernel names read back into the ATen ops fused into them, on written-out
output code (no compile; tests/compile/test_graphs.py runs Inductor itself)."""

import pytest

from amp_edu.compile.inductor import KERNEL_KINDS, Kernel, kernel_calls, kernel_kind, kernels

CODE = '''
cpp_fused__to_copy_native_layer_norm_backward_mul_12 = async_compile.cpp_pybinding([], r"""...""")
def call(args):
    cpp_fused__to_copy_native_layer_norm_backward_mul_12(buf0, buf1)
    buf2 = torch.ops.mkldnn._linear_pointwise.default(buf1, buf3, None, 'none', [], '')
    triton_red_fused_a_b_c_3.run(buf2, buf4, 64, stream=stream0)
    extern_kernels.mm(buf4, buf5, out=buf6)
    triton_poi_fused__to_copy_0.run(buf6, buf7, 4096, stream=stream0)
    return (buf7, )
'''


def test_kernel_calls_lists_each_call_in_order_in_every_form():
    assert kernel_calls(CODE) == ["cpp_fused__to_copy_native_layer_norm_backward_mul_12",
                                  "torch.ops.mkldnn._linear_pointwise.default", "triton_red_fused_a_b_c_3",
                                  "extern_kernels.mm", "triton_poi_fused__to_copy_0"]
    assert kernel_calls("def call(args):\n    return ()\n") == []


def test_a_name_is_split_into_ops_of_the_vocabulary_even_where_the_longest_match_dead_ends():
    ks = kernels(CODE, {"native_layer_norm", "native_layer_norm_backward", "mul", "a_b", "a", "b_c"})
    assert ks[0] == Kernel("cpp_fused__to_copy_native_layer_norm_backward_mul_12",
                           ("_to_copy", "native_layer_norm_backward", "mul"), True)   # counter 12 dropped
    assert ks[1] == Kernel("torch.ops.mkldnn._linear_pointwise.default", ("_linear_pointwise",), False)
    assert ks[2].ops == ("a", "b_c")            # "a_b" first would leave "c", which is no op
    assert ks[3] == Kernel("extern_kernels.mm", ("mm",), False)
    assert [kernel_kind(k) for k in ks] == ["cast + compute", "library call", "compute only", "library call",
                                           "cast only"]
    assert set(map(kernel_kind, ks)) == set(KERNEL_KINDS)
    assert kernels(CODE)[2].ops == ("a_b_c",)   # no vocabulary: the whole name is one op


def test_bad_input():
    with pytest.raises(TypeError, match="output code"):
        kernels(b"def call(args): pass")
