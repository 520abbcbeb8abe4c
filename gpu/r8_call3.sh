#!/usr/bin/env bash
# Round 8, device call 3 (about 440 s): the final A/B code on the H200. 1. prewarm() on CUDA (what a gated worker
# pays before its turn; failures listed); 2. the A/B unit tests (a real gated worker on this machine); 3. the A/B of
# a file of 10 GEMM tests next to its stored-baseline run, two or three runs (timelines in $OUT/ab10.json).
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv | tee $OUT/gpu.txt
python3 - <<'PY' 2>&1 | grep -v USDT | tee $OUT/prewarm.txt
import time
import torch
torch.empty(1, device="cuda")
t = time.perf_counter()
from pytest_gpuperf.ab.prewarm import prewarm
failed = prewarm()
print(f"prewarm: {time.perf_counter() - t:.3f} s, failed: {failed}")
PY
timeout 120 python3 -m pytest tests/test_ab_units.py -q -p no:cacheprovider -p no:randomly 2>&1 | grep -v USDT \
  | tail -n 4 | tee $OUT/ab_units.txt
echo "units $(( $(date +%s) - t0 )) s"
timeout 420 python3 benchmarks/bench_ab.py --device cuda --tests 10 --runs 3 --modes ab,stored --cases unchanged \
  --keep-cache --deadline 190 --out $OUT/ab10.json 2>&1 | grep -v USDT | tee $OUT/ab10.txt | tail -n 12
echo "total $(( $(date +%s) - t0 )) s"
