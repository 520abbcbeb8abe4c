#!/usr/bin/env bash
# Trustworthy verdicts on one CUDA GPU (issue 6), about 4 minutes at most (the false-alarm runs stop starting new pytest runs after 105 s):
#  1. the CUDA-only measuring tests (graph timing, its fallback, L2 flush) and the compare tests;
#  2. benchmarks/bench_false_alarms.py on GPU workloads (matmul, add, mlp; 3 copies each per run):
#     unchanged runs, 2/5/10% slowdowns by extra work, +10% peak memory, next to pytest-benchmark's
#     --benchmark-compare-fail=median:5% (its --benchmark-max-time trimmed to 0.3 s to fit);
#  3. benchmarks/bench_timing_accuracy.py: plugin vs ncu gpu__time_duration.sum vs triton do_bench vs
#     torch.utils.benchmark on GEMMs, norms, elementwise, attention and tiny kernels.
# Everything lands in $OUT/trust.tar.gz (logs, tables, observations.jsonl, ncu CSV).
set -u
OUT=${OUT:-$(mktemp -d)}
WORK=$(mktemp -d)/trust
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$WORK/gpu.txt" 2>&1

timeout 60 python3 -m pytest tests/test_measure_cuda.py tests/test_compare.py -q -p no:cacheprovider \
  > "$WORK/unit_tests.log" 2>&1
echo "unit tests: $(tail -n 1 "$WORK/unit_tests.log")"

timeout 140 python3 benchmarks/bench_false_alarms.py --device cuda --unchanged 3 --reps 3 \
  --slowdowns 0.02,0.05,0.10 --slowed-runs 1 --memory-runs 1 --benchmark-max-time 0.3 --deadline 105 \
  --out "$WORK/false_alarms" > "$WORK/false_alarms.log" 2>&1
echo "false alarms (exit $?):"; sed -n '/^pytest-gpuperf (defaults/,$p' "$WORK/false_alarms.log"

timeout 100 python3 benchmarks/bench_timing_accuracy.py --out "$WORK/timing" > "$WORK/timing.log" 2>&1
echo "timing accuracy (exit $?):"; tail -n 20 "$WORK/timing.log"

tar czf "$OUT/trust.tar.gz" -C "$(dirname "$WORK")" trust
echo "wrote $OUT/trust.tar.gz"
