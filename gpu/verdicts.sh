#!/usr/bin/env bash
# Issue 14's "done when" on the H200, one device call per slice (each within 9 minutes): do_bench + kernel-name
# check of each slowdown, then unchanged runs and slowdowns by real extra work in the same kernels, all with the
# plugin's defaults. Split the 4 workloads over calls, e.g.
#   WORKLOADS=gemm,elementwise UNCHANGED=10 SLOWED=6 bash gpu/verdicts.sh
#   WORKLOADS=linear,minillm   UNCHANGED=10 SLOWED=6 bash gpu/verdicts.sh
# SCALES (default 1.10,1.05) picks the slowdowns; --verify's table says what each really costs.
source gpu/setup.sh
mkdir -p $OUT/verdicts
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee $OUT/verdicts/gpu.txt
timeout 560 python3 benchmarks/bench_verdicts.py --device cuda --verify --unchanged ${UNCHANGED:-10} \
  --slowed ${SLOWED:-6} --workloads ${WORKLOADS:-gemm,elementwise,linear,minillm} --scales ${SCALES:-1.10,1.05} \
  --out $OUT/verdicts/observations.jsonl 2>&1 | grep -v USDT | tee $OUT/verdicts/table.txt
