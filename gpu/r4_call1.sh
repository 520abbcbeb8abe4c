#!/usr/bin/env bash
# Round 4, device call 1 (about 540 s): issue 20's verdicts under the bracket rule with declared (unslowed) work.
#   a. the CUDA unit tests (smoke: the code changed since the last H200 run);
#   b. do_bench_cudagraph + kernel names of the GEMM and attention at the slowdown scales;
#   c. the seed's Linear: 1 unchanged run + 3 runs with a host sync added (judged on step.host_syncs);
#   d. 10 unchanged fresh processes x {GEMM, attention, elementwise, MiniLLM}.
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee $OUT/gpu.txt
B=(python3 benchmarks/bench_verdicts.py --device cuda)
timeout 80 python3 -m pytest -q -p no:randomly -p no:cacheprovider tests/test_measure_cuda.py tests/test_device_time.py \
  2>&1 | tail -6 | tee $OUT/a_smoke.txt; echo "a $(( $(date +%s) - t0 )) s"
timeout 70 "${B[@]}" --verify-only --workloads gemm,attention --scales 1.05,1.10 2>&1 | grep -v USDT | tee $OUT/b_verify.txt
echo "b $(( $(date +%s) - t0 )) s"
timeout 80 "${B[@]}" --unchanged 1 --slowed 3 --scales "" --host-sync --workloads linear --deadline 60 \
  --out $OUT/c_hostsync.jsonl 2>&1 | grep -v USDT | tee $OUT/c_hostsync.txt; echo "c $(( $(date +%s) - t0 )) s"
left=$(( 540 - ($(date +%s) - t0) ))
timeout $left "${B[@]}" --unchanged 10 --slowed 0 --scales "" --workloads gemm,attention,elementwise,minillm \
  --deadline $(( left - 45 )) --out $OUT/d_unchanged.jsonl 2>&1 | grep -v USDT | tee $OUT/d_unchanged.txt
echo "d $(( $(date +%s) - t0 )) s"
