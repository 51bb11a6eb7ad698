#!/usr/bin/env bash
# The GPU checks to run on a lent device machine, in one go (see CONTRIBUTING.md, "Benchmarks").
# Runs from the checkout with the machine's own torch:  PYTHONPATH=. bash tools/device_check.sh
# Writes into ${OUT:-./device_out}: doctor.txt, tests.log, bench_gpu.json (commit the JSON into
# amp_edu/reference/ as gpu_<name>.json: it carries its environment).
set -uo pipefail
out=${OUT:-./device_out}
mkdir -p "$out"
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
python -m amp_edu doctor | tee "$out/doctor.txt"
# the GPU paths of the parity/agreement tests and the bench's method tests
AMP_EDU_SMOKE=1 timeout 240 python -m pytest -q -x -p no:cacheprovider -o addopts="" \
  tests/test_scaler.py tests/test_autocast.py tests/test_autocast_agreement.py tests/test_bench.py \
  tests/test_memory.py tests/test_device.py 2>&1 | tee "$out/tests.log"
timeout 300 python -m amp_edu bench --json "$out/bench_gpu.json" 2>&1 | tail -40
