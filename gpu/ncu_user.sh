#!/usr/bin/env bash
# --gpuperf-ncu on a user's file (issue 22 item 3): five parametrized tests (`test_op[<name>-cuda]`) of a file
# OUTSIDE the repository, its ops in a module-level cache, selected by -k, pytest started from the repository with
# --rootdir/-c pointing at it (the file's node ids then have an empty path part: `::test_op[add-cuda]`).
#   A. the five tests with --gpuperf, no ncu;   B. the same with --gpuperf-ncu.
# Goal: all five captured and classified (an `ncu ...-bound` line each, no skip), B - A <= 5 s per test.
# Logs in $OUT/ncu_user/. Usage, from the repo root: bash gpu/ncu_user.sh
set -u
source gpu/setup.sh
source gpu/timed_run.sh  # run NAME ARGS...: pytest "${ARGS[@]}" ARGS..., log $W/NAME.log
OUT=${OUT:-/tmp/out}
W="$OUT/ncu_user"
U=$(mktemp -d /tmp/user-project-XXXX)
mkdir -p "$W" "$U/ops"
cat > "$U/ops/test_user_ops.py" <<'PY'
import pytest
import torch

pytestmark = pytest.mark.gpuperf_backends("cuda")
OPS = {}  # a module-level cache of the ops and their inputs, filled at first use


def op(name):
    def register(fn):
        OPS[name] = fn
        return fn
    return register


@op("gemm")
def _gemm(x):
    return x @ x


@op("add")
def _add(x):
    return x + x


@op("softmax")
def _softmax(x):
    return torch.softmax(x, dim=-1)


@op("gelu")
def _gelu(x):
    return torch.nn.functional.gelu(x)


@op("layernorm")
def _layernorm(x):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],))


@op("unused")
def _unused(x):
    return x.exp()


INPUTS = {}


def _input(device):
    if device not in INPUTS:
        gen = torch.Generator(device=device).manual_seed(0)
        INPUTS[device] = torch.randn(8192, 8192, generator=gen, device=device).bfloat16()
    return INPUTS[device]


@pytest.mark.parametrize("name", sorted(OPS))
def test_op(gpuperf, name):
    x = _input(gpuperf.device)
    gpuperf.measure(lambda: OPS[name](x))
PY
SEL=(-k "gemm or add or softmax or gelu or layernorm")
ARGS=("$U/ops/test_user_ops.py" "${SEL[@]}" -p no:randomly --rootdir "$PWD" -c "$PWD/pyproject.toml" --gpuperf
      --gpuperf-update --gpuperf-backend cuda -o gpuperf_max_time=0.5 -o gpuperf_baselines="$W/baselines"
      -o gpuperf_artifacts="$W/artifacts" -rs -v)
A=$(run A_plain); echo "$A"
B=$(run B_ncu --gpuperf-ncu); echo "$B"
python3 - "$A" "$B" "$W/B_ncu.log" <<'PY'
import re, sys
a, b = (float(x.split()[1]) for x in sys.argv[1:3])
text = open(sys.argv[3]).read()
ncu = len(re.findall(r"^\s*ncu (compute|memory|latency)-bound", text, re.M))  # the verdict lines, not the notes
skipped = len(re.findall(r"^SKIPPED", text, re.M))
print("| run | wall (s) | ncu-classified | skipped | ncu cost per test (s) | goal |\n| --- | ---: | ---: | ---: | ---: | --- |")
print(f"| 5 tests, no ncu | {a:.1f} | - | - | - | |")
print(f"| 5 tests, --gpuperf-ncu | {b:.1f} | {ncu} | {skipped} | {(b - a) / 5:.1f} | 5 of 5, <= 5 s |")
PY
grep -hE "test_op\[|ncu (compute|memory|latency)-bound|SKIPPED|captured no window" "$W/B_ncu.log" | cut -c1-240 | head -40
rm -rf "$U"
