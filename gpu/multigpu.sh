#!/usr/bin/env bash
# Issue 8 on 2 H200s (kind nvidia-h200-x2): FSDP2 perf tests at world size 2 over NCCL through the rank pool,
# NCCL faults at world size 2, and the rank pool's start-up benchmark. Run from the repo root after
# `source gpu/setup.sh`; results in $OUT/multigpu.tar.gz (logs + baselines/*ws2*.yaml); whole run < 5 min.
#  a. nvidia-smi, torch.cuda.device_count(): stops unless there are >= 2 GPUs
#  b. perf_tests/test_fsdp2.py --gpuperf --gpuperf-update (records baselines/*-ws2.yaml), then --gpuperf (judged)
#  c. faults on 2 NCCL ranks: env/one-GPU-per-rank check, raise on rank 1, hung all_reduce, OOM on rank 1
#  d. benchmarks/bench_rank_pool.py --device cuda --world-size 2 (NCCL), then the CPU (gloo) one on this machine
# Look for: b "4 passed" twice with test ids ending [cuda], "ws2.yaml", rank0/rank1 param memory "0.500 of the
# model"; c "4 passed, 3 failed", "rank 1 of 2 raised", "rank(s) 1 of 2 did not finish within 5 s" + "in
# test_c_hangs", "rank 1 of 2 ran out of memory" + "peak allocated", "7 test(s) on 4 rank-pool start(s) (3 rebuilt
# after a fault)", "orphans: 0"; d the markdown rows printed under "markdown rows".
# Dry run on a CPU box: MULTIGPU_BACKEND=cpu BENCH_TESTS=2 bash gpu/multigpu.sh (gloo; baselines go to a temp dir).
set -u
OUT=${OUT:-/tmp/gpuperf-out}
BACKEND=${MULTIGPU_BACKEND:-cuda}
WORLD=${MULTIGPU_WORLD:-2}
BENCH_TESTS=${BENCH_TESTS:-6}
BUDGET=${MULTIGPU_BUDGET:-285} # seconds for the whole script; each step gets at most what is left
WORK=$(mktemp -d)
LOG=$WORK/multigpu
mkdir -p "$LOG" "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export GPUPERF_TEST_TAG="gpuperf-gpu-multigpu-$$" MULTIGPU_BACKEND=$BACKEND MULTIGPU_WORLD=$WORLD
if [ "$BACKEND" = cuda ]; then BASELINES=baselines; else BASELINES=$WORK/baselines; fi
COMMON=(-p no:cacheprovider -p no:randomly -rA --gpuperf-backend "$BACKEND" -o gpuperf_max_time=1
  -o gpuperf_baselines="$BASELINES" -o gpuperf_dist_timeout=90)

left() { # seconds for the next step: its cap, or what is left of the budget (at least 5)
  local rest=$((BUDGET - SECONDS))
  [ "$rest" -lt "$1" ] && echo $((rest > 5 ? rest : 5)) || echo "$1"
}
step() { # step NAME CAP COMMAND...: run with a timeout, log to $LOG/NAME.txt, append rc and seconds
  local name=$1 cap limit started=$SECONDS
  cap=$2
  shift 2
  limit=$(left "$cap")
  echo "== $name (limit ${limit} s, ${SECONDS} s elapsed)"
  timeout -k 5 "$limit" "$@" > "$LOG/$name.txt" 2>&1
  echo "rc=$? seconds=$((SECONDS - started)) limit=$limit" >> "$LOG/$name.txt"
}

echo "== a. GPUs"
{
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>&1
  nvidia-smi topo -m 2>&1
  env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)='
} > "$LOG/a_gpus.txt" 2>&1
GPUS=$(python -c "import torch; print(torch.cuda.device_count())" 2>>"$LOG/a_gpus.txt")
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())" \
  >> "$LOG/a_gpus.txt" 2>&1
echo "backend=$BACKEND world=$WORLD gpus=${GPUS:-?}" | tee -a "$LOG/a_gpus.txt"
if [ "$BACKEND" = cuda ] && [ "${GPUS:-0}" -lt "$WORLD" ]; then
  echo "ABORT: gpu/multigpu.sh needs $WORLD CUDA GPUs (one per rank), torch.cuda.device_count() says ${GPUS:-0};" \
    "run it on kind nvidia-h200-x2 (or MULTIGPU_BACKEND=cpu for a gloo dry run)" | tee -a "$LOG/a_gpus.txt"
  tar -czf "$OUT/multigpu.tar.gz" -C "$WORK" multigpu
  exit 2
fi

echo "== b. FSDP2 perf tests at world size $WORLD"
step b1_update 90 python -m pytest perf_tests/test_fsdp2.py "${COMMON[@]}" --gpuperf --gpuperf-update
step b2_judge 70 python -m pytest perf_tests/test_fsdp2.py "${COMMON[@]}" --gpuperf
python - "$BASELINES" "$WORLD" > "$LOG/b3_numbers.txt" 2>&1 <<'PY'
"""Per-rank peak memory, tokens/s and parameter shards from the recorded ws<N> baselines."""
import sys
from pathlib import Path

import torch
import yaml

from perf_tests.models import CPU_CONFIG, GPU_TEST_CONFIG, MiniLLM

directory, world = Path(sys.argv[1]), int(sys.argv[2])
with torch.device("meta"):
    sizes = {"cpu": CPU_CONFIG, "cuda": GPU_TEST_CONFIG}
    full = {k: sum(p.numel() * 4 for p in MiniLLM(c).parameters()) for k, c in sizes.items()}
files = sorted(directory.glob(f"*ws{world}.yaml"))
print("baseline files:", *[f.name for f in files] or ["(none)"])
for path in files:
    for test, metrics in (yaml.safe_load(path.read_text()).get("tests") or {}).items():
        backend = "cuda" if test.endswith("[cuda]") else "cpu"
        print(test.split("::")[-1])
        for name, entry in sorted(metrics.items()):
            value = entry.get("value") if isinstance(entry, dict) else entry
            if not isinstance(value, (int, float)):
                continue
            if name.endswith("peak_memory") or name.endswith("param_memory"):
                note = f" = {value / full[backend]:.3f} of the model's fp32 parameters" if "param" in name else ""
                print(f"    {name}: {value / 2**20:.1f} MiB{note}")
            elif "tokens_per_s" in name or name.endswith("throughput") or name.endswith("imbalance"):
                print(f"    {name}: {value:,.1f}")
PY

echo "== c. faults on $WORLD ranks"
FAULTS=$WORK/faults
mkdir -p "$FAULTS"
cat > "$FAULTS/test_multigpu_faults.py" <<'PY'
"""Faults at world size 2 (NCCL on CUDA): each fails one test; the next passes on a rebuilt pool."""

import os
import time

import pytest
import torch
import torch.distributed as dist

BACKEND = os.environ.get("MULTIGPU_BACKEND", "cuda")
WORLD = int(os.environ.get("MULTIGPU_WORLD", "2"))
RANKS = pytest.mark.gpuperf_distributed(world_size=WORLD, backend=BACKEND)
SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@RANKS
def test_0_env_and_one_gpu_per_rank(gpuperf_rank):
    assert {k: os.environ.get(k) for k in SAFE} == SAFE, "NVLS settings did not reach the rank process"
    assert dist.get_backend() == ("nccl" if BACKEND == "cuda" else "gloo")
    if BACKEND == "cuda":
        assert torch.cuda.current_device() == gpuperf_rank.local_rank
        uuids = [None] * WORLD
        dist.all_gather_object(uuids, str(torch.cuda.get_device_properties(gpuperf_rank.device).uuid))
        assert len(set(uuids)) == WORLD, f"ranks share a GPU: {uuids}"
        print(f"rank {gpuperf_rank.rank}: GPU {uuids[gpuperf_rank.rank]}")


@RANKS
def test_a_raises_on_rank1(gpuperf_rank):
    if gpuperf_rank.rank == 1:
        raise ValueError(f"boom on rank 1 ({gpuperf_rank.device})")
    dist.barrier()  # rank 0 waits for a rank that never comes


@RANKS
def test_b_after_raise(gpuperf_rank):
    t = torch.ones(4, device=gpuperf_rank.device)
    dist.all_reduce(t)
    assert t.sum().item() == 4 * WORLD


@pytest.mark.gpuperf_distributed(world_size=WORLD, backend=BACKEND, timeout=5)
def test_c_hangs_in_all_reduce(gpuperf_rank):
    if gpuperf_rank.rank == 1:  # rank 0 skips the all_reduce that rank 1 enters
        t = torch.ones(1, device=gpuperf_rank.device)
        dist.all_reduce(t)
        t.item()  # NCCL is asynchronous: wait for it on the host


@RANKS
def test_d_after_hang(gpuperf_rank):
    dist.barrier()
    t = torch.full((2,), float(gpuperf_rank.rank + 1), device=gpuperf_rank.device)
    dist.all_reduce(t)
    assert t[0].item() == WORLD * (WORLD + 1) / 2


@RANKS
def test_e_oom_on_rank1(gpuperf_rank):
    if gpuperf_rank.rank == 1:
        keep = torch.randn(1 << 28, device=gpuperf_rank.device) if BACKEND == "cuda" else None  # 1 GiB live
        torch.empty(1 << 50, dtype=torch.uint8, device=gpuperf_rank.device)  # 1 PiB: refused
        del keep


@RANKS
def test_f_after_oom(gpuperf_rank):
    dist.barrier()
    time.sleep(0.1)
PY
(cd "$FAULTS" && step c_faults 75 python -m pytest test_multigpu_faults.py -p no:cacheprovider -p no:randomly -rA)
sleep 1
python gpu/count_orphans.py > "$LOG/c_orphans.txt"

echo "== d. rank pool benchmark ($BENCH_TESTS tests)"
if [ "$BACKEND" = cuda ]; then
  step d1_bench_cuda 100 python benchmarks/bench_rank_pool.py --device cuda --world-size "$WORLD" --tests "$BENCH_TESTS"
fi
step d2_bench_cpu 60 python benchmarks/bench_rank_pool.py --device cpu --world-size "$WORLD" --tests "$BENCH_TESTS"

cp "$BASELINES"/*ws"$WORLD".yaml "$LOG/" 2>/dev/null
tar -czf "$OUT/multigpu.tar.gz" -C "$WORK" multigpu

echo "== summary (${SECONDS} s)"
for f in b1_update b2_judge c_faults d1_bench_cuda d2_bench_cpu; do
  [ -f "$LOG/$f.txt" ] || continue
  echo "$f: $(grep -E '^=+ .*[0-9]+ (passed|failed)' "$LOG/$f.txt" | tail -1) $(tail -1 "$LOG/$f.txt")"
done
grep -hE "rank-pool start|FAILED" "$LOG/b1_update.txt" "$LOG/b2_judge.txt" | head -8
cat "$LOG/b3_numbers.txt"
grep -hE "rank 1 of $WORLD raised|did not finish within|ran out of memory|peak allocated|peak RSS|in test_c_hangs|rank-pool start|: GPU " \
  "$LOG/c_faults.txt" | sort | uniq -c | head -14
cat "$LOG/c_orphans.txt"
for f in d1_bench_cuda d2_bench_cpu; do
  [ -f "$LOG/$f.txt" ] && grep -hE "FSDP2 tests|speed-up|marginal|^\|" "$LOG/$f.txt"
done
ls "$LOG"/*.yaml 2>/dev/null
