#!/usr/bin/env bash
# Round 7, device call 1 (about 480 s): the restructured CUDA path (issue 19) through its CUDA unit tests and the
# CUDA perf suite judged against the stored H200 baselines; then the A/B of a file of 10 GEMM tests next to its
# stored-baseline run (issue 22), with each worker's seconds and its tests' call seconds in $OUT/ab10.json.
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv | tee $OUT/gpu.txt
timeout 150 python3 -m pytest tests/test_measure_cuda.py tests/test_markers.py tests/test_compare.py -q \
  -p no:cacheprovider -p no:randomly -rs 2>&1 | grep -v USDT | tail -n 15 | tee $OUT/unit_cuda.txt
echo "unit $(( $(date +%s) - t0 )) s"
timeout 170 python3 -m pytest -p no:randomly -q -rA --gpuperf --gpuperf-backend cuda perf_tests \
  --gpuperf-json $OUT/suite.json 2>&1 | grep -v USDT | tail -n 30 | tee $OUT/suite_judge.txt
echo "suite $(( $(date +%s) - t0 )) s"
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/bench_ab.py --device cuda --tests 10 --runs 1 --modes ab,stored --cases unchanged \
  --keep-cache --out $OUT/ab10.json 2>&1 | grep -v USDT | tee $OUT/ab10.txt | tail -n 12
echo "total $(( $(date +%s) - t0 )) s"
