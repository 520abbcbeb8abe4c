#!/usr/bin/env bash
# Where an ncu capture spends its time: the Linear seed test alone under --gpuperf-ncu, with the ncu child's Python
# stacks dumped every 15 s (faulthandler, through a sitecustomize that only acts in the ncu child), the child's
# output and ncu's CSV kept. Also re-records the FSDP2 training step's H200 entries when RERECORD_FSDP=1.
source gpu/setup.sh
mkdir -p $OUT/ncu /tmp/fh
if [ "${RERECORD_FSDP:-0}" = 1 ]; then
  timeout 150 python3 -m pytest "perf_tests/test_fsdp2.py::test_fsdp2_training_step_tokens_per_second_and_peak_memory" \
    --gpuperf --gpuperf-update --gpuperf-backend cuda -p no:cacheprovider -q 2>&1 | grep -v USDT | tail -8
  cp baselines/cuda-nvidia-h200-sm-90-140gib-ws1.yaml $OUT/
fi
cat > /tmp/fh/sitecustomize.py <<'PY'
import faulthandler, os
if os.environ.get("GPUPERF_NCU_MANIFEST"):
    faulthandler.dump_traceback_later(15, repeat=True, file=open(f"/tmp/fh/stacks-{os.getpid()}.txt", "w"))
PY
start=$(date +%s)
PYTHONPATH=/tmp/fh:${PYTHONPATH:-} timeout ${NCU_WAIT:-100} python3 -m pytest perf_tests/test_seed_kernels.py \
  -k "${TEST:-linear}" --gpuperf --gpuperf-backend cuda --gpuperf-ncu -o gpuperf_ncu_timeout=${NCU_TIMEOUT:-80} \
  -o gpuperf_artifacts=/tmp/art -p no:cacheprovider -q -rs -v 2>&1 | grep -v USDT | tail -40 | tee $OUT/ncu/run.txt
echo "wall $(( $(date +%s) - start )) s" | tee -a $OUT/ncu/run.txt
sleep 2; ps -eo pid,etime,args | grep -E "ncu|pytest" | grep -v grep | cut -c1-200 | tee $OUT/ncu/left.txt
for f in /tmp/fh/stacks-*.txt; do echo "== $f"; tail -60 "$f"; done > $OUT/ncu/stacks.txt 2>&1
find /tmp/art /tmp -maxdepth 3 -name "*.csv" -newer /tmp/fh/sitecustomize.py 2>/dev/null | head -3 | xargs -r -I{} sh -c 'wc -c {}; tail -3 {}' > $OUT/ncu/csv_tail.txt
