#!/usr/bin/env bash
# Reviewable baselines on the H200 (issue 11 item 6): the CUDA perf suite recorded into a copy of baselines/, then
# re-recorded twice on the same unchanged code. Each re-record's diff against the previous file is what a PR would
# show: 0 lines when every metric stayed within its tolerance. Also the load time of the recorded file.
source gpu/setup.sh
mkdir -p $OUT/baselines /tmp/gpu-baselines
cp baselines/cuda-*.yaml /tmp/gpu-baselines/ 2>/dev/null
run() {
  timeout 170 python3 -m pytest perf_tests -q -p no:cacheprovider --gpuperf-backend cuda \
    -o gpuperf_baselines=/tmp/gpu-baselines "$@" 2>&1 | grep -v USDT | tail -25
}
for round in 1 2 3; do
  cp /tmp/gpu-baselines/cuda-*.yaml /tmp/before.yaml 2>/dev/null || : > /tmp/before.yaml
  run --gpuperf-update | tee $OUT/baselines/update-$round.txt
  diff -u /tmp/before.yaml /tmp/gpu-baselines/cuda-*.yaml > $OUT/baselines/diff-$round.txt
  echo "round $round: $(grep -c '^[-+][^-+]' $OUT/baselines/diff-$round.txt) changed lines" | tee -a $OUT/baselines/summary.txt
done
python3 - <<'PY' 2>&1 | tee -a $OUT/baselines/summary.txt
import glob, time
from pathlib import Path
from pytest_gpuperf.baselines import load_baseline_file
for name in glob.glob("/tmp/gpu-baselines/cuda-*.yaml"):
    start = time.perf_counter(); loaded = load_baseline_file(Path(name)); took = time.perf_counter() - start
    print(f"{name}: {len(loaded.tests)} tests loaded in {took * 1e3:.1f} ms")
PY
cp /tmp/gpu-baselines/*.yaml $OUT/baselines/ 2>/dev/null
