#!/usr/bin/env bash
# Issue 37's done-when in one device call (at most 590 s: each part has its own timeout):
#   A. perf_tests/test_seed_kernels.py plain, then with --gpuperf-ncu: ncu's cost beyond the plain run (goal <= 60 s)
#   B. the whole perf_tests with --gpuperf-ncu --gpuperf-profile -v, JSON and Markdown: completes; each CUDA test
#      (4 seed kernels, MiniLLM step, single-rank FSDP2 step) has an "ncu <class>" line and its per-kernel table;
#      the MiniLLM window's seconds in the ncu child (goal <= 90 s)
#   B2. (off by default; B2=1 runs it) the single-rank FSDP2 step alone with --gpuperf-ncu -v (rank 0 opens its
#      window in the ncu child's rank pool): an ncu class and its per-kernel table
#   C. a synthetic step of 100,000 tiny kernels replayed from a CUDA graph (the child cannot rank it, so every kernel
#      is profiled): skipped inside gpuperf_ncu_timeout=40 with ncu's last words
#   D. the seed file with gpuperf_ncu_timeout=30: the child stops opening windows before the budget ends, so some
#      tests are classified and the rest skipped "not captured: budget", none lost
#   After each part: `pgrep -a ncu` 5 s after the session: nothing ("ncu left" in the table).
# Prints a summary table (with the MiniLLM window's seconds in the ncu child); logs, JSON and Markdown in
# $OUT/ncu_suite/. Usage, from the repo root: bash gpu/ncu_suite.sh
set -u
source gpu/setup.sh
OUT=${OUT:-/tmp/out}
W="$OUT/ncu_suite"
mkdir -p "$W"
COMMON=(--gpuperf --gpuperf-backend cuda -p no:cacheprovider -o gpuperf_artifacts="$W/artifacts" -rs)

timed() {  # timed NAME LIMIT ARGS...: pytest ARGS under a timeout; prints "NAME SECONDS RC" and keeps the log
  local name=$1 limit=$2; shift 2
  local start; start=$(date +%s.%N)
  timeout "$limit" python3 -m pytest "$@" > "$W/$name.log" 2>&1
  local rc=$?
  echo "$name $(python3 -c "print(round($(date +%s.%N) - $start, 1))") $rc"
  sleep 5
  pgrep -a ncu > "$W/$name.ncu_left.txt" 2>&1 || true
}

# Worst case: 55 + 115 + 195 + 75 + 85 s of parts, 5 x 5 s of waits, the set-up: under 590 s (B2 adds 125 s, C=0
# saves 80 s).
A_PLAIN=$(timed A_plain 55 perf_tests/test_seed_kernels.py "${COMMON[@]}")
A_NCU=$(timed A_ncu 115 perf_tests/test_seed_kernels.py "${COMMON[@]}" --gpuperf-ncu -v --gpuperf-json "$W/A_ncu.json")
B_ALL=$(timed B_all 195 perf_tests "${COMMON[@]}" --gpuperf-ncu --gpuperf-profile -v \
  --gpuperf-json "$W/B_all.json" --gpuperf-markdown "$W/B_all.md")
if [ "${B2:-0}" = 1 ]; then  # B2=1 adds it (part B runs the FSDP2 step too)
  B2_FSDP=$(timed B2_fsdp2 120 perf_tests/test_fsdp2.py -k training_step "${COMMON[@]}" --gpuperf-ncu -v \
    --gpuperf-json "$W/B2_fsdp2.json")
else
  B2_FSDP="B2_fsdp2 0 0"; : > "$W/B2_fsdp2.log"; : > "$W/B2_fsdp2.ncu_left.txt"
fi

if [ "${C:-1}" = 1 ]; then  # C=0 leaves the synthetic step out (45 s of device time less)
  S=$(mktemp -d /tmp/ncu-synthetic-XXXX)
cat > "$S/test_many_kernels.py" <<'PY'
import torch


def test_hundred_thousand_tiny_kernels(gpuperf):
    x = torch.zeros(1, device=gpuperf.device)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph):
        for _ in range(100_000):
            x.add_(1)
    torch.cuda.current_stream().wait_stream(stream)
    gpuperf.measure(graph.replay)
PY
  C_SYN=$(timed C_synthetic 75 "$S/test_many_kernels.py" --rootdir "$S" "${COMMON[@]}" --gpuperf-ncu \
    -o gpuperf_ncu_timeout=40 -o gpuperf_baselines="$S/baselines")
  rm -rf "$S"
else
  C_SYN="C_synthetic 0 0"; : > "$W/C_synthetic.log"; : > "$W/C_synthetic.ncu_left.txt"
fi
D_BUDGET=$(timed D_budget 85 perf_tests/test_seed_kernels.py "${COMMON[@]}" --gpuperf-ncu -v \
  -o gpuperf_ncu_timeout=30 --gpuperf-json "$W/D_budget.json")

python3 - "$W" "$A_PLAIN" "$A_NCU" "$B_ALL" "$B2_FSDP" "$C_SYN" "$D_BUDGET" <<'PY'
import json, re, sys
from pathlib import Path

w = Path(sys.argv[1])
runs = {line.split()[0]: (float(line.split()[1]), int(line.split()[2])) for line in sys.argv[2:]}
def log(name): return (w / f"{name}.log").read_text(errors="replace")
def left(name): return (w / f"{name}.ncu_left.txt").read_text().strip().replace("\n", "; ") or "none"
def summary(name): return next((l.strip() for l in log(name).splitlines()[::-1]
                                if re.search(r"passed|failed|skipped", l)), "no summary")
def classes(name): return len(re.findall(r"^\s+ncu (compute|memory|latency)-bound", log(name), re.M))
def tables(name):
    try:
        return json.loads((w / f"{name}.json").read_text())["gpuperf"].get("ncu", [])
    except (OSError, ValueError, KeyError):
        return []
def minillm(name):  # the MiniLLM window's seconds in the ncu child, and its kernels
    found = [t for t in tables(name) if "minillm" in t["nodeid"].lower()]
    return "; ".join(f"{t.get('selection', {}).get('window_s', '?')} s, {t['kernels']} kernels" for t in found) or "-"
print("| part | wall (s) | rc | result | MiniLLM window in child | ncu left 5 s after |")
print("| --- | ---: | ---: | --- | --- | --- |")
a_plain, a_ncu = runs["A_plain"], runs["A_ncu"]
print(f"| A seed file plain | {a_plain[0]:.1f} | {a_plain[1]} | {summary('A_plain')} | | {left('A_plain')} |")
print(f"| A seed file --gpuperf-ncu | {a_ncu[0]:.1f} | {a_ncu[1]} | {classes('A_ncu')} ncu classes; ncu cost "
      f"{a_ncu[0] - a_plain[0]:.1f} s (goal <= 60); {summary('A_ncu')} | {minillm('A_ncu')} | {left('A_ncu')} |")
b = runs["B_all"]
print(f"| B perf_tests --gpuperf-ncu --gpuperf-profile | {b[0]:.1f} | {b[1]} | {classes('B_all')} ncu classes; "
      f"{summary('B_all')} | {minillm('B_all')} | {left('B_all')} |")
b2 = runs["B2_fsdp2"]
print(f"| B2 FSDP2 step alone --gpuperf-ncu (B2=1) | {b2[0]:.1f} | {b2[1]} | {summary('B2_fsdp2') if b2[0] else 'not run'} "
      f"| | {left('B2_fsdp2')} |")
c = runs["C_synthetic"]
skip = next((l for l in log("C_synthetic").splitlines() if "SKIPPED" in l), "no skip line")
print(f"| C 100,000 tiny kernels, budget 40 s | {c[0]:.1f} | {c[1]} | {skip[:200]} | | {left('C_synthetic')} |")
d = runs["D_budget"]
skips = [l for l in log("D_budget").splitlines() if l.startswith("SKIPPED")]
budget = sum("not captured: budget" in l or "ran past its" in l for l in skips)
lost = len(skips) - budget
print(f"| D seed file, budget 30 s | {d[0]:.1f} | {d[1]} | {classes('D_budget')} classified, {budget} skipped for the "
      f"budget, {lost} other skips (goal: classified + budget = 4, other 0); {summary('D_budget')} | "
      f"{minillm('D_budget')} | {left('D_budget')} |")
print()
print("B: | test | step | ncu class | kernels | covered | window in child (s) | selection |")
print("| --- | --- | --- | ---: | ---: | ---: | --- |")
for t in tables("B_all"):
    sel = t.get("selection", {})
    chosen = f"top {sel['profiled_ops']} of {sel.get('ops')} ops" if "profiled_ops" in sel else sel.get("whole_step", "")
    if sel.get("max_kernels"):
        chosen += f"; {sel.get('expected_kernels')} kernels counted, cap {sel['max_kernels']}"
    covered = t.get("covered_share")
    print(f"| {t['nodeid'].split('::')[-1]} | {t['step']} | {t['bound']} | {t['kernels']} | "
          f"{'-' if covered is None else f'{covered:.0%}'} | {sel.get('window_s', '-')} | {chosen[:60]} |")
wanted = ["linear_fp16", "layernorm_softmax", "large_matmul", "minillm", "fsdp2_training_step"]
seen = " ".join(t["nodeid"] for t in tables("B_all"))
print("\nmissing an ncu table:", [name for name in wanted if name not in seen] or "none")
for name in ("B_all", "B2_fsdp2"):  # the FSDP2 step: its class line and table in the -v log, its JSON table
    lines = log(name).splitlines()
    at = next((i for i, l in enumerate(lines) if "fsdp2_training_step" in l and "[cuda]" in l and "::" in l
               and i + 2 < len(lines) and "[step]" in lines[i + 1]), None)
    shown = [l for l in lines[at + 1:at + 16]] if at is not None else ["no profile block for the FSDP2 step"]
    print(f"\n{name}: FSDP2 step's profile lines (-v):", *shown[:15], sep="\n  ")
    try:
        fsdp = [t for t in json.loads((w / f"{name}.json").read_text())["gpuperf"].get("ncu", [])
                if "fsdp2_training_step" in t["nodeid"]]
    except (OSError, ValueError, KeyError):
        fsdp = []
    print(f"{name}: FSDP2 JSON tables: " + ("; ".join(f"{t['bound']} over {t['kernels']} kernel(s), "
          f"{len(t['rows'])} row(s), selection {t.get('selection')}" for t in fsdp) or "none"))
PY
grep -hE "SKIPPED|captured no window|ran past|not captured" "$W"/*.log | cut -c1-300 | head -20
