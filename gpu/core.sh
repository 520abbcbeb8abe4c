#!/usr/bin/env bash
# Foundation on the H200: environment facts, the perf suite smoke run, record + judge the CUDA baselines.
source gpu/setup.sh
mkdir -p $OUT/core
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))"
  which ncu || ls /opt/nvidia/nsight-compute/ 2>&1
  python3 -c "import wgpu; print([a.summary for a in wgpu.gpu.enumerate_adapters_sync()])" 2>&1 | tail -2
} 2>&1 | tee $OUT/core/env.txt
python3 -m pytest perf_tests/test_seed_kernels.py -q -p no:cacheprovider --gpuperf-backend cuda 2>&1 | tail -5 | tee $OUT/core/smoke.txt
python3 -m pytest perf_tests/test_seed_kernels.py -q -p no:cacheprovider --gpuperf --gpuperf-update --gpuperf-backend cuda 2>&1 | grep -v USDT | tee $OUT/core/update.txt | tail -40
python3 -m pytest perf_tests/test_seed_kernels.py -q -p no:cacheprovider --gpuperf --gpuperf-backend cuda 2>&1 | grep -v USDT | tee $OUT/core/judge.txt | tail -40
cp baselines/cuda-*.yaml $OUT/core/ 2>/dev/null
tar czf $OUT/core.tar.gz -C $OUT core && rm -rf $OUT/core
