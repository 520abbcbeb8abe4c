#!/usr/bin/env bash
# Round 5, device call 3 (about 540 s): after the A/B fixes (a count that reads 0 on both sides is unchanged, not
# inconclusive; sides at different clocks judged over the workers' exponent band) and 3-process baselines on a
# power-capped GPU: stored-baseline GEMM + attention (3 unchanged, 5 at +10% and 5 at +5% of the work), then A/B of
# one GEMM test (3 unchanged, 2 at +9.9%).
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
timeout 330 python3 benchmarks/bench_verdicts.py --device cuda --unchanged 3 --slowed 5 --scales 1.10,1.05 \
  --workloads gemm,attention --deadline 280 --out $OUT/verdicts.jsonl 2>&1 | grep -v USDT | tee $OUT/verdicts.txt
echo "verdicts $(( $(date +%s) - t0 )) s"
left=$(( 545 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/bench_ab.py --device cuda --runs 3 --modes ab --cases unchanged,slower \
  --deadline $(( left - 45 )) --out $OUT/ab_observations.json 2>&1 | grep -v USDT | tee $OUT/ab.log | tail -n 14
echo "total $(( $(date +%s) - t0 )) s"
