#!/usr/bin/env bash
# Calibrate the analytic roofline verdict against Nsight Compute on 20 ops (GEMMs of several shapes, norms, softmax,
# elementwise in and out of L2, a reduction, an embedding, attention with and without a causal mask, small batched
# matmuls, cross-entropy, AdamW foreach and fused) on one H200: the analytic verdicts first (CUDA events, the plugin's
# counting and measured roofs), then ONE ncu process (--clock-control none) that captures every op in its own window.
# Writes $OUT/roofline_calib.{md,json} (+ the ncu CSV and log) and prints the measured roofs and the table with the
# agreement count. Budget: under 2.5 minutes in all (the run of 1 Dec took 64 s: 42.5 s of it the one ncu child);
# python is cut at 140 s, the ncu child at 100 s. Offline re-judging of the JSON: python3 gpu/roofline_sweep.py.
# Usage, from the repo root: bash gpu/roofline_calib.sh
set -u
source gpu/setup.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
  command -v ncu && ncu --version 2>&1 | tail -1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} | tee "$OUT/env.txt"
START=$(date +%s)
timeout 140 python3 gpu/roofline_calib.py --out "$OUT" --timeout 100 2>&1 | tee "$OUT/roofline_calib.log" | grep -v "^analytic "
echo "exit ${PIPESTATUS[0]}; $(( $(date +%s) - START )) s"
