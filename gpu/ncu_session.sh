#!/usr/bin/env bash
# Cost of --gpuperf-ncu per test when the session's ncu tests share ONE ncu child process (issue 16, item 5):
#   A. 5 single-kernel perf tests (GEMM, add, LayerNorm, softmax, GELU) with --gpuperf, no ncu (the baseline cost);
#   B. the same 5 with --gpuperf-ncu: one ncu child captures all of them, one window per test;
#   C. one of them alone with --gpuperf-ncu (a session of one: what every test paid before, 16-17 s).
# Prints wall seconds per run, ncu's cost per test ((B - A) / 5 and C - A/5), and each test's ncu and analytic
# verdicts with any disagreement note. Logs in $OUT/ncu_session/.
# Usage, from the repo root: bash gpu/ncu_session.sh
set -u
source gpu/setup.sh
source gpu/timed_run.sh  # run NAME ARGS...: pytest "${ARGS[@]}" ARGS..., log $W/NAME.log
OUT=${OUT:-/tmp/out}
W="$OUT/ncu_session"
mkdir -p "$W" gpu_ncu_session_tests
cat > gpu_ncu_session_tests/test_ncu5.py <<'PY'
import pytest
import torch

pytestmark = pytest.mark.gpuperf_backends("cuda")


def _r(*shape, seed=0):
    return torch.randn(*shape, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)).bfloat16()


def test_gemm(gpuperf):
    a, b = _r(4096, 4096), _r(4096, 4096, seed=1)
    gpuperf.measure(lambda: a @ b)


def test_add(gpuperf):
    a, b = _r(1 << 27), _r(1 << 27, seed=1)
    gpuperf.measure(lambda: a + b)


def test_layer_norm(gpuperf):
    x = _r(16384, 4096)
    gpuperf.measure(lambda: torch.nn.functional.layer_norm(x, (4096,)))


def test_softmax(gpuperf):
    x = _r(16384, 4096)
    gpuperf.measure(lambda: torch.softmax(x, dim=-1))


def test_gelu(gpuperf):
    x = _r(1 << 26)
    gpuperf.measure(lambda: torch.nn.functional.gelu(x))
PY
ARGS=(gpu_ncu_session_tests/test_ncu5.py -p no:randomly --gpuperf --gpuperf-update --gpuperf-backend cuda
      -o gpuperf_max_time=0.5 -o gpuperf_baselines="$W/baselines" -o gpuperf_artifacts="$W/artifacts" -rs)
A=$(run A_plain); echo "$A"
B=$(run B_ncu5 --gpuperf-ncu); echo "$B"
C=$(run C_ncu1 --gpuperf-ncu -k test_gemm); echo "$C"
python3 - "$A" "$B" "$C" <<'PY'
import sys
(a, b, c) = (float(x.split()[1]) for x in sys.argv[1:4])
print(f"| session | wall (s) | ncu cost per test (s) |\n| --- | ---: | ---: |")
print(f"| 5 tests, no ncu | {a:.1f} | - |")
print(f"| 5 tests, --gpuperf-ncu (one ncu child) | {b:.1f} | {(b - a) / 5:.1f} |")
print(f"| 1 test, --gpuperf-ncu | {c:.1f} | {c - a / 5:.1f} |")
PY
grep -hE "ncu (compute|memory|latency)-bound|analytic .*-bound:|believe the|SKIPPED|passed|failed" "$W/B_ncu5.log" | cut -c1-220 | head -40
rm -rf gpu_ncu_session_tests
