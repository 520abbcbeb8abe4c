#!/usr/bin/env bash
# Round 9, device call 1 (about 330 s): why the first test of an A/B worker reads fast. 1. gpu/idle_gap.py: the
# bench's GEMM after idle gaps of 0-5 s (speed and SM clock in windows after the resume); 2. the 10-test A/B next to
# its stored run, two runs, with every perf test of every process logged (clock, power warm-up, value, end time).
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv | tee $OUT/gpu.txt
timeout 120 python3 gpu/idle_gap.py --repeats 1 --out $OUT/idle_gap.json 2>&1 | grep -v USDT | tee $OUT/idle_gap.txt
echo "idle gap $(( $(date +%s) - t0 )) s"
timeout 330 python3 benchmarks/bench_ab.py --device cuda --tests 10 --runs 2 --modes ab,stored --cases unchanged \
  --keep-cache --deadline 150 --log-tests $OUT/logs --out $OUT/ab10.json 2>&1 | grep -v USDT | tee $OUT/ab10.txt \
  | tail -n 12
echo "total $(( $(date +%s) - t0 )) s"
