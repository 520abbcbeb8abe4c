#!/usr/bin/env bash
# On the H200: git bisect run driven by --gpuperf-bisect on a GEMM chain made 2x slower at commit 9 of 16, and a
# CUDA step that allocates 1 GiB more failing on peak memory with its allocation site named.
source gpu/setup.sh
mkdir -p $OUT/why
timeout 300 python3 benchmarks/bench_bisect.py --device cuda --commits 16 --bad 9 --factor 2 2>&1 | grep -v USDT \
  | tee $OUT/why/bisect.txt
proj=$(mktemp -d); cd $proj; git init -q .
cat > test_mem.py <<'PY'
import os
import torch

EXTRA_GIB = int(os.environ.get("EXTRA_GIB", "0"))


def test_alloc(gpuperf):
    x = torch.randn(4096, 4096, device=gpuperf.device)

    def step():
        scratch = torch.empty(EXTRA_GIB * 2**28, device=gpuperf.device)
        return (x @ x).sum() + scratch.numel()

    gpuperf.measure(step)
PY
timeout 120 python3 -m pytest test_mem.py -q -p no:cacheprovider --gpuperf-update --gpuperf-backend cuda 2>&1 | tail -2
EXTRA_GIB=1 timeout 120 python3 -m pytest test_mem.py -q -p no:cacheprovider --gpuperf --gpuperf-backend cuda 2>&1 \
  | grep -E "peak memory|passed|failed" | head -6 | tee $OUT/why/memory.txt
