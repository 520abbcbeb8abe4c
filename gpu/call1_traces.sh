#!/usr/bin/env bash
# Issue 20, first device call: clock/power traces per workload class in fresh processes, the slowdowns' real size
# (do_bench_cudagraph + kernel names + peak memory), and where a first perf test's seconds go (cProfile, old code).
source gpu/setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit,clocks_event_reasons.active --format=csv | tee $OUT/gpu.txt
timeout 330 python3 gpu/clock_traces.py --out $OUT/traces.jsonl --processes ${PROCS:-4} --seconds 3.5 --gap 2 2>&1 | tee $OUT/traces.txt
timeout 120 python3 benchmarks/bench_verdicts.py --device cuda --verify --verify-only --workloads gemm,attention \
  --scales 1.05,1.10 2>&1 | grep -v USDT | tee $OUT/verify.txt
# first-test cost at the old code: one GEMM perf test, cProfile of the whole pytest process
P=/tmp/firsttest; mkdir -p $P; cat > $P/test_first.py <<'PY'
import torch
def test_gemm(gpuperf):
    a = torch.randn(4096, 4096, device=gpuperf.device, dtype=torch.bfloat16)
    gpuperf.measure(lambda: a @ a, flops=2 * 4096**3)
PY
(cd $P && python3 -m pytest -q --gpuperf-update --gpuperf-backend cuda test_first.py >/dev/null 2>&1)
(cd $P && rm -rf .pytest_cache && /usr/bin/time -f "wall %e s (empty cache)" python3 -m cProfile -o $OUT/first_empty.prof -m pytest -q --gpuperf --gpuperf-backend cuda test_first.py 2>&1 | tail -3)
(cd $P && /usr/bin/time -f "wall %e s (cached roofs)" python3 -m cProfile -o $OUT/first_cached.prof -m pytest -q --gpuperf --gpuperf-backend cuda test_first.py 2>&1 | tail -3)
python3 - <<'PY'
import pstats, os
for f in ("first_empty.prof", "first_cached.prof"):
    print("=====", f)
    st = pstats.Stats(os.path.join(os.environ["OUT"], f)); st.sort_stats("cumulative").print_stats(45)
PY
