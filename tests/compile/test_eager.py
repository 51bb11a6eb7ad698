"""amp_edu.compile.eager.count_eager: one kernel per computing ATen op, and the bytes each reads and
writes, counted by hand on small matmuls."""

import torch

from amp_edu.compile.eager import EagerCount, count_eager


def test_the_bytes_are_every_kernels_inputs_and_output():
    a, b = torch.randn(4, 8), torch.randn(8, 16)
    c = count_eager(lambda: torch.mm(a, b))
    assert dict(c.ops) == {"mm": 1} and c.kernels == 1
    assert c.bytes == (4 * 8 + 8 * 16 + 4 * 16) * 4                     # read a and b, write 4x16, fp32

    def autocast_mm():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.mm(a, b)
    c = count_eager(autocast_mm)
    assert dict(c.ops) == {"_to_copy": 2, "mm": 1} and c.kernels == 3
    # each cast reads fp32 and writes bf16 (6 bytes an element); the matmul reads and writes bf16
    assert c.bytes == (4 * 8 + 8 * 16) * (4 + 2) + (4 * 8 + 8 * 16 + 4 * 16) * 2


def test_a_view_is_no_kernel_and_a_copy_is_one():
    a = torch.randn(4, 8)
    assert count_eager(lambda: a.view(2, 16).t()[:3].unsqueeze(0)) == EagerCount()      # views only: nothing moves
    c = count_eager(lambda: a.t().contiguous())
    assert dict(c.ops) == {"clone": 1} and c.bytes == 2 * 32 * 4
