#!/usr/bin/env bash
# Verdict quality on the GPU: do_bench + kernel-name check of each slowdown, then unchanged runs and slowdowns by
# real extra work in the same kernels (benchmarks/bench_verdicts.py), each run a fresh pytest process. E.g.
#   WORKLOADS=gemm,elementwise UNCHANGED=10 SLOWED=6 bash gpu/verdicts.sh
#   TOL=0.02 SCALES=1.04 WORKLOADS=gemm_fine,attention,conv,elementwise bash gpu/verdicts.sh   # the 2% gate
# SCALES (default 1.10,1.05) picks the slowdowns; TOL sets the tests' marker time_tolerance; VERIFY=0 skips the
# do_bench check; DEADLINE (s) stops starting new runs. The --verify table says what each slowdown really costs.
source gpu/setup.sh
mkdir -p $OUT/verdicts
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee $OUT/verdicts/gpu.txt
verify=--verify
[ "${VERIFY:-1}" = 0 ] && verify=
timeout ${LIMIT:-560} python3 benchmarks/bench_verdicts.py --device cuda $verify --unchanged ${UNCHANGED:-10} \
  --slowed ${SLOWED:-6} --workloads ${WORKLOADS:-gemm,elementwise,linear,minillm} --scales ${SCALES:-1.10,1.05} \
  ${TOL:+--time-tolerance $TOL} --deadline ${DEADLINE:-0} \
  --out $OUT/verdicts/observations.jsonl 2>&1 | grep -v USDT | tee $OUT/verdicts/table.txt
