#!/usr/bin/env bash
# Round 5, device call 1 (about 540 s): the clock-exponent band on the stored-baseline GEMM 4096^3 (3 unchanged,
# 6 at +9.4% and 6 at +6.0% of the work by do_bench, fresh processes), then A/B of a file of 10 tests next to its
# stored-baseline run (issue 22).
source gpu/setup.sh
mkdir -p $OUT
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,clocks.mem --format=csv > $OUT/nvidia-smi.txt 2>&1
t0=$(date +%s)
timeout 330 python3 benchmarks/bench_verdicts.py --device cuda --unchanged 3 --slowed 6 --scales 1.10,1.05 --workloads gemm \
  --deadline 285 --out $OUT/gemm.jsonl 2>&1 | grep -v USDT | tee $OUT/gemm.txt
echo "gemm $(( $(date +%s) - t0 )) s"
left=$(( 545 - ($(date +%s) - t0) ))
PARTS=3 timeout $left bash gpu/cost.sh 2>&1 | grep -v USDT | tail -n 30
echo "total $(( $(date +%s) - t0 )) s"
