#!/usr/bin/env bash
# Distributed feature on one H200 (NCCL, world size 1). Run from the repo root; results in $OUT/distributed.tar.gz.
#  1. FSDP2 perf tests (perf_tests/test_fsdp2.py) on CUDA with --gpuperf --gpuperf-update: records baselines/*-ws1.yaml
#  2. the same tests again with --gpuperf: judged against what step 1 recorded (should pass)
#  3. injected faults on NCCL ranks (raise, hang, OOM, os._exit after a print), each followed by a test that must
#     pass on a rebuilt pool
#  4. replicate: a CUDA perf test measured again in 3 fresh worker processes (run_in_fresh_processes), one table row
#     per process (pid, device time, method)
# Look for: "3 passed" / "4 passed" in steps 1-2 (test ids end in [cuda]); in step 3 "4 failed, 4 passed",
# "rank 0 of 1 raised", "did not finish within 5 s" with a stack naming test_c_hangs, "ran out of memory" with
# "peak allocated", "last words on cuda"; in step 4 three "ok" rows with three distinct pids other than pytest's;
# and "orphans: 0" at the end.
set -u
source gpu/setup.sh
OUT=${OUT:-/tmp/gpuperf-out}
WORK=$(mktemp -d)
LOG=$WORK/distributed
mkdir -p "$LOG" "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GPUPERF_TEST_TAG="gpuperf-gpu-distributed-$$"
COMMON=(-p no:cacheprovider -p no:randomly -rA --gpuperf-backend cuda -o gpuperf_max_time=1)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$LOG/gpu.txt" 2>&1
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())" \
  >> "$LOG/gpu.txt" 2>&1

echo "== 1. record baselines (world size 1, NCCL)"
timeout 150 python -m pytest perf_tests/test_fsdp2.py "${COMMON[@]}" --gpuperf --gpuperf-update > "$LOG/1_update.txt" 2>&1
echo "rc=$?" >> "$LOG/1_update.txt"

echo "== 2. judge against them"
timeout 120 python -m pytest perf_tests/test_fsdp2.py "${COMMON[@]}" --gpuperf > "$LOG/2_judge.txt" 2>&1
echo "rc=$?" >> "$LOG/2_judge.txt"

echo "== 3. faults on NCCL"
FAULTS=$WORK/faults
mkdir -p "$FAULTS"
cat > "$FAULTS/test_nccl_faults.py" <<'PY'
import time

import pytest
import torch
import torch.distributed as dist

ONE = pytest.mark.gpuperf_distributed(world_size=1, backend="cuda")


@ONE
def test_a_raises(gpuperf_rank):
    raise ValueError(f"boom on {gpuperf_rank.device}")


@ONE
def test_b_after_raise(gpuperf_rank):
    t = torch.ones(4, device=gpuperf_rank.device)
    dist.all_reduce(t)
    assert dist.get_backend() == "nccl" and t.sum().item() == 4


@pytest.mark.gpuperf_distributed(world_size=1, backend="cuda", timeout=5)
def test_c_hangs(gpuperf_rank):
    time.sleep(3600)


@ONE
def test_d_after_hang(gpuperf_rank):
    dist.barrier()


@ONE
def test_e_oom(gpuperf_rank):
    keep = torch.randn(1 << 28, device=gpuperf_rank.device)  # 1 GiB live, then ask for 1 PiB
    torch.empty(1 << 50, dtype=torch.uint8, device=gpuperf_rank.device)
    del keep


@ONE
def test_f_after_oom(gpuperf_rank):
    dist.barrier()


@ONE
def test_g_exits_hard(gpuperf_rank):
    print(f"last words on {gpuperf_rank.device}")
    import os
    os._exit(3)


@ONE
def test_h_after_exit(gpuperf_rank):
    dist.barrier()
PY
(cd "$FAULTS" && timeout 150 python -m pytest test_nccl_faults.py -p no:cacheprovider -p no:randomly > "$LOG/3_faults.txt" 2>&1
 echo "rc=$?" >> "$LOG/3_faults.txt")

echo "== 4. replicate a CUDA perf test in 3 fresh processes"
REP=$WORK/replicate
mkdir -p "$REP"
cat > "$REP/conftest.py" <<'PY'
import os

import pytest

from pytest_gpuperf.distributed.replicate import run_in_fresh_processes


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield
    runs = run_in_fresh_processes(item, processes=3, timeout=300)
    with open("replicas.txt", "a") as out:
        out.write(f"pytest pid {os.getpid()}: {item.name}\n")
        for run in runs:
            metrics = run.by_name()
            time = metrics.get("gemm.time")
            value = f"{time.value * 1e6:9.1f} us {time.extra.get('method')}" if time else run.error[-300:]
            out.write(f"  pid {run.pid:>7} {run.status:>5} {run.seconds:6.1f} s  {value}\n")
PY
cat > "$REP/test_replicate_cuda.py" <<'PY'
import torch


def test_gemm(gpuperf):
    a = torch.randn(4096, 4096, device=gpuperf.device, dtype=torch.bfloat16)
    gpuperf.measure(lambda: a @ a, name="gemm", flops=2 * 4096**3)
PY
(cd "$REP" && timeout 400 python -m pytest test_replicate_cuda.py -p no:cacheprovider -p no:randomly --gpuperf \
   --gpuperf-backend cuda -o gpuperf_max_time=1 > "$LOG/4_replicate.txt" 2>&1
 echo "rc=$?" >> "$LOG/4_replicate.txt"; cat replicas.txt >> "$LOG/4_replicate.txt" 2>/dev/null)

sleep 1
python gpu/count_orphans.py > "$LOG/orphans.txt"

cp baselines/*.yaml "$LOG/" 2>/dev/null
tar -czf "$OUT/distributed.tar.gz" -C "$WORK" distributed

echo "== summary"
for f in 1_update 2_judge 3_faults 4_replicate; do echo "$f: $(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$LOG/$f.txt" | tail -1) $(tail -1 "$LOG/$f.txt")"; done
grep -hE "rank-pool start|Peak|ws1.yaml" "$LOG/1_update.txt" | head -5
grep -hE "rank 0 of 1 raised|did not finish within|ran out of memory|peak allocated|in test_c_hangs|last words on" "$LOG/3_faults.txt" | head -10
grep -hE "pytest pid|  pid " "$LOG/4_replicate.txt"
cat "$LOG/orphans.txt"
ls "$LOG"/*.yaml 2>/dev/null
