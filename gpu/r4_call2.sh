#!/usr/bin/env bash
# Round 4, device call 2 (about 560 s): do_bench check of the slowdowns, +10% / +6% slowed runs, A/B unchanged/slower.
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
B=(python3 benchmarks/bench_verdicts.py --device cuda)
timeout 70 "${B[@]}" --verify-only --workloads gemm,attention --scales 1.05,1.10 2>&1 | grep -v USDT | tee $OUT/a_verify.txt
echo "a $(( $(date +%s) - t0 )) s"
timeout 230 "${B[@]}" --unchanged 0 --slowed 5 --scales 1.10,1.05 --workloads gemm,attention --deadline 190 \
  --out $OUT/b_slowed.jsonl 2>&1 | grep -v USDT | tee $OUT/b_slowed.txt; echo "b $(( $(date +%s) - t0 )) s"
left=$(( 560 - ($(date +%s) - t0) ))
OUT=$OUT RUNS=5 CASES=unchanged,slower DEADLINE=$(( left - 90 )) timeout $left bash gpu/ab.sh 2>&1 | tail -40
cp $OUT/ab/* $OUT/ 2>/dev/null; rm -rf $OUT/ab
echo "c $(( $(date +%s) - t0 )) s"
