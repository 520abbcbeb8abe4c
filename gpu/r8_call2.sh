#!/usr/bin/env bash
# Round 8, device call 2 (about 560 s): the A/B of a file of 10 GEMM tests next to its stored-baseline run after
# the gated workers pre-pay their first test's one-time costs (ab/prewarm.py) and unused workers are killed instead
# of being told to stop (every worker's timeline in $OUT/ab10.json); then A/B of one test, unchanged and +9.9%.
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv | tee $OUT/gpu.txt
timeout 450 python3 benchmarks/bench_ab.py --device cuda --tests 10 --runs 3 --modes ab,stored --cases unchanged \
  --keep-cache --deadline 300 --out $OUT/ab10.json 2>&1 | grep -v USDT | tee $OUT/ab10.txt | tail -n 12
echo "ab10 $(( $(date +%s) - t0 )) s"
left=$(( 585 - ($(date +%s) - t0) ))
[ $left -gt 90 ] && timeout $left python3 benchmarks/bench_ab.py --device cuda --runs 2 --modes ab --cases unchanged,slower \
  --keep-cache --deadline $(( left - 70 )) --out $OUT/ab1.json 2>&1 | grep -v USDT | tee $OUT/ab1.txt | tail -n 12
echo "total $(( $(date +%s) - t0 )) s"
