#!/usr/bin/env bash
# Round 4, device call 4 (about 425 s): after the power warm-up waits for the power too and A/B lets time decide
# when both sides' clocks spread alike: A/B of one GEMM test (unchanged / K 4096 -> 4480, +9.9% by do_bench),
# then the stored-baseline GEMM 4096^3: 3 unchanged and 5 +10% (K 4480, +9.4% by do_bench) fresh processes.
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
timeout 320 python3 benchmarks/bench_ab.py --device cuda --runs 5 --modes ab --cases unchanged,slower --deadline 285 \
  --out $OUT/ab_observations.json 2>&1 | grep -v USDT | tee $OUT/ab.log | tail -n 16
echo "ab $(( $(date +%s) - t0 )) s"
left=$(( 425 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/bench_verdicts.py --device cuda --unchanged 3 --slowed 5 --scales 1.10 --workloads gemm \
  --deadline $(( left - 25 )) --out $OUT/gemm.jsonl 2>&1 | grep -v USDT | tee $OUT/gemm.txt
echo "gemm $(( $(date +%s) - t0 )) s"
