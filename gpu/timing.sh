#!/usr/bin/env bash
# Device time on the H200 (issue 14 item 1/2): graph replay, CUPTI kernel sums, eager events, NVML clocks; the
# Linear step in four fresh processes; the CUDA timing tests; the seed Linear test recorded then judged on device time.
source gpu/setup.sh
mkdir -p $OUT/timing
nvidia-smi --query-gpu=name,clocks.sm,clocks_event_reasons.active --format=csv 2>&1 | tee $OUT/timing/nvidia-smi.txt
timeout 100 python3 gpu/timing_check.py 2>&1 | grep -v USDT | tee $OUT/timing/check.txt
for i in 1 2 3 4; do timeout 40 python3 gpu/timing_processes.py $i 2>&1 | grep process | tee -a $OUT/timing/processes.txt; done
timeout 80 python3 -m pytest tests/test_measure_cuda.py tests/test_device_time.py -q -p no:cacheprovider 2>&1 | grep -v USDT | tail -15 | tee $OUT/timing/tests.txt
for mode in --gpuperf-update ""; do
  timeout 40 python3 -m pytest perf_tests/test_seed_kernels.py::test_linear_fp16_forward_backward -q -p no:cacheprovider \
    --gpuperf $mode --gpuperf-backend cuda -o gpuperf_baselines=/tmp/timing-baselines -v 2>&1 | grep -v USDT | tail -20 | tee -a $OUT/timing/seed.txt
done
cp /tmp/timing-baselines/*.yaml $OUT/timing/ 2>/dev/null
