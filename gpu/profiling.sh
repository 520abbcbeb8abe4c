#!/usr/bin/env bash
# GPU run of the profiling feature (issue 4), from the repo root on one H200 with ncu on PATH.
#   A. the seed perf tests (perf_tests/test_seed_kernels.py) on CUDA with --gpuperf --gpuperf-profile: analytic bound verdicts against the measured roofs,
#      torch.profiler traces, top kernels (MiniLLM included);
#   B. the kernel tests again with --gpuperf-ncu: region-only Nsight Compute capture, ncu's verdict next to the
#      analytic one;
#   C. the analytic-vs-ncu table for docs/roofline.md, from the baselines recorded by A and B;
#   D. benchmarks/bench_ncu_capture.py: region-only capture vs whole-process `ncu --set full` (matmul test).
# Everything goes to $OUT/profiling.tar.gz (logs, baselines, roofs cache, traces, ncu CSVs); summary at the end.
set -u
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/out}
W=$(mktemp -d /tmp/gpuperf-profiling.XXXX)/profiling
mkdir -p "$W" "$OUT"
START=$(date +%s)
stamp() { echo "[$(( $(date +%s) - START )) s] $*"; }

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
  command -v ncu && ncu --version 2>&1 | tail -1
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} > "$W/env.txt" 2>&1
cat "$W/env.txt"

COMMON=(-p no:cacheprovider -p no:randomly --gpuperf --gpuperf-update --gpuperf-backend cuda
        -o gpuperf_artifacts="$W/artifacts" -o gpuperf_max_time=1.0 -rs)

stamp "A: perf suite with --gpuperf-profile"
timeout 60 $PY -m pytest perf_tests/test_seed_kernels.py "${COMMON[@]}" --gpuperf-profile -o gpuperf_baselines="$W/baselines-A" \
  > "$W/A_profile.log" 2>&1
echo "A exit $?"; tail -n 25 "$W/A_profile.log"

stamp "B: kernel tests with --gpuperf-ncu"
timeout 100 $PY -m pytest perf_tests/test_seed_kernels.py -k "not minillm" "${COMMON[@]}" --gpuperf-ncu -o gpuperf_ncu_timeout=35 \
  -o gpuperf_baselines="$W/baselines-B" > "$W/B_ncu.log" 2>&1
echo "B exit $?"; grep -E "ncu|analytic|SKIPPED|passed|failed" "$W/B_ncu.log" | head -40

stamp "C: analytic vs ncu table"
$PY - "$W" > "$W/roofline_table.md" 2>&1 <<'EOF'
import sys, pathlib, yaml
w = pathlib.Path(sys.argv[1])
rows = {}
for run in ("A", "B"):
    for path in sorted((w / f"baselines-{run}").glob("*.yaml")):
        for test, metrics in (yaml.safe_load(path.read_text()).get("tests") or {}).items():
            rows.setdefault(test, {})[run] = metrics
def v(m, key, fmt="{:.3g}"):
    e = m.get(key)
    if not e: return "-"
    return e["value"] if isinstance(e["value"], str) else fmt.format(e["value"])
print("| test | analytic (run A) | AI (FLOP/B) | roof share | analytic (run B) | ncu | SM % | memory % | DRAM % |")
print("| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: |")
for test, runs in sorted(rows.items()):
    a, b = runs.get("A", {}), runs.get("B", {})
    print(f"| `{test.split('::')[-1]}` | {v(a, 'step.bound')} | {v(a, 'step.arithmetic_intensity')} | "
          f"{v(a, 'step.roof_share', '{:.0%}')} | {v(b, 'step.bound')} | {v(b, 'step.ncu_bound')} | "
          f"{v(b, 'step.ncu_sm_pct', '{:.1f}')} | {v(b, 'step.ncu_memory_pct', '{:.1f}')} | "
          f"{v(b, 'step.ncu_dram_pct', '{:.1f}')} |")
EOF
cat "$W/roofline_table.md"

stamp "D: cost of region-only vs whole-process --set full capture"
timeout 60 $PY benchmarks/bench_ncu_capture.py --out "$W/bench" --timeout 50 \
  "perf_tests/test_seed_kernels.py::test_large_matmul_compute_side[cuda]" > "$W/D_bench.log" 2>&1
echo "D exit $?"; cat "$W/D_bench.log" | tail -n 12

cp -r .gpuperf "$W/roofs-cache" 2>/dev/null
rm -f "$W"/bench/full-*.ncu-rep  # large; the wall times are in D_bench.log
find "$W" -name '*.trace.json' -size +40M -printf 'dropped large trace %p (%s bytes)\n' -delete
tar -czf "$OUT/profiling.tar.gz" -C "$(dirname "$W")" profiling
stamp "done: $OUT/profiling.tar.gz ($(du -h "$OUT/profiling.tar.gz" | cut -f1))"
echo "=== SUMMARY ==="
cat "$W/roofline_table.md"
grep -hE "measured roofs" "$W/A_profile.log"
grep -hE "^(=+ )?[0-9]+ (passed|failed|skipped)" "$W/A_profile.log" "$W/B_ncu.log"
grep -hE "^\|" "$W/D_bench.log"
