#!/usr/bin/env bash
# Round 9, device call 3 (about 470 s): call 2 without its stricter power rule (which tripled the power warm-up): only the
# GPU ramp left to it. 1. the 10-test A/B next to its stored run, three runs, every test of every process logged;
# 2. one-test A/B of the +9.9% GEMM (must fail); 3. stored-baseline verdicts of the GEMM, unchanged and +10%;
# 4. the CUDA timing unit tests. AB1_RUNS, VERDICT_RUNS and VERDICT_DEADLINE size parts 2 and 3 (gpu/r9_call2.sh).
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv | tee $OUT/gpu.txt
timeout 400 python3 benchmarks/bench_ab.py --device cuda --tests 10 --runs 3 --modes ab,stored --cases unchanged \
  --keep-cache --deadline 190 --log-tests $OUT/logs --out $OUT/ab10.json 2>&1 | grep -v USDT | tee $OUT/ab10.txt \
  | tail -n 12
echo "ab10 $(( $(date +%s) - t0 )) s"
timeout 75 python3 benchmarks/bench_ab.py --device cuda --runs ${AB1_RUNS:-1} --modes ab --cases slower --keep-cache \
  --deadline 30 --out $OUT/ab1.json 2>&1 | grep -v USDT | tee $OUT/ab1.txt | tail -n 8
echo "ab1 $(( $(date +%s) - t0 )) s"
timeout 120 python3 benchmarks/bench_verdicts.py --device cuda --unchanged ${VERDICT_RUNS:-1} --slowed ${VERDICT_RUNS:-1} --scales 1.10 \
  --workloads gemm --deadline ${VERDICT_DEADLINE:-40} --out $OUT/verdicts.jsonl 2>&1 | grep -v USDT | tee $OUT/verdicts.txt | tail -n 12
echo "verdicts $(( $(date +%s) - t0 )) s"
timeout 60 python3 -m pytest tests/test_measure_cuda.py tests/test_device_time.py tests/test_clock_rule.py -q \
  -p no:cacheprovider -p no:randomly 2>&1 | grep -v USDT | tail -n 4 | tee $OUT/units.txt
echo "total $(( $(date +%s) - t0 )) s"
python3 - <<'PY'
import json, os, pathlib
out = pathlib.Path(os.environ["OUT"])
with open(out / "logs_all.jsonl", "w") as fh:
    for path in sorted((out / "logs").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            fh.write(json.dumps({"run": path.stem, **json.loads(line)}) + "\n")
PY
rm -rf $OUT/logs
