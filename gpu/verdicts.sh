#!/usr/bin/env bash
# Issue 14's "done when" on the H200 (within 9 minutes): do_bench + kernel-name check of each slowdown, then
# >= 40 unchanged runs over 4 workloads (GEMM, elementwise, seed Linear fwd+bwd, MiniLLM step) and +10% / +5%
# slowdowns by real extra work in the same kernels, all with the plugin's defaults. Prints the table.
source gpu/setup.sh
mkdir -p $OUT/verdicts
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee $OUT/verdicts/gpu.txt
timeout 540 python3 benchmarks/bench_verdicts.py --device cuda --verify --unchanged ${UNCHANGED:-10} \
  --slowed ${SLOWED:-6} --out $OUT/verdicts/observations.jsonl 2>&1 | grep -v USDT | tee $OUT/verdicts/table.txt
