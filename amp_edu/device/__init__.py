"""What this machine can do, and how big the course's experiments should be here.

Mixed precision pays off only where the hardware has fast low-precision units:

* NVIDIA GPUs have **Tensor Cores** from Volta (compute capability 7.0) on: fp16 there,
  bf16 and tf32 from Ampere (8.0), fp8 from Ada/Hopper (8.9 / 9.0).
* ``torch.cuda.is_bf16_supported()`` says True on a T4 (7.5) because bf16 *runs* there through
  emulation; we ask ``including_emulation=False`` to learn whether it runs *natively*.
* A CPU's bf16 matmul goes through oneDNN wherever torch says so
  (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``: AVX512BW/VL/DQ is enough), but it is *faster*
  than fp32 only with AVX512_BF16 or AMX; :func:`cpu_class` tells the classes apart.
  fp16 matmul without AVX512_FP16/AMX-FP16 takes a slow path (pytorch/pytorch#146508).

=================  ===============================================================
``sizes``          the device the lessons run on (:func:`pick_device`), the sizes for the
                   mode (:func:`pick`, :func:`is_smoke`), CPU threads (:func:`num_threads`)
``cpu_features``   the CPU's instruction set as torch, Linux or macOS report it, and the
                   oneDNN ISA it allows (:func:`read_cpu_features`, :func:`onednn_isa`)
``cpu_classes``    the CPU's class: do bf16/fp16 matmuls run, and are they faster than
                   fp32 (:func:`cpu_class`)
``summary``        everything above in one snapshot (:func:`info`) and in the lines the
                   lessons and ``python -m amp_edu doctor`` print (:func:`setup_line`)
=================  ===============================================================
"""

from .cpu_classes import CLASSES, CpuClass, LowPrecisionMatmul, cpu_class
from .cpu_features import (ONEDNN_ISAS, CpuFeatures, cpu_flags, onednn_isa, onednn_limit, parse_cpuinfo,
                           parse_sysctl, parse_torch_capabilities, read_cpu_features)
from .sizes import is_smoke, num_threads, pick, pick_device
from .summary import DeviceInfo, info, provenance_line, report, setup_line

__all__ = ["DeviceInfo", "is_smoke", "pick_device", "pick", "info", "setup_line", "provenance_line", "report",
           "num_threads", "CpuFeatures", "parse_cpuinfo", "parse_sysctl", "parse_torch_capabilities",
           "read_cpu_features", "cpu_flags", "ONEDNN_ISAS", "onednn_limit", "onednn_isa", "LowPrecisionMatmul",
           "CpuClass", "CLASSES", "cpu_class"]
