#!/usr/bin/env bash
# Vulkan backend on the H200's NVIDIA Vulkan driver (issue 5). The lead unpacks the Vulkan loader and puts wgpu on
# PYTHONPATH before this runs (VK_DRIVER_FILES points at the NVIDIA ICD). Records the H200 Vulkan baselines, re-runs
# them as a comparison, runs the vulkan unit tests, and tars logs + baselines/vulkan-*.yaml into $OUT/vulkan.tar.gz.
set -u
OUT=${OUT:-/tmp/out}
LOG=$(mktemp -d)/vulkan
mkdir -p "$LOG" "$OUT"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
PYTEST=(python3 -m pytest -p no:cacheprovider -p no:randomly)

{
  echo "== environment"; echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}"
  python3 -c "import wgpu; print('wgpu', wgpu.__version__)"
  "${PYTEST[@]}" -o gpuperf_vulkan_adapters=true
} >"$LOG/adapters.txt" 2>&1

timeout 60 "${PYTEST[@]}" --gpuperf --gpuperf-update --gpuperf-backend vulkan perf_tests -rs -v \
  >"$LOG/record.txt" 2>&1; REC=$?
timeout 60 "${PYTEST[@]}" --gpuperf --gpuperf-backend vulkan perf_tests -rs -v >"$LOG/compare.txt" 2>&1; CMP=$?
timeout 50 "${PYTEST[@]}" tests/test_vulkan_backend.py tests/test_vulkan_plugin.py -q -rs >"$LOG/unit.txt" 2>&1; UNIT=$?

cp baselines/vulkan-*.yaml "$LOG/" 2>/dev/null
tar -czf "$OUT/vulkan.tar.gz" -C "$(dirname "$LOG")" vulkan

echo "== vulkan summary (exit codes: record=$REC compare=$CMP unit=$UNIT; 0 = pass)"
cat "$LOG/adapters.txt"
grep -E "^\s+(saxpy|matmul): (time|throughput|bandwidth|flop rate|bound|roof fraction|peak memory)" "$LOG/compare.txt"
tail -n 2 "$LOG/compare.txt"; tail -n 1 "$LOG/unit.txt"
ls "$LOG"/vulkan-*.yaml 2>/dev/null || echo "no vulkan baseline written"
