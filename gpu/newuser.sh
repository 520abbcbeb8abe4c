#!/usr/bin/env bash
# New-user checks on the H200 (issues 11/12, helper newuser), about 4 minutes:
#  1. `pytest --help` / `--markers` exit 0 with the plugin installed;
#  2. the seed perf suite on CUDA under --gpuperf WITHOUT filtering anything: how many `USDT:` and
#     `Synchronization debug mode is a prototype feature` lines leak (expected 0), the one-line summary (default),
#     the -q line and the short summary lines;
#  3. --gpuperf-strict: `--gpuperf-backend cuda` runs (rc 0/1), `--gpuperf-backend mps` is a usage error (rc 4);
#  4. a project written from the README (module-scoped model fixture on gpuperf_device, parametrized batch):
#     ids end with -cuda, record then judge.
# Results: $OUT/newuser/*.txt and a table on stdout.
source gpu/setup.sh
OUT=${OUT:-/tmp/out}
D=$OUT/newuser
mkdir -p $D
unset KINETO_LOG_LEVEL
python3 -m pytest --help -p no:cacheprovider > $D/help.txt 2>&1; HELP_RC=$?
python3 -m pytest --markers -p no:cacheprovider > $D/markers.txt 2>&1; MARK_RC=$?
T=perf_tests/test_seed_kernels.py
python3 -m pytest $T -p no:cacheprovider --gpuperf --gpuperf-backend cuda -rA > $D/judge_default.txt 2>&1; J_RC=$?
python3 -m pytest $T -p no:cacheprovider --gpuperf --gpuperf-backend cuda -q > $D/judge_quiet.txt 2>&1; Q_RC=$?
python3 -m pytest $T -p no:cacheprovider --gpuperf --gpuperf-backend cuda --gpuperf-strict -q -k matmul > $D/strict_cuda.txt 2>&1; S1=$?
python3 -m pytest $T -p no:cacheprovider --gpuperf --gpuperf-backend mps --gpuperf-strict -q > $D/strict_mps.txt 2>&1; S2=$?
P=$(mktemp -d)
cat > $P/conftest.py <<'PY'
import pytest, torch

@pytest.fixture(scope="module")
def model(gpuperf_device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 512)).to(gpuperf_device).eval()
PY
cat > $P/test_model_perf.py <<'PY'
import pytest, torch

@pytest.mark.parametrize("batch", [1, 64])
@pytest.mark.gpuperf(memory_tolerance=0.02, time_tolerance={"cuda": 0.10})
def test_forward(gpuperf, model, batch):
    x = torch.randn(batch, 512, device=gpuperf.device)
    with torch.no_grad():
        gpuperf.measure(lambda: model(x), items=batch, unit="samples")
PY
(cd $P && python3 -m pytest -p no:cacheprovider --gpuperf --gpuperf-update --gpuperf-backend cuda -v > $D/readme_record.txt 2>&1
 python3 -m pytest -p no:cacheprovider --gpuperf --gpuperf-backend cuda > $D/readme_judge.txt 2>&1; echo $? > $D/readme_judge.rc
 cp baselines/*.yaml $D/ 2>/dev/null)
echo "| check | result |"
echo "|---|---|"
echo "| pytest --help rc / --markers rc | $HELP_RC / $MARK_RC |"
echo "| judge rc (default / -q) | $J_RC / $Q_RC |"
echo "| USDT lines (default run) | $(grep -c 'USDT' $D/judge_default.txt) |"
echo "| 'prototype feature' lines (default run) | $(grep -c 'prototype feature' $D/judge_default.txt) |"
echo "| default summary line | $(grep -m1 '^gpuperf: ' $D/judge_default.txt) |"
echo "| -q summary line | $(grep -m1 '^gpuperf: ' $D/judge_quiet.txt) |"
echo "| lines of output default / -q | $(wc -l < $D/judge_default.txt) / $(wc -l < $D/judge_quiet.txt) |"
echo "| strict cuda rc / strict mps rc (want 0-1 / 4) | $S1 / $S2 |"
echo "| README project ids | $(grep -o 'test_forward\[[^]]*\]' $D/readme_record.txt | sort -u | tr '\n' ' ') |"
echo "| README project judge rc | $(cat $D/readme_judge.rc) ($(grep -m1 '^gpuperf: ' $D/readme_judge.txt)) |"
grep -E '^(FAILED|PASSED)' $D/judge_default.txt | head -8
grep -m2 'ERROR' $D/strict_mps.txt
