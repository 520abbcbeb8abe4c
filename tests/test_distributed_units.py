"""Unit tests of the distributed feature's pieces: script lines, per-rank aggregation, env, fault text, pool state."""

from __future__ import annotations

import pytest

from pytest_gpuperf.distributed.aggregate import aggregate
from pytest_gpuperf.distributed.env import SAFE_ENV, outer_launch, process_env, resolve_world_size, world_size_problem
from pytest_gpuperf.distributed.faults import describe_failure, skip_reason
from pytest_gpuperf.distributed.pool import PoolOutcome
from pytest_gpuperf.distributed.script_lines import ScriptLineError, format_line, parse_line, parse_output
from pytest_gpuperf.distributed.tasks import RankResult
from pytest_gpuperf.distributed.torchrun import script_metrics
from pytest_gpuperf.results import KIND_MEMORY, KIND_THROUGHPUT, KIND_TIME, Metric


def test_a_gpuperf_line_round_trips_and_keeps_unknown_fields_as_extra() -> None:
    line = format_line(rank=1, peak_memory=2048, tokens_per_s=512.5, step_times=[0.5, 0.25], loss=3.2)
    report = parse_line("[rank1]:" + line)
    assert report is not None
    assert (report.rank, report.peak_memory, report.tokens_per_s) == (1, 2048.0, 512.5)
    assert report.step_times == [0.5, 0.25]
    assert report.extra == {"loss": 3.2}


def test_lines_without_the_prefix_are_ignored_and_bad_json_names_the_problem() -> None:
    assert parse_line("Step 0 | Loss: 1.0") is None
    with pytest.raises(ScriptLineError, match="not valid JSON"):
        parse_line('GPUPERF {"rank": 0, ')
    with pytest.raises(ScriptLineError, match="integer 'rank'"):
        parse_line('GPUPERF {"peak_memory": 1}')


def test_the_seeds_human_readable_lines_give_rank0_peak_in_bytes() -> None:
    text = "noise\nStep 0 | Loss: 10.3721 | Peak VRAM/GPU: 1.52 GB\nStep 1 | Loss: 9.9 | Peak VRAM/GPU: 1.61 GB\n"
    report = parse_output(text)
    assert [line.step for line in report.seed_lines] == [0, 1]
    assert report.seed_peak_bytes == pytest.approx(1.61e9)
    [metric] = script_metrics(report, "train")
    assert (metric.name, metric.kind, metric.value) == ("rank0.train.peak_memory", KIND_MEMORY, pytest.approx(1.61e9))


def test_script_metrics_judge_the_slowest_ranks_tokens_per_second_with_its_step_samples() -> None:
    text = "\n".join(
        [
            format_line(rank=0, peak_memory=100, tokens_per_s=1000.0, step_times=[0.1, 0.1, 0.1], tokens_per_step=100),
            format_line(
                rank=1, peak_memory=120, tokens_per_s=800.0, step_times=[0.125, 0.125, 0.125], tokens_per_step=100
            ),
        ]
    )
    metrics = {m.name: m for m in script_metrics(parse_output(text), "train", imbalance_tolerance=0.3)}
    assert metrics["rank1.train.peak_memory"].value == 120
    assert not metrics["rank0.train.tokens_per_s"].judged
    world = metrics["train.tokens_per_s"]
    assert (world.value, world.kind, world.extra["rank"]) == (800.0, KIND_THROUGHPUT, 1)
    assert world.samples == pytest.approx([800.0, 800.0, 800.0])
    assert metrics["train.imbalance"].value == pytest.approx(1.25)
    assert metrics["train.imbalance"].tolerance == 0.3


def _rank_metrics(time_s: float, peak: int) -> list[Metric]:
    return [
        Metric("step.time", time_s, "s", "lower", KIND_TIME, samples=[time_s] * 3, judged=False),
        Metric("step.throughput", 64 / time_s, "tokens/s", "higher", KIND_THROUGHPUT, samples=[64 / time_s] * 3),
        Metric("step.peak_memory", peak, "B", "lower", KIND_MEMORY),
    ]


def test_aggregate_names_metrics_per_rank_and_takes_the_slowest_rank_for_the_world() -> None:
    metrics = {m.name: m for m in aggregate({0: _rank_metrics(0.2, 1000), 1: _rank_metrics(0.25, 1100)})}
    assert metrics["rank1.step.peak_memory"].judged and metrics["rank1.step.peak_memory"].value == 1100
    assert not metrics["rank0.step.throughput"].judged, "per-rank throughput is informational"
    assert metrics["step.throughput"].value == pytest.approx(256.0)
    assert metrics["step.throughput"].extra["rank"] == 1
    assert not metrics["step.time"].judged, "time stays unjudged when throughput is judged"
    assert metrics["step.imbalance"].value == pytest.approx(1.25)
    assert metrics["step.imbalance"].extra == {"slowest_rank": 1, "fastest_rank": 0}


def test_every_started_process_gets_the_nvls_switches_and_loses_an_outer_launchs_rank() -> None:
    env = process_env({"X": "1"}, base={"RANK": "3", "WORLD_SIZE": "8", "MASTER_PORT": "1", "PATH": "/bin"})
    assert {k: env[k] for k in SAFE_ENV} == {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }
    assert "RANK" not in env and "MASTER_PORT" not in env and env["X"] == "1" and env["PATH"] == "/bin"


def test_outer_launches_are_read_from_torchrun_or_slurm_but_never_from_our_own_workers() -> None:
    assert outer_launch({}) is None
    launch = outer_launch({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert launch is not None and (launch.rank, launch.world_size, launch.source) == (1, 4, "torchrun")
    slurm = outer_launch({"SLURM_PROCID": "2", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0"})
    assert slurm is not None and (slurm.rank, slurm.local_rank, slurm.world_size) == (2, 0, 8)
    assert outer_launch({"RANK": "0", "WORLD_SIZE": "2", "GPUPERF_POOL_WORKER": "1"}) is None


def test_world_size_per_backend_and_the_skip_reason_when_gpus_are_missing() -> None:
    assert resolve_world_size({"cpu": 2, "cuda": "all"}, "cpu") == 2
    assert resolve_world_size(3, "cpu") == 3
    assert resolve_world_size({"cuda": "all"}, "cuda", outer=16) == 16
    with pytest.raises(ValueError, match="no entry for backend 'mps'"):
        resolve_world_size({"cpu": 2}, "mps")
    assert world_size_problem("cpu", 2) is None
    import torch

    reason = world_size_problem("cuda", torch.cuda.device_count() + 1)
    assert reason is not None and "one per rank" in reason and "this machine has" in reason
    assert "not on backend 'mps'" in (world_size_problem("mps", 1) or "")


def test_failure_text_carries_the_failed_ranks_traceback_the_hung_ranks_stacks_and_oom_peaks() -> None:
    results = {
        0: RankResult(0, "ok"),
        1: RankResult(1, "error", traceback="Traceback ...\nValueError: boom on rank 1"),
        2: RankResult(2, "oom", traceback="RuntimeError: can't allocate memory", memory={"peak_rss": 3 * 2**30}),
    }
    text = describe_failure(
        "t.py::test_x", 4, results, hung=[3], stacks={3: 'File "t.py", line 9 in test_x'}, timeout=5
    )
    assert text is not None
    assert "rank 1 of 4 raised:" in text and "ValueError: boom on rank 1" in text
    assert "rank 2 of 4 ran out of memory" in text and "peak RSS of the rank process: 3.00 GiB" in text
    assert "did not finish within 5 s" in text and 'File "t.py", line 9 in test_x' in text
    assert describe_failure("t.py::test_x", 2, {0: RankResult(0, "ok"), 1: RankResult(1, "ok")}) is None


def test_pool_outcome_is_broken_by_any_fault_or_a_dirty_rank_but_not_by_skips() -> None:
    assert not PoolOutcome(results={0: RankResult(0, "ok"), 1: RankResult(1, "skip")}).broken
    assert PoolOutcome(results={0: RankResult(0, "error")}).broken
    assert PoolOutcome(results={0: RankResult(0, "ok", dirty="default group destroyed")}).broken
    assert PoolOutcome(hung=[1]).broken and PoolOutcome(died=[0]).broken
    assert skip_reason({0: RankResult(0, "skip", traceback="no data"), 1: RankResult(1, "skip")}) == "no data"
    assert skip_reason({0: RankResult(0, "skip"), 1: RankResult(1, "ok")}) is None


def test_lockstep_config_replaces_every_clock_decision_by_a_count_all_ranks_share() -> None:
    from pytest_gpuperf.distributed.lockstep import lockstep_config
    from pytest_gpuperf.timing import MeasureConfig

    base = MeasureConfig(max_time=1.0, min_samples=10, max_samples=200, warmup_time=0.05, cpu_clock="auto")
    config = lockstep_config(base, seconds_per_call=0.04)
    assert (config.warmup_time, config.max_time, config.cpu_clock, config.cuda_graph) == (
        0.0,
        float("inf"),
        "wall",
        "off",
    )
    assert config.max_samples == 25  # the 1 s budget at 40 ms per call
    assert lockstep_config(base, seconds_per_call=0.5).max_samples == 10  # never fewer than min_samples
    assert lockstep_config(base, seconds_per_call=1e-6).max_samples == 200  # short steps: max_samples, as before


def test_agree_max_outside_a_process_group_is_the_rank_s_own_value() -> None:
    from pytest_gpuperf.distributed.lockstep import agree_max

    assert agree_max(0.25, "cpu") == 0.25


def test_a_lockstep_backends_samples_are_the_slowest_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sample agreed: a rank timing its own samples decided alone when they were precise enough (a hang)."""
    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.distributed import lockstep
    from pytest_gpuperf.distributed.lockstep import LockstepBackend, lockstep_config
    from pytest_gpuperf.timing import MeasureConfig

    agreed: list[float] = []
    monkeypatch.setattr(lockstep, "agree_max", lambda value, device: agreed.append(value) or 2.0)
    sampler = LockstepBackend(get_backend("cpu")).sampler(lockstep_config(MeasureConfig(), seconds_per_call=0.001))
    assert sampler.time_calls(lambda: None, 3) == 2.0 and len(agreed) == 1  # type: ignore[attr-defined]


def test_a_ranks_handle_is_the_cores_own_on_a_lockstep_backend_with_agreed_settings() -> None:
    """No subclass of the core's handle: a plain ``GpuPerf`` with a lockstep backend and a settings hook."""
    import math

    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.context import build_context
    from pytest_gpuperf.distributed.lockstep import LockstepBackend, lockstep_handle
    from pytest_gpuperf.fixture import GpuPerf
    from pytest_gpuperf.timing import MeasureConfig

    handle = lockstep_handle(build_context("t.py::test", get_backend("cpu"), {}, 2), None)
    assert type(handle) is GpuPerf
    assert isinstance(handle.backend, LockstepBackend) and handle.backend.name == "cpu"
    calls: list[int] = []
    assert handle.adjust_config is not None
    config = handle.adjust_config(MeasureConfig(max_time=1.0, min_samples=5), lambda: calls.append(1))
    assert len(calls) == 2, "two calls timed before planning"
    assert (math.isinf(config.max_time), config.cpu_clock, config.cuda_graph, config.warmup_time) == (
        True,
        "wall",
        "off",
        0.0,
    )
    assert GpuPerf.adjust_config is None, "the core's own handles keep their settings"


class _FakePool:
    def __init__(self, backend: str, alive: bool = True) -> None:
        self.backend, self.alive, self.closed = backend, alive, []  # type: ignore[var-annotated]

    def close(self, graceful: bool = True) -> None:
        self.closed.append(graceful)
        self.alive = False


def test_replica_workers_are_picked_new_to_the_test_dead_ones_dropped_and_extra_ones_stopped() -> None:
    from pytest_gpuperf.distributed.replicate import ReplicaPool, _Worker
    from pytest_gpuperf.distributed.tasks import RankTask

    dead, ran_it, fresh, other = (_FakePool("cpu", alive=False), _FakePool("cpu"), _FakePool("cpu"), _FakePool("cuda"))
    replicas = ReplicaPool(
        workers=[_Worker(dead), _Worker(ran_it, {"t.py::a"}), _Worker(other), _Worker(fresh)]  # type: ignore[arg-type]
    )
    task = RankTask("t.py::a", "t", "t.py", "a", "cpu")
    assert replicas._fresh_worker(task).pool is fresh
    assert dead.closed == [False] and [w.pool for w in replicas.workers] == [ran_it, other, fresh]
    replicas._keep["cpu"] = 1
    replicas._trim("cpu")
    assert ran_it.closed == [True] and [w.pool for w in replicas.workers] == [other, fresh]


def test_two_ranks_reports_glued_onto_one_line_are_both_read() -> None:
    """torchrun's per-rank output can arrive without a newline between two ranks' writes."""
    glued = format_line(rank=1, peak_memory=1001, tokens_per_s=51.0) + format_line(
        rank=0, peak_memory=1000, tokens_per_s=50.0
    )
    report = parse_output("[default1]:" + glued + "\n")
    assert sorted(report.ranks) == [0, 1]
    assert report.ranks[1].peak_memory == 1001
    assert report.ranks[0].tokens_per_s == 50.0


def test_a_fixture_holding_the_tests_own_unpicklable_device_travels_as_a_placeholder() -> None:
    import threading
    from types import SimpleNamespace

    from pytest_gpuperf.distributed.runner import TaskError, task_for
    from pytest_gpuperf.distributed.tasks import ThisDevice

    device = threading.Lock()  # stands for a Vulkan device: it does not pickle
    handle = SimpleNamespace(device=device, judging=None)
    item = SimpleNamespace(
        nodeid="t.py::test_x[vulkan]",
        _fixtureinfo=SimpleNamespace(argnames=("gpuperf", "dev", "size")),
        funcargs={"gpuperf": handle, "dev": device, "size": 4},
        get_closest_marker=lambda name: None,
        module=SimpleNamespace(__name__="t", __file__="t.py"),
        function=SimpleNamespace(__qualname__="test_x"),
        cls=None,
    )
    task = task_for(item, "vulkan", None, lockstep=False)  # type: ignore[arg-type]
    assert isinstance(task.kwargs["dev"], ThisDevice) and task.kwargs["size"] == 4
    item.funcargs["other"] = threading.Lock()  # an unpicklable value that is not the device is still refused
    item._fixtureinfo.argnames = ("gpuperf", "dev", "other")
    with pytest.raises(TaskError, match="argument 'other'"):
        task_for(item, "vulkan", None, lockstep=False)  # type: ignore[arg-type]


def test_a_scripts_rank_imbalance_on_host_cpu_ranks_is_shown_not_judged() -> None:
    # Host-CPU ranks share their cores with each other, the launcher and every other job on the runner: a busy
    # 2-core VM read an unchanged script's imbalance 1.01x -> 1.33x. GPU ranks keep the judged imbalance.
    from types import SimpleNamespace

    from pytest_gpuperf.distributed.torchrun import TorchrunRunner

    text = "\n".join(
        format_line(rank=r, peak_memory=100, tokens_per_s=rate, step_times=[0.1, 0.1], tokens_per_step=100)
        for r, rate in ((0, 1000.0), (1, 750.0))
    )

    def imbalance(host_cpu: bool) -> bool:
        backend = SimpleNamespace(is_host_cpu=lambda: host_cpu)
        handle = SimpleNamespace(context=SimpleNamespace(backend=backend), judging=None)
        runner = TorchrunRunner(SimpleNamespace(), handle, "cpu" if host_cpu else "cuda", 60.0)  # type: ignore[arg-type]
        metrics = {m.name: m for m in runner._metrics(parse_output(text), "train", {})}
        return metrics["train.imbalance"].judged

    assert imbalance(host_cpu=True) is False
    assert imbalance(host_cpu=False) is True
