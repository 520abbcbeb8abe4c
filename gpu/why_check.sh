#!/usr/bin/env bash
# On the H200: git bisect run driven by --gpuperf-bisect on a GEMM chain made 2x slower at commit 9 of 16, a CUDA
# step that allocates 1 GiB more failing on peak memory with its allocation site named, and kernel signatures
# (issue 39 item 1): a conv forward+backward switched channels_last -> NCHW and the seed's Linear at width 4504
# instead of 4096 fail naming the kernels that moved; the unchanged run shows the same signature as its baseline.
# PARTS picks the parts (default: all; `PARTS=kernels` alone takes about 3 minutes).
#
# What to look for: $OUT/why/kernels_changed.txt has, for test_conv, a line with "kernels added: ..." (the layout
# transform, e.g. nchwToNhwcKernel) or "kernel switch: ..." and for test_linear "kernel switch: nvjet_..._256x128
# ... -> ..." (both FAILED or inconclusive); kernels_unchanged.txt shows both tests passing with their "kernels" rows
# reading "same kernels as the baseline (signature X)" and kernels_unchanged_json.txt value == baseline for each
# step.kernels; kernels_cost.txt gives the CUPTI probe's first and later cost per call.
source gpu/setup.sh
PARTS=${PARTS:-bisect memory kernels}
mkdir -p $OUT/why
repo=$PWD
if [[ $PARTS == *bisect* ]]; then
  timeout 300 python3 benchmarks/bench_bisect.py --device cuda --commits 16 --bad 9 --factor 2 2>&1 | grep -v USDT \
    | tee $OUT/why/bisect.txt
fi
if [[ $PARTS == *memory* ]]; then
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
  cd $repo
fi
if [[ $PARTS == *kernels* ]]; then
  proj=$(mktemp -d); cp gpu/why_kernels_test.py $proj/test_kernels.py; cd $proj; git init -q .
  args=(-p no:cacheprovider --gpuperf-backend cuda -o gpuperf_processes=1)
  timeout 200 python3 -m pytest test_kernels.py -q "${args[@]}" --gpuperf-update 2>&1 | tail -3 \
    | tee $OUT/why/kernels_record.txt
  grep -A12 "kernels:" baselines/cuda-*.yaml | head -60 > $OUT/why/kernels_baseline.txt
  timeout 200 python3 -m pytest test_kernels.py -v "${args[@]}" --gpuperf --gpuperf-json unchanged.json 2>&1 \
    | grep -E "kernels|passed|failed|PASSED|FAILED" | grep -v USDT | tee $OUT/why/kernels_unchanged.txt
  python3 - unchanged.json <<'PY' | tee $OUT/why/kernels_unchanged_json.txt
import json, sys
for test in json.load(open(sys.argv[1]))["gpuperf"]["tests"]:
    for m in test["metrics"]:
        if m["kind"] == "signature":
            top = [(k["name"][:60], k["calls"], k["share"], k.get("grid")) for k in m["signature"]["kernels"][:4]]
            print(test["nodeid"], m["metric"], "value", m["value"], "baseline", m["baseline"],
                  "same" if m["value"] == m["baseline"] else "DIFFERENT", m["signature"]["launches"], "launches", top)
PY
  CONV_LAYOUT=nchw LINEAR_WIDTH=4504 timeout 200 python3 -m pytest test_kernels.py -q "${args[@]}" --gpuperf \
    -W default 2>&1 | grep -E "kernel|passed|failed" | grep -v USDT | cut -c1-1500 | tee $OUT/why/kernels_changed.txt
  timeout 120 python3 - <<'PY' 2>&1 | grep -v USDT | tee $OUT/why/kernels_cost.txt
import time, torch
from pytest_gpuperf.backends.cuda import CudaBackend
layer = torch.nn.Linear(4096, 4096).cuda().half()
x = torch.randn(1024, 4096, device="cuda", dtype=torch.half, requires_grad=True)
def step():
    layer(x).sum().backward()
step(); torch.cuda.synchronize()
backend = CudaBackend()
for i in range(4):
    start = time.perf_counter(); sig = backend.kernel_signature(step); took = time.perf_counter() - start
    print(f"signature call {i}: {took * 1e3:.1f} ms, digest {sig.digest if sig else None}, "
          f"{len(sig.rows) if sig else 0} kernels, top {sig.rows[0] if sig else None}")
start = time.perf_counter(); step(); torch.cuda.synchronize(); print(f"plain step: {(time.perf_counter() - start) * 1e3:.2f} ms")
PY
  cd $repo
fi
