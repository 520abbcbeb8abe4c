#!/usr/bin/env bash
# A/B against a git ref on one H200 (issue 15), about 9 minutes:
#  1. triton.testing.do_bench checks the changed GEMMs' real cost: bf16 8192 x K x 8192, K 4096 (base),
#     4480 (+9.4% of K in whole 64-wide K tiles; 4512 is a partial tile) and 3264 (-20%);
#  2. benchmarks/bench_ab.py --device cuda: a scratch git repository whose perf test calls mylib.gemm; per run
#     and case (unchanged, slower = K 4480, faster = K 3264) one `pytest --gpuperf --gpuperf-ab HEAD` (no baseline
#     file; 2-4 worker processes per side), with the cost per test of both sides' workers. RUNS (default 4) runs
#     per case, cases interleaved, no new run after 400 s. MODES=ab,stored adds stored-baseline runs next to them;
#     CASES=unchanged,slower spends a second call on the two cases the gate must get right.
# Results: $OUT/ab/ (log, observations JSON, do_bench table).
source gpu/setup.sh
OUT=${OUT:-/tmp/out}
RUNS=${RUNS:-4}
MODES=${MODES:-ab}
CASES=${CASES:-unchanged,slower,faster}
mkdir -p $OUT/ab
nvidia-smi --query-gpu=name,clocks.sm,clocks_event_reasons.active,temperature.gpu --format=csv 2>&1 | tee $OUT/ab/nvidia-smi.txt
timeout 60 python3 - <<'PY' 2>&1 | grep -v USDT | tee $OUT/ab/do_bench.txt
import torch
from triton.testing import do_bench

def gemm_ms(k):
    a = torch.randn(8192, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, 8192, device="cuda", dtype=torch.bfloat16)
    return do_bench(lambda: a @ b, warmup=100, rep=500, return_mode="median")

base = gemm_ms(4096)
print(f"do_bench bf16 8192xKx8192 K=4096: {base * 1e3:.1f} us")
for k in (4480, 3264):
    ms = gemm_ms(k)
    print(f"do_bench K={k}: {ms * 1e3:.1f} us, {(ms / base - 1) * 100:+.1f}% vs K=4096 (FLOPs {(k / 4096 - 1) * 100:+.1f}%)")
PY
timeout 540 python3 benchmarks/bench_ab.py --device cuda --runs $RUNS --modes $MODES --cases $CASES --deadline ${DEADLINE:-400} \
  --out $OUT/ab/observations.json \
  2>&1 | grep -v USDT | tee $OUT/ab/bench_ab.log | tail -n 12
