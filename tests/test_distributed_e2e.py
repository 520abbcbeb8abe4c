"""End-to-end: real 2-rank gloo runs through pytest (pytester subprocesses), kept few and small for a 2-core CI."""

from __future__ import annotations

import sys

import pytest
import yaml

RANK_TESTS = """
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

HERE = Path(__file__).parent


@pytest.mark.parametrize("size", [48])
@pytest.mark.gpuperf_distributed(world_size=2)
def test_a_measures_on_every_rank(gpuperf, gpuperf_rank, size):
    assert (dist.get_rank(), dist.get_world_size()) == (gpuperf_rank.rank, 2)
    assert os.environ["NCCL_NVLS_ENABLE"] == "0" and os.environ["WORLD_SIZE"] == "2"
    x = torch.randn(size * (1 + gpuperf_rank.rank), size)
    gpuperf.measure(lambda: torch.tanh(x @ x.T), items=size, unit="rows")
    dist.new_group([0, 1])  # leaked on purpose: the pool must destroy it
    (HERE / f"pid{gpuperf_rank.rank}").write_text(str(os.getpid()))
    print(f"body ran on rank {gpuperf_rank.rank}")


@pytest.mark.gpuperf_distributed(world_size=2)
def test_b_gets_a_clean_reused_rank(gpuperf_rank, gpuperf_device):
    from torch.distributed import distributed_c10d as c10d

    assert gpuperf_device == gpuperf_rank.device, "gpuperf_device is the rank's own device"

    assert len(c10d._world.pg_map) == 1, "the group test_a leaked is still there"
    assert (HERE / f"pid{gpuperf_rank.rank}").read_text() == str(os.getpid()), "the rank was not reused"
    drawn = torch.rand(4)
    both = [torch.empty(4) for _ in range(2)]
    dist.all_gather(both, drawn)
    assert torch.equal(both[0], both[1]), "RNG seeds were not reset alike on every rank"


@pytest.mark.gpuperf_distributed(world_size=2, backend="cuda")
def test_c_needs_two_gpus(gpuperf_rank):
    raise AssertionError("must be skipped on a machine without 2 GPUs")
"""


def test_a_body_runs_on_two_reused_gloo_ranks_and_records_per_rank_metrics_in_a_ws2_baseline(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_ranks=RANK_TESTS)
    result = pytester.runpytest("--gpuperf-update", "-rs", "-s", *fast_args)
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*gpuperf distributed: 2 test(s) on 1 rank-pool start(s) (0 rebuilt after a fault)*",
            "*needs 2 CUDA GPU(s) (one per rank); this machine has [01]*",
        ]
    )
    [path] = sorted((pytester.path / "baselines").glob("*.yaml"))
    assert path.name.startswith("cpu-") and path.name.endswith("-ws2.yaml")
    data = yaml.safe_load(path.read_text())
    assert data["fingerprint"]["world_size"] == 2
    metrics = data["tests"]["test_ranks.py::test_a_measures_on_every_rank[48-cpu]"]
    assert metrics["rank0.step.peak_memory"]["value"] > 0 and metrics["rank1.step.peak_memory"]["value"] > 0
    assert metrics["step.throughput"]["value"] > 0 and len(metrics["step.time"]["samples"]) >= 3
    assert "samples" not in metrics["step.throughput"]  # derived from the time samples when read
    assert metrics["step.imbalance"]["value"] >= 1.0


SCRIPT = """
import os, sys, time
rank = int(os.environ["RANK"])
if os.environ.get("HANG") and rank == 1:
    def waiting_for_a_peer_that_never_comes():
        time.sleep(3600)
    waiting_for_a_peer_that_never_comes()
print('GPUPERF {"rank": %d, "peak_memory": %d, "tokens_per_s": %f}' % (rank, 1000 + rank, 50.0 + rank), flush=True)
"""

SCRIPT_TESTS = """
import pytest

def test_script_reports(gpuperf, gpuperf_torchrun):
    result = gpuperf_torchrun.run("report.py", nproc_per_node=2)
    assert sorted(result.report.ranks) == [0, 1]

def test_script_hangs(gpuperf, gpuperf_torchrun):
    gpuperf_torchrun.run("report.py", nproc_per_node=2, timeout=15, env={"HANG": "1"})
"""


def test_the_torchrun_fixture_judges_what_a_script_prints_and_fails_a_hung_script_with_its_stacks(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(report=SCRIPT, test_script=SCRIPT_TESTS)
    result = pytester.runpytest("--gpuperf-update", *fast_args)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*report.py on 2 rank(s) did not finish within 15 s*",
            "*in waiting_for_a_peer_that_never_comes*",
        ]
    )
    [path] = sorted((pytester.path / "baselines").glob("*-ws2.yaml"))
    metrics = yaml.safe_load(path.read_text())["tests"]["test_script.py::test_script_reports[cpu]"]
    assert metrics["rank1.report.peak_memory"]["value"] == 1001
    assert metrics["report.tokens_per_s"]["value"] == 50.0


IN_PLACE = """
import os
import torch
import torch.distributed as dist
import pytest

@pytest.mark.gpuperf_distributed(world_size=2)
def test_in_place(gpuperf, gpuperf_rank):
    assert "GPUPERF_POOL_WORKER" not in os.environ, "ran in a pool, not in place"
    assert dist.get_world_size() == 2 and gpuperf_rank.rank == int(os.environ["RANK"])
    x = torch.randn(64, 64)
    gpuperf.measure(lambda: x @ x, items=64, unit="rows")

@pytest.mark.gpuperf_distributed(world_size=4)
def test_other_world(gpuperf_rank):
    pass
"""


def test_under_an_outer_torchrun_the_body_runs_in_place_and_rank0_writes_the_baseline(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_inplace=IN_PLACE)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node", "2"]
    result = pytester.run(*launch, "-m", "pytest", "-rs", "--gpuperf-update", *fast_args, timeout=300)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert result.stdout.str().count("1 passed, 1 skipped") == 2
    result.stdout.fnmatch_lines(["*needs world_size=4, but pytest runs under a torchrun launch of 2 ranks*"])
    [path] = sorted((pytester.path / "baselines").glob("*.yaml"))
    assert path.name.endswith("-ws2.yaml")
    metrics = yaml.safe_load(path.read_text())["tests"]["test_inplace.py::test_in_place[cpu]"]
    assert {"rank0.step.peak_memory", "rank1.step.peak_memory", "step.throughput"} <= set(metrics)


LOCKSTEP = """
import random
import time

import pytest
import torch
import torch.distributed as dist


@pytest.mark.gpuperf_distributed(world_size=2, timeout=60)
def test_collective_step_with_noise_on_one_rank(gpuperf, gpuperf_rank):
    x = torch.randn(64)
    rng = random.Random(gpuperf_rank.rank)

    def step():
        if gpuperf_rank.rank == 1:  # noisy samples on rank 1 only: alone, its precision would stop it later
            end = time.perf_counter() + rng.uniform(0, 0.004)
            while time.perf_counter() < end:
                pass
        dist.all_reduce(x)
        x.div_(2)

    gpuperf.measure(step)
"""


def test_a_step_with_collectives_is_called_equally_often_on_every_rank(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    """Each rank deciding alone when to stop sampling left the other waiting in all_reduce (a hang)."""
    pytester.makepyfile(test_lockstep=LOCKSTEP)
    result = pytester.runpytest("--gpuperf", "-v", *fast_args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*rank1.step: time*", "*imbalance*"])


REF_TEST = """
import pytest
import torch


@pytest.mark.gpuperf_distributed(world_size=2)
def test_ranks_measure(gpuperf, gpuperf_rank):
    x = torch.randn(32, 32)
    gpuperf.measure(lambda: x @ x, name="mm")
"""


def test_under_a_baseline_ref_the_ranks_plan_against_the_refs_entries_not_the_working_trees(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    import subprocess

    def git(*args: str) -> None:
        identity = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
        subprocess.run(["git", *identity, *args], cwd=pytester.path, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    pytester.makepyfile(test_ref=REF_TEST)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = sorted((pytester.path / "baselines").glob("*-ws2*.yaml"))
    git("add", "-A")
    git("commit", "-q", "-m", "baselines")
    # The working tree's copy is broken; the ref's is what judges this run, so it is also what the ranks must read.
    path.write_text("tests: [unclosed\n")
    result = pytester.runpytest(
        "--gpuperf", *fast_args, "-o", "gpuperf_cpu_time_tolerance=10", "--gpuperf-baseline-ref", "main"
    )
    result.assert_outcomes(passed=1)
    assert "raised" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*gpuperf baseline changes against main*", f"*{path.name}*unreadable*"])


RATED_SCRIPT = """
import os
from pathlib import Path

here = Path(__file__).parent
rates = [float(line) for line in (here / "rates.txt").read_text().split()]
count = here / "count.txt"
done = int(count.read_text()) if count.exists() else 0
count.write_text(str(done + 1))
print('GPUPERF {"rank": 0, "peak_memory": 1000, "tokens_per_s": %f}' % rates[min(done, len(rates) - 1)], flush=True)
"""

RATED_TESTS = """
def test_rated(gpuperf, gpuperf_torchrun):
    gpuperf_torchrun.run("rated.py", nproc_per_node=1)
"""
#: The rated script's launches: a stand-in for torchrun's launcher (what the plugin starts for each run of the script
#: is ``torchrun_command``'s). Every run is still fresh processes under the plugin's guard, with the ranks' variables;
#: only the launcher's own import of torch (~1.5 s of CPU, ten launches per test) is left out. These tests are about
#: how many runs are made and how they are judged; the real torchrun is launched by the fixture's test above and by
#: the rank pools.
LIGHT_LAUNCHER = """
import sys
from pathlib import Path

import pytest_gpuperf.distributed.torchrun as torchrun

LAUNCH = str(Path(__file__).with_name("launch.py"))


def pytest_configure(config):
    torchrun.torchrun_command = lambda nproc, *target: [sys.executable, LAUNCH, str(nproc), *target]
"""
LAUNCH = """
import os, subprocess, sys

nproc, target = int(sys.argv[1]), sys.argv[2:]
world = {"WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
ranks = [
    subprocess.Popen([sys.executable, *target], env={**os.environ, **world, "RANK": str(r), "LOCAL_RANK": str(r)})
    for r in range(nproc)
]
sys.exit(max(rank.wait() for rank in ranks))
"""


def test_a_script_baseline_comes_from_several_runs_and_a_slow_run_is_confirmed_by_another_before_failing(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    """Each script run is fresh processes: record from N runs; a suspect runs again, a disagreement is inconclusive."""
    pytester.makepyfile(rated=RATED_SCRIPT, test_rated=RATED_TESTS, conftest=LIGHT_LAUNCHER, launch=LAUNCH)

    def run(rates: str, *args: str) -> pytest.RunResult:
        (pytester.path / "rates.txt").write_text(rates)
        (pytester.path / "count.txt").unlink(missing_ok=True)
        result = pytester.runpytest("--gpuperf", *fast_args, *args)
        result.launches = int((pytester.path / "count.txt").read_text())  # type: ignore[attr-defined]
        return result

    recorded = run("100 104 98", "--gpuperf-update", "-o", "gpuperf_processes=3")
    recorded.assert_outcomes(passed=1)
    assert recorded.launches == 3
    [path] = sorted((pytester.path / "baselines").glob("*-ws1.yaml"))
    entry = yaml.safe_load(path.read_text())["tests"]["test_rated.py::test_rated[cpu]"]["rated.tokens_per_s"]
    assert entry["value"] == 100.0 and entry["processes"] == 3 and entry["process_spread"] > 0.05

    steady = run("101")
    steady.assert_outcomes(passed=1)
    assert steady.launches == 1  # nothing suspected: no second run

    disagreeing = run("50 100")
    disagreeing.assert_outcomes(passed=1)
    assert disagreeing.launches == 3  # a host-CPU suspect is run twice more (issue 35)
    disagreeing.stdout.fnmatch_lines(["*inconclusive*a second run of the script*"])

    # 10x: past anything the ranks' waiting on a loaded runner can explain (issue 35), so it fails under load too
    slow = run("10 10.2 10.1")
    slow.assert_outcomes(failed=1)
    assert slow.launches == 3
    slow.stdout.fnmatch_lines(["*rated: tokens per s*confirmed in a second run of the script*"])


def test_a_script_entry_recorded_from_one_run_is_rerecorded_from_n_runs_and_then_stays_put(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    """Issue 21 item 4: entries said 'processes: 1, process_spread: 0.0' though recorded from 3 runs."""
    pytester.makepyfile(rated=RATED_SCRIPT, test_rated=RATED_TESTS, conftest=LIGHT_LAUNCHER, launch=LAUNCH)
    node, name = "test_rated.py::test_rated[cpu]", "rated.tokens_per_s"

    def record(rates: str) -> pytest.RunResult:
        (pytester.path / "rates.txt").write_text(rates)
        (pytester.path / "count.txt").unlink(missing_ok=True)
        result = pytester.runpytest("--gpuperf-update", *fast_args, "-o", "gpuperf_processes=3")
        result.assert_outcomes(passed=1)
        return result

    record("100 130 98")
    [path] = sorted((pytester.path / "baselines").glob("*-ws1.yaml"))
    doc = yaml.safe_load(path.read_text())
    entry = doc["tests"][node][name]
    assert entry["processes"] == 3 and entry["process_spread"] == pytest.approx(130 / 98 - 1, abs=1e-3)
    entry.update(processes=1, process_spread=0.0)  # what an older recording left in the committed file
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    record("100 104 98").stdout.fnmatch_lines(["*rated.tokens_per_s*recorded from 3 processes (was 1)*"])
    entry = yaml.safe_load(path.read_text())["tests"][node][name]
    assert entry["processes"] == 3 and entry["process_spread"] == pytest.approx(104 / 98 - 1, abs=1e-3)
    before = path.read_text()
    record("101 99 103")  # the same code again: every entry within its tolerance stays, informational ones too
    assert path.read_text() == before
