#!/usr/bin/env bash
# Round 6, device call 2 (about 570 s): after the least sampling span at the power cap (CAPPED_SPAN), stored-baseline
# verdicts of GEMM, attention, elementwise and MiniLLM in fresh processes (10 unchanged runs = 40 verdicts, 5 at +5%
# of the work), then the CUDA perf suite re-recorded on the H200 and judged against what it recorded.
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
timeout 345 python3 benchmarks/bench_verdicts.py --device cuda --unchanged 10 --slowed 5 --scales 1.05 \
  --workloads gemm,attention,elementwise,minillm --deadline 320 --out $OUT/verdicts.jsonl 2>&1 | grep -v USDT \
  | tee $OUT/verdicts.txt
echo "verdicts $(( $(date +%s) - t0 )) s"
left=$(( 575 - ($(date +%s) - t0) ))
timeout $(( left * 6 / 10 )) python3 -m pytest -p no:randomly -q --gpuperf --gpuperf-update --gpuperf-backend cuda perf_tests \
  2>&1 | grep -v USDT | tail -n 12 | tee $OUT/suite_update.txt
cp baselines/cuda-nvidia-h200-*.yaml $OUT/ 2>/dev/null
left=$(( 580 - ($(date +%s) - t0) ))
timeout $left python3 -m pytest -p no:randomly -q -rA --gpuperf --gpuperf-backend cuda perf_tests 2>&1 | grep -v USDT \
  | tail -n 25 | tee $OUT/suite_judge.txt
echo "total $(( $(date +%s) - t0 )) s"
