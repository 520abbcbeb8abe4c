#!/usr/bin/env bash
# Round 10, device call 2 (about 480 s): 0. where a one-test `pytest --gpuperf` process's seconds go (whole-process
# cProfile and -X importtime of three runs after a recording run, and the wall of its parts alone: python, import
# torch, a CUDA context, nvidia-smi); then the final code's A/B of a file of 10 GEMM tests next to its stored-baseline
# run (three runs; goal A/B <= 3x stored), every test of every process logged, and --gpuperf-ncu on five
# parametrized tests of a user's file selected by -k (gpu/ncu_user.sh; goal 5 of 5, <= 5 s per test beyond the plain
# run).
source gpu/setup.sh
mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv | tee $OUT/gpu.txt
P=$(mktemp -d)
cat > "$P/test_one.py" <<'PY'
import torch

def test_gemm(gpuperf):
    gen = torch.Generator(device=gpuperf.device).manual_seed(0)
    a = torch.randn(4096, 4096, generator=gen, device=gpuperf.device, dtype=torch.bfloat16)
    gpuperf.measure(lambda: a @ a, flops=2 * 4096**3)
PY
wall() { local t0; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; python3 -c "import time; print(f'{time.time() - $t0:.2f}')"; }
(cd "$P" && python3 -m pytest -q -p no:randomly --gpuperf-update --gpuperf-backend cuda test_one.py > /dev/null 2>&1)
mkdir -p $OUT/one
for run in 1 2 3; do
  echo "one-test process run $run: plain $(cd "$P" && wall python3 -m pytest -q -p no:randomly --gpuperf --gpuperf-backend cuda test_one.py) s," \
    "under cProfile $(cd "$P" && wall python3 -m cProfile -o $OUT/one/run$run.prof -m pytest -q -p no:randomly --gpuperf --gpuperf-backend cuda test_one.py) s"
done 2>&1 | tee $OUT/one/walls.txt
(cd "$P" && python3 -X importtime -m pytest -q -p no:randomly --gpuperf --gpuperf-backend cuda test_one.py 2> $OUT/one/importtime.txt > $OUT/one/run_importtime.log)
for i in 1 2; do
  echo "python -c pass $(wall python3 -c pass) s; import torch $(wall python3 -c 'import torch') s;" \
    "import torch + CUDA context $(wall python3 -c 'import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()') s;" \
    "pytest --version $(wall python3 -m pytest --version) s; nvidia-smi -L $(wall nvidia-smi -L) s;" \
    "pytest collect-only of the file $(cd "$P" && wall python3 -m pytest -q --co -p no:randomly test_one.py) s"
done 2>&1 | tee -a $OUT/one/walls.txt
(cd $OUT/one && tar czf ../one.tgz . ) && rm -rf $OUT/one "$P"
echo "one $(( $(date +%s) - t0 )) s"
timeout 330 python3 benchmarks/bench_ab.py --device cuda --tests 10 --runs 3 --modes ab,stored --cases unchanged \
  --keep-cache --deadline 190 --log-tests $OUT/logs --out $OUT/ab10.json 2>&1 | grep -v USDT | tee $OUT/ab10.txt \
  | tail -n 12
echo "ab10 $(( $(date +%s) - t0 )) s"
OUT=$OUT timeout 110 bash gpu/ncu_user.sh 2>&1 | tee $OUT/ncu_user.txt | tail -n 20
echo "total $(( $(date +%s) - t0 )) s"
rm -rf $OUT/ncu_user/artifacts $OUT/ncu_user/baselines
python3 - <<'PY'
import json, os, pathlib
out = pathlib.Path(os.environ["OUT"])
with open(out / "logs_all.jsonl", "w") as fh:
    for path in sorted((out / "logs").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            fh.write(json.dumps({"run": path.stem, **json.loads(line)}) + "\n")
PY
rm -rf $OUT/logs
