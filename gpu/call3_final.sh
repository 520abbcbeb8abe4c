#!/usr/bin/env bash
# The last device call of the round, in priority order, each part under its own time limit (about 560 s in all):
#   A. the perf suite's CUDA baselines re-recorded with the clock-aware timing, then judged once against them;
#   B. the Vulkan perf suite re-recorded on the NVIDIA driver, judged, and tests/test_vulkan_*.py (carry .gl .whl);
#   C. issue 20's verdicts with the bracket rule: 3 unchanged processes x 4 workloads, +5% GEMM/attention x 3,
#      the seed's Linear with a host sync added (3 runs);
#   D. --gpuperf-ncu on a parametrized user file outside the repo selected by -k (issue 22).
source gpu/setup.sh
mkdir -p $OUT/logs
PT=(python3 -m pytest -p no:randomly -rs)
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee $OUT/logs/gpu.txt
t0=$(date +%s)
timeout 120 "${PT[@]}" --gpuperf --gpuperf-update --gpuperf-backend cuda perf_tests >$OUT/logs/a_record.txt 2>&1
echo "A record rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/logs/a_record.txt
timeout 90 "${PT[@]}" --gpuperf --gpuperf-backend cuda --gpuperf-json $OUT/logs/a_compare.json perf_tests >$OUT/logs/a_compare.txt 2>&1
echo "A compare rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|inconclusive" $OUT/logs/a_compare.txt | tail -4
cp baselines/cuda-*.yaml $OUT/logs/ 2>/dev/null
timeout 110 bash gpu/vulkan.sh >$OUT/logs/b_vulkan.txt 2>&1; echo "B vulkan rc=$? $(( $(date +%s) - t0 )) s"; tail -12 $OUT/logs/b_vulkan.txt
mkdir -p /tmp/vk && tar -xzf $OUT/vulkan.tar.gz -C /tmp/vk 2>/dev/null && cp /tmp/vk/vulkan/vulkan-nvidia*.yaml $OUT/logs/ 2>/dev/null; rm -f $OUT/vulkan.tar.gz
B=(python3 benchmarks/bench_verdicts.py --device cuda)
timeout 110 "${B[@]}" --unchanged 3 --slowed 0 --scales "" --workloads gemm,attention,elementwise,minillm \
  --out $OUT/logs/c_unchanged.jsonl 2>&1 | grep -v USDT | tail -7; echo "C1 $(( $(date +%s) - t0 )) s"
timeout 70 "${B[@]}" --unchanged 0 --slowed 3 --scales 1.05 --workloads gemm,attention \
  --out $OUT/logs/c_slowed.jsonl 2>&1 | grep -v USDT | tail -4; echo "C2 $(( $(date +%s) - t0 )) s"
timeout 60 "${B[@]}" --unchanged 1 --slowed 3 --scales "" --host-sync --workloads linear \
  --out $OUT/logs/c_hostsync.jsonl 2>&1 | grep -v USDT | tail -4; echo "C3 $(( $(date +%s) - t0 )) s"
timeout 80 bash gpu/ncu_user.sh >$OUT/logs/d_ncu.txt 2>&1; echo "D ncu rc=$? $(( $(date +%s) - t0 )) s"; tail -8 $OUT/logs/d_ncu.txt
cp -r $OUT/ncu_user/*.txt $OUT/logs/ 2>/dev/null
tar -czf $OUT/call3.tar.gz -C $OUT logs && rm -rf $OUT/logs $OUT/ncu_user
