#!/usr/bin/env bash
# The plugin's own cost on the H200 (issue 22 items 1-3), one device call of about 9 minutes:
#  1. first perf test beyond its loop, empty and cached pytest cache, with per-span seconds and cProfile files
#     (benchmarks/bench_test_overhead.py --device cuda; goals 3 s / 1.5 s, a one-test process <= 10 s wall);
#  2. A/B of one GEMM test against HEAD, unchanged tree, RUNS1 runs (goal <= 45 s wall each);
#  3. A/B of a file of 10 GEMM tests next to the stored-baseline run of the same file (goal A/B <= 3x stored);
#  4. --gpuperf-ncu on five parametrized tests of a user file outside the repo, selected by -k (gpu/ncu_user.sh;
#     goal 5 of 5 captured and classified, <= 5 s per test beyond the plain run).
# Results in $OUT/cost.tgz (logs, observations, .prof files; the tables on stdout). Usage, from the repo root: bash gpu/cost.sh
set -u
source gpu/setup.sh
OUT=${OUT:-/tmp/out}
C="$OUT/cost"
RUNS1=${RUNS1:-2}
PARTS=${PARTS:-1234}  # which of the four parts to run (PARTS=14: the first test's cost and ncu, no A/B; PARTS=5:
                      # only the one-test process of part 1, ONE_RUNS times)
part() { [[ $PARTS == *$1* ]]; }
mkdir -p "$C"
unset KINETO_LOG_LEVEL
part 1 && echo "== 1. first test's overhead"
part 1 && timeout 150 python3 benchmarks/bench_test_overhead.py --device cuda --repeats 2 --profile "$C" 2>&1 | grep -v USDT \
  | tee "$C/overhead.txt"
one() {  # a one-test pytest --gpuperf process, wall time
  local P; P=$(mktemp -d)
  cat > "$P/test_one.py" <<'PY'
import torch

def test_gemm(gpuperf):
    gen = torch.Generator(device=gpuperf.device).manual_seed(0)
    a = torch.randn(4096, 4096, generator=gen, device=gpuperf.device, dtype=torch.bfloat16)
    gpuperf.measure(lambda: a @ a, flops=2 * 4096**3)
PY
  (cd "$P" && python3 -m pytest -q -p no:randomly --gpuperf-update --gpuperf-backend cuda test_one.py >/dev/null 2>&1)
  local t0 run
  for run in $(seq "${ONE_RUNS:-1}"); do
    t0=$(date +%s.%N)
    (cd "$P" && python3 -m pytest -q -p no:randomly --gpuperf --gpuperf-backend cuda test_one.py > "$C/one_test.log" 2>&1)
    echo "one-test pytest --gpuperf process (roofs cached by the recording run): $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s wall (goal <= 10 s), $(tail -n 1 "$C/one_test.log")"
  done
  rm -rf "$P"
}
(part 1 || part 5) && one | tee -a "$C/overhead.txt"
part 2 && echo "== 2. A/B of one test"
part 2 && timeout 200 python3 benchmarks/bench_ab.py --device cuda --runs "$RUNS1" --modes ab --cases unchanged --deadline 120 \
  --out "$C/ab1.json" 2>&1 | grep -v USDT | tee "$C/ab1.log" | tail -n 8
part 3 && echo "== 3. A/B of a file of 10 tests vs its stored-baseline run"
part 3 && timeout 240 python3 benchmarks/bench_ab.py --device cuda --tests 10 --runs 1 --modes ab,stored --cases unchanged --keep-cache \
  --out "$C/ab10.json" 2>&1 | grep -v USDT | tee "$C/ab10.log" | tail -n 8
part 4 && echo "== 4. ncu on a user's file"
part 4 && OUT="$C" timeout 110 bash gpu/ncu_user.sh 2>&1 | tee "$C/ncu_user.txt" | tail -n 20
# $OUT brings back at most 8 files: everything in one archive (the tables above are on stdout)
rm -rf "$C/ncu_user/artifacts" "$C/ncu_user/baselines"
tar czf "$OUT/cost.tgz" -C "$OUT" cost && rm -rf "$C"
