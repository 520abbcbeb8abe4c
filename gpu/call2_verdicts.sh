#!/usr/bin/env bash
# Issue 20's "done when" on the H200 in one device call: a sanity run that prints what the clock-aware timing
# recorded, 10 unchanged fresh pytest processes over GEMM, attention, elementwise and MiniLLM (40 runs), then
# GEMM and attention slowed by +10% and +5% of real work in the same kernels (peak memory constant).
source gpu/setup.sh
mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee $OUT/gpu.txt
P=/tmp/sanity; mkdir -p $P; cat > $P/test_s.py <<'PY'
import torch
def test_gemm(gpuperf):
    a = torch.randn(8192, 4096, device=gpuperf.device, dtype=torch.bfloat16)
    b = torch.randn(4096, 8192, device=gpuperf.device, dtype=torch.bfloat16)
    gpuperf.measure(lambda: a @ b, flops=2 * 8192 * 4096 * 8192)
PY
(cd $P && timeout 60 python3 -m pytest -q -p no:cacheprovider --gpuperf-update --gpuperf-backend cuda test_s.py 2>&1 | tail -3
 timeout 60 python3 -m pytest -q -p no:cacheprovider --gpuperf --gpuperf-backend cuda --gpuperf-json r.json -rA test_s.py 2>&1 | tail -15
 python3 -c "
import json; t=json.load(open('r.json'))['gpuperf']['tests'][0]
for m in t['metrics']:
    e=m.get('extra') or {}
    print(m['metric'], m['status'], m['value'], {k: e[k] for k in ('sm_clock_mhz','mem_clock_mhz','power_warmup_seconds','power_settled','sustained_sm_clock_mhz','judged_on','measure_seconds','method','host_bound') if k in e})
"; grep -A3 "step.cycles\|host_overhead" baselines/*.yaml | head -20) 2>&1 | tee $OUT/sanity.txt
timeout 330 python3 benchmarks/bench_verdicts.py --device cuda --unchanged 10 --slowed 0 --scales "" \
  --workloads gemm,attention,elementwise,minillm --out $OUT/unchanged.jsonl 2>&1 | grep -v USDT | tee $OUT/unchanged.txt
timeout 200 python3 benchmarks/bench_verdicts.py --device cuda --unchanged 0 --slowed ${SLOWED:-5} --scales 1.10,1.05 \
  --workloads gemm,attention --out $OUT/slowed.jsonl 2>&1 | grep -v USDT | tee $OUT/slowed.txt
