#!/usr/bin/env bash
# A change of the insides must keep the verdicts: on the H200, the CUDA unit tests, the perf suite judged against
# the committed H200 baselines (JSON report: one verdict per metric), and the GEMM gate (unchanged / +9% slower by
# real extra K tiles in the same kernel) in fresh processes.
#   TAG=before bash gpu/refactor_check.sh      # results under $OUT/$TAG
source gpu/setup.sh
TAG=${TAG:-run}
mkdir -p $OUT/$TAG
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv | tee $OUT/$TAG/gpu.txt
timeout 150 python3 -m pytest tests/test_measure_cuda.py tests/test_device_time.py -q -p no:cacheprovider 2>&1 \
  | grep -v USDT | tail -8 | tee $OUT/$TAG/unit.txt
timeout 240 python3 -m pytest perf_tests -p no:cacheprovider --gpuperf --gpuperf-backend cuda -rA \
  --gpuperf-json $OUT/$TAG/perf.json 2>&1 | grep -v USDT | tail -60 > $OUT/$TAG/perf.txt
tail -3 $OUT/$TAG/perf.txt
timeout 300 python3 benchmarks/bench_verdicts.py --device cuda --workloads gemm --unchanged ${RUNS:-3} \
  --slowed ${RUNS:-3} --scales 1.09 --out $OUT/$TAG/gemm.jsonl 2>&1 | grep -v USDT | tail -15 | tee $OUT/$TAG/gemm.txt
