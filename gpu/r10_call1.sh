#!/usr/bin/env bash
# Round 10, device call 1 (about 400 s): the final code's cost and the A/B bench's slowdown with constant memory.
# 1. do_bench_cudagraph and kernel names of bench_ab.py's GEMM as its library now builds it: operands allocated at
#    K 4480 and sliced to K 4096 (unchanged), 4480 (slower) and 3264 (faster), peak memory the same in every case;
# 2. the first perf test's cost beyond its loop, empty and cached pytest cache (bench_test_overhead.py), and a
#    one-test `pytest --gpuperf` process's wall time, three times (gpu/cost.sh part 1, ONE_RUNS=3);
# 3. A/B of one GEMM test, unchanged and +9.4% K (sliced operands), two runs each.
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv | tee $OUT/gpu.txt
timeout 90 python3 - <<'PY' 2>&1 | grep -v USDT | tee $OUT/do_bench.txt
import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench_cudagraph

gen = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(8192, 4480, generator=gen, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4480, 8192, generator=gen, device="cuda", dtype=torch.bfloat16)
base = None
for k in (4096, 4480, 3264, 4096):
    a_k, b_k = a[:, :k], b[:k]
    torch.cuda.reset_peak_memory_stats()
    ms = do_bench_cudagraph(lambda: a_k @ b_k, rep=500, return_mode="median")
    peak = torch.cuda.max_memory_allocated() / 2**20
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        a_k @ b_k
        torch.cuda.synchronize()
    kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
    base = base or ms
    print(f"K={k}: {ms * 1e3:.1f} us, {(ms / base - 1) * 100:+.1f}% vs K=4096 (FLOPs {(k / 4096 - 1) * 100:+.1f}%), "
          f"peak {peak:.0f} MiB, kernels {kernels}")
PY
echo "do_bench $(( $(date +%s) - t0 )) s"
PARTS=1 ONE_RUNS=3 OUT=$OUT timeout 200 bash gpu/cost.sh 2>&1 | tail -n 30
echo "cost $(( $(date +%s) - t0 )) s"
timeout 170 python3 benchmarks/bench_ab.py --device cuda --runs 2 --modes ab --cases unchanged,slower --keep-cache \
  --deadline 120 --out $OUT/ab1.json 2>&1 | grep -v USDT | tee $OUT/ab1.txt | tail -n 10
echo "total $(( $(date +%s) - t0 )) s"
