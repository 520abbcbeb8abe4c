#!/usr/bin/env bash
# Round 8, device call 1 (about 560 s): where an A/B worker's seconds go, and which of a 10-test file's tests need a
# third A/B pair. 1. cProfile of one worker-like process (the 10 GEMM tests of bench_ab's project, the A/B
# worker's flags: --gpuperf-max-time 0.5 --gpuperf-no-confirm, GPUPERF_ROOFS=always, roofs cached) and of the
# stored-path process (1 s budget); 2. bench_ab.py --tests 10 --runs 3 --modes ab,stored (every test's pair ratios,
# messages and every worker's call seconds in $OUT/ab10.json).
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv | tee $OUT/gpu.txt
P=$(mktemp -d)
python3 - "$P" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
import bench_ab
p = Path(sys.argv[1])
(p / "mylib.py").write_text(bench_ab.LIB.format(work=10, k=4096))
(p / "test_perf.py").write_text(bench_ab.TEST.format(tests=10))
PY
cd "$P"
python3 -m pytest -q -p no:randomly --gpuperf-update --gpuperf-backend cuda test_perf.py 2>&1 | tail -n 2
for budget in 0.5 1; do
  GPUPERF_ROOFS=always python3 -m cProfile -o $OUT/worker_$budget.prof -m pytest -q -p no:randomly --gpuperf \
    --gpuperf-backend cuda --gpuperf-max-time $budget --gpuperf-no-confirm test_perf.py --durations=12 2>&1 \
    | grep -v USDT | tail -n 16 | tee $OUT/worker_$budget.txt
done
cd - >/dev/null
echo "profiles $(( $(date +%s) - t0 )) s"
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left python3 benchmarks/bench_ab.py --device cuda --tests 10 --runs 3 --modes ab,stored --cases unchanged \
  --keep-cache --deadline $(( left - 100 )) --out $OUT/ab10.json 2>&1 | grep -v USDT | tee $OUT/ab10.txt | tail -n 12
echo "total $(( $(date +%s) - t0 )) s"
