#!/usr/bin/env bash
# Issue 20, host syncs on the H200 (fits a ~100 s call): the synchronizing operations of one CUDA step are counted
# (`<step>.host_syncs`), a step that gained an `.item()` fails on that count, the unchanged step passes.
# Writes $OUT/host_syncs.txt.
set -u
source gpu/setup.sh
out=${OUT:-/tmp}/host_syncs.txt
{
python3 - <<'PY'
import torch
from pytest_gpuperf.backends import get_backend
cuda = get_backend("cuda")
w = torch.randn(1024, 1024, device="cuda")
x = torch.randn(1024, 1024, device="cuda")
steps = {"mm": lambda: x @ w, "mm+item": lambda: (x @ w).sum().item(), "mm+cpu": lambda: (x @ w)[0].cpu(),
         "mm+nonzero": lambda: torch.nonzero(x @ w > 0)}
for name, step in steps.items():
    print(f"count_host_syncs[{name}] = {cuda.count_host_syncs(step)}")
PY
proj=$(mktemp -d)
cat > "$proj/test_sync.py" <<'PY'
import os
import torch

def test_linear(gpuperf):
    layer = torch.nn.Linear(1024, 1024, device=gpuperf.device)
    x = torch.randn(256, 1024, device=gpuperf.device)

    def step():
        y = layer(x)
        if os.environ.get("SYNC") == "1":
            float(y[0, 0])  # one device-to-host read per step: the regression
        return y

    with torch.no_grad():
        gpuperf.measure(step)
PY
cd "$proj"
args="--gpuperf --gpuperf-backend cuda -o gpuperf_processes=1 -o gpuperf_max_time=0.3 -p no:randomly -p no:cacheprovider -rA"
echo "== record"; SYNC=0 python3 -m pytest $args --gpuperf-update 2>&1 | tail -4
grep -A2 "host_syncs" baselines/*.yaml | head -6
echo "== with one .item() per step (expect failed on host_syncs)"; SYNC=1 python3 -m pytest $args 2>&1 | grep -E "host_sync|FAILED|passed|failed" | head -8
echo "== unchanged (expect passed)"; SYNC=0 python3 -m pytest $args 2>&1 | grep -E "host_sync|FAILED|passed|failed" | head -6
} > "$out" 2>&1
cat "$out"
