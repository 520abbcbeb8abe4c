#!/usr/bin/env bash
# On the H200 (issue 39 item 4): the runner that moved. Ten CUDA tests (a 2048^2 bf16 matmul plus a device spin,
# torch.cuda._sleep, which no work counter sees) are recorded, then judged with every spin 1.5x longer (a runner
# 1.5x slower), then with one test's spin 2x longer again (3x its baseline).
# Look for, in $OUT/runner/all.txt: "10 passed" and ONE line "gpuperf: the runner changed (cuda): 10 of 10 timed
# tests ran 1.5.x slower together"; in lone.txt: "9 passed, 1 failed", FAILED ...test_step[9-cuda] with "2.0.x slower
# than this session's common mode", and one runner line "9 of 10 ... still judged: test_runner.py::test_step[9-cuda]".
# The JSON reports (all.json, lone.json) hold gpuperf.runner_changes. About 3-5 minutes.
source gpu/setup.sh
mkdir -p $OUT/runner
proj=$(mktemp -d); cd $proj; git init -q .
cat > test_runner.py <<'PY'
import os

import pytest
import torch

RUNNER = float(os.environ.get("RUNNER", "1"))
LONE = float(os.environ.get("LONE", "1"))
SPIN = 2_000_000  # cycles: about 1 ms at the H200's clocks, far above the matmul


@pytest.mark.parametrize("n", range(10))
def test_step(gpuperf, n):
    x = torch.randn(2048, 2048, device=gpuperf.device, dtype=torch.bfloat16)
    cycles = int(SPIN * RUNNER * (LONE if n == 9 else 1))

    def step():
        torch.cuda._sleep(cycles)
        return x @ x

    gpuperf.measure(step, memory=False)
PY
args="-q -p no:cacheprovider --gpuperf-backend cuda"
timeout 200 python3 -m pytest test_runner.py $args --gpuperf-update 2>&1 | tail -3 | tee $OUT/runner/record.txt
RUNNER=1.5 timeout 200 python3 -m pytest test_runner.py $args --gpuperf -o gpuperf_no_confirm=true \
  --gpuperf-json $OUT/runner/all.json 2>&1 | grep -v "^  " | tail -12 | tee $OUT/runner/all.txt
RUNNER=1.5 LONE=2 timeout 300 python3 -m pytest test_runner.py $args --gpuperf --gpuperf-json $OUT/runner/lone.json \
  2>&1 | grep -E "runner changed|common mode|passed|failed|FAILED" | head -12 | tee $OUT/runner/lone.txt
