"""``--gpuperf-bisect`` exit codes, and the creep check inside a judging run.

The regressions are deterministic quantities (peak memory 16x), so the verdicts do not depend on the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuperf.history.bisect import BAD, GOOD, SKIP, bisect_status

PERF_TEST = """
import pytest
import torch

ALLOC_MIB = {alloc}

# Peak memory alone decides: time is shown, never judged (a loaded runner may make it inconclusive: exit 125).
@pytest.mark.gpuperf(informational=("time", "throughput", "cycles", "host_overhead"))
def test_alloc(gpuperf):
    gen = torch.Generator().manual_seed(0)

    def step():
        return torch.rand(ALLOC_MIB * 262144, generator=gen).sum()

    gpuperf.measure(step)
"""
#: Time is not what these tests judge (the test marks it informational; a loose tolerance besides).
LOOSE_TIME = ["-o", "gpuperf_cpu_time_tolerance=5"]


def test_bisect_status_from_the_verdicts() -> None:
    assert bisect_status([("passed", ["unchanged", "info"])], 0)[0] == GOOD
    assert bisect_status([("failed", ["regression"]), ("passed", ["inconclusive"])], 1)[0] == BAD
    assert bisect_status([("failed", ["changed"])], 1)[0] == BAD
    assert bisect_status([("passed", ["inconclusive"])], 0) == (SKIP, "1 perf test(s) could not be judged "
                                                                     "(inconclusive or no baseline)")
    assert bisect_status([("passed", ["new"])], 0)[0] == SKIP
    assert bisect_status([("failed", ["unchanged"])], 1)[0] == SKIP  # the body failed: a broken build
    assert bisect_status([], 0)[0] == SKIP
    assert bisect_status([("passed", ["unchanged"])], int(pytest.ExitCode.INTERRUPTED))[0] == SKIP
    assert bisect_status([("passed", ["unchanged"])], int(pytest.ExitCode.TESTS_FAILED))[0] == SKIP


def test_bisect_exit_codes(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(test_perf=PERF_TEST.format(alloc=1))
    no_baseline = pytester.runpytest("--gpuperf", "--gpuperf-bisect", *fast_args, *LOOSE_TIME)
    assert no_baseline.ret == SKIP
    no_baseline.stdout.fnmatch_lines(["*gpuperf bisect: exit 125 (1 perf test(s) could not be judged*"])
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    good = pytester.runpytest("--gpuperf", "--gpuperf-bisect", *fast_args, *LOOSE_TIME)
    assert good.ret == GOOD, good.stdout.str()
    pytester.makepyfile(test_perf=PERF_TEST.format(alloc=16))
    bad = pytester.runpytest("--gpuperf", "--gpuperf-bisect", *fast_args, *LOOSE_TIME)
    assert bad.ret == BAD
    bad.stdout.fnmatch_lines(["*gpuperf bisect: exit 1 (1 perf test(s) regressed)*"])
    pytester.makepyfile(test_perf="def test_alloc(gpuperf):\n    raise ImportError('broken build')\n")
    assert pytester.runpytest("--gpuperf", "--gpuperf-bisect", *fast_args).ret == SKIP


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.mark.e2e
def test_git_bisect_run_finds_the_commit(
    tmp_path: Path, fast_args: list[str], monkeypatch: pytest.MonkeyPatch, steady_calibration_value: str
) -> None:
    """4 commits; the 3rd makes the step allocate 16x; `git bisect run` with the flag names it.

    Two candidates lie between the good and the bad end, so bisect judges a good and a bad commit before it names
    the first bad one. Each of its steps is a fresh pytest that imports torch: the chain is kept that short, and
    every step reads this session's one host calibration and CPU brand (as pytester's inner runs do).
    """
    from pytest_gpuperf.backends.cpu import BRAND_ENV, cpu_brand
    from pytest_gpuperf.timing.calibration import PIN_ENV

    monkeypatch.setenv(PIN_ENV, steady_calibration_value)
    monkeypatch.setenv(BRAND_ENV, cpu_brand())
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "conftest.py").write_text("")
    # With pytest's cache (untracked, so bisect's checkouts leave it): the host roofs the recording run measured are
    # read by every step, not measured again by each fresh process.
    pairs = zip(fast_args[::2], fast_args[1::2], strict=True)
    cached = [arg for pair in pairs if pair != ("-p", "no:cacheprovider") for arg in pair]
    command = [sys.executable, "-m", "pytest", "-q", "--gpuperf", *cached, *LOOSE_TIME, "test_perf.py"]
    for number in range(1, 5):
        (repo / "test_perf.py").write_text(PERF_TEST.format(alloc=16 if number >= 3 else 1))
        (repo / "notes.txt").write_text(f"change {number}\n")
        if number == 1:
            subprocess.run([*command, "--gpuperf-update"], cwd=repo, check=True, capture_output=True)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"change {number}")
    shas = _git(repo, "log", "--reverse", "--format=%H").split()
    _git(repo, "bisect", "start", shas[-1], shas[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    done = subprocess.run(
        ["git", "bisect", "run", *command, "--gpuperf-bisect"], cwd=repo, capture_output=True, text=True, env=env
    )
    assert f"{shas[2]} is the first bad commit" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


CREEP_BASELINE = """schema_version: 1
fingerprint: {fingerprint}
tests:
  test_perf.py::test_alloc[cpu]:
    step.peak_memory: {{value: {value}, unit: B, better: lower, kind: memory}}
"""


def test_the_creep_check_fails_a_metric_that_crept_over_accepted_updates(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    """Three accepted updates of +4% peak memory each (inside the 5% tolerance) add up past twice the tolerance."""
    import yaml

    pytester.makepyfile(test_perf=PERF_TEST.format(alloc=4))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = sorted((pytester.path / "baselines").glob("*.yaml"))
    data = yaml.safe_load(path.read_text())
    measured = data["tests"]["test_perf.py::test_alloc[cpu]"]["step.peak_memory"]["value"]
    fingerprint = yaml.safe_dump(data["fingerprint"], default_flow_style=True).strip()
    for name in ("git init -q", "git config user.email t@example.com", "git config user.name t"):
        subprocess.run(name.split(), cwd=pytester.path, check=True)
    for step in range(3, -1, -1):  # 0.89, 0.92, 0.96, 1.0 x today's value: each update +4%
        value = int(measured / 1.04**step)
        path.write_text(CREEP_BASELINE.format(fingerprint=fingerprint, value=value))
        subprocess.run(["git", "add", "-A"], cwd=pytester.path, check=True)
        subprocess.run(["git", "commit", "-q", "-m", f"update {step}"], cwd=pytester.path, check=True)
    plain = pytester.runpytest("--gpuperf", *fast_args, *LOOSE_TIME)
    plain.assert_outcomes(passed=1)
    checked = pytester.runpytest("--gpuperf", *fast_args, *LOOSE_TIME, "-o", "gpuperf_creep_check=true")
    checked.assert_outcomes(failed=1)
    checked.stdout.fnmatch_lines(["*step.peak_memory crept +12.*% since * past the creep tolerance 10%*"])
