#!/usr/bin/env bash
# Round 7, device call 2 (about 400 s): A/B workers sample a power-capped GPU for their own budget
# (--gpuperf-ab-max-time, 0.5 s) instead of the stored path's 1 s: the A/B of a file of 10 GEMM tests next to its
# stored-baseline run (goal A/B <= 3x), and A/B of one GEMM test, unchanged and +9.9% (K 4096 -> 4480), twice each
# (verdicts still decided; goal <= 45 s per run).
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
timeout 300 python3 benchmarks/bench_ab.py --device cuda --tests 10 --runs 1 --modes ab,stored --cases unchanged \
  --keep-cache --out $OUT/ab10.json 2>&1 | grep -v USDT | tee $OUT/ab10.txt | tail -n 12
echo "ab10 $(( $(date +%s) - t0 )) s"
left=$(( 580 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/bench_ab.py --device cuda --runs 3 --modes ab --cases unchanged,slower \
  --keep-cache --deadline $(( left - 80 )) --out $OUT/ab1.json 2>&1 | grep -v USDT | tee $OUT/ab1.txt | tail -n 12
echo "total $(( $(date +%s) - t0 )) s"
