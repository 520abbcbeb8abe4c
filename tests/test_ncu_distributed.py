"""A distributed test's step under ``--gpuperf-ncu`` (issue 37): rank 0 opens the step's capture window in the ncu
child, the other ranks make the same calls, and the parent adds ncu's class and per-kernel table to the test.

No GPU here: the rank's side runs on CPU tensors with the CUDA calls replaced, the parent's side parses a real H200
capture (``tests/data/ncu/``) that a shell-script ``ncu`` hands over, and the budget test stops real gloo ranks.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_gpuperf.procs.lifetime import process_alive
from pytest_gpuperf.profiling import ncu_child
from pytest_gpuperf.profiling.ncu_capture import NcuUnavailable, start_session
from pytest_gpuperf.profiling.ncu_select import NO_OPERATION, decide, rank_step, windowed_call
from pytest_gpuperf.profiling.roofline import COMPUTE_BOUND
from pytest_gpuperf.results import KIND_CUSTOM, KIND_TIME, Metric
from tests.test_ncu_steps import DATA, fake_ncu

NODE = "t.py::test_fsdp2_step[cuda]"


def _cuda_context(node_id: str = NODE) -> Any:
    """What a rank's window reads of its test: the node id and a backend named cuda."""
    return SimpleNamespace(node_id=node_id, backend=SimpleNamespace(name="cuda", synchronize=lambda: None))


def test_rank_zero_opens_the_window_under_the_childs_name_and_the_other_ranks_make_the_same_calls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    window = pickle.loads(pickle.dumps(ncu_child.RankWindow(str(tmp_path / "w.jsonl"), "/abs/t.py::x[cuda]", 24)))
    opened: list[tuple[Any, ...]] = []
    monkeypatch.setattr(ncu_child, "capture_window", lambda *args: opened.append(args[3:7]))
    calls: list[int] = []
    for rank, world in ((0, 1), (0, 2), (1, 2)):
        monkeypatch.setattr(ncu_child, "_rank_and_world", lambda r=rank, w=world: (r, w))
        assert window(_cuda_context(), lambda r=rank: calls.append(r), f"step{world}") is True
    key, test, top_ops = (NODE, "step1", 0), "/abs/t.py::x[cuda]", 24
    assert opened == [(key, test, top_ops, False), ((NODE, "step2", 0), test, top_ops, True)]  # peers: rank 0 of 2
    assert calls == [1] * ncu_child.WINDOW_CALLS  # rank 1 made the window's calls, nothing profiled
    cpu = SimpleNamespace(node_id=NODE, backend=SimpleNamespace(name="cpu"))
    assert window(cpu, lambda: calls.append(9), "step") is False and 9 not in calls  # measured as usual


def test_a_capture_window_calls_the_step_as_often_as_a_following_rank(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every rank must enter each collective equally often: rank 0's window is :data:`WINDOW_CALLS` calls."""
    profiler: list[str] = []
    fake_cudart = SimpleNamespace(
        cudaProfilerStart=lambda: profiler.append("start"), cudaProfilerStop=lambda: profiler.append("stop")
    )
    monkeypatch.setattr(torch.cuda, "cudart", lambda: fake_cudart)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: profiler.append("marker"))
    monkeypatch.setattr(ncu_child, "_event", time.perf_counter)
    monkeypatch.setattr(ncu_child, "_event_seconds", lambda a, b: b - a)
    a = torch.randn(64, 64)
    calls: list[int] = []

    def step() -> object:
        calls.append(1)
        return (a @ a).relu().sum()

    manifest = tmp_path / "w.jsonl"
    backend = SimpleNamespace(name="cuda", synchronize=lambda: None)
    ncu_child.capture_window(backend, step, manifest, (NODE, "step", 0), "/abs/t.py::x", 24, peers=True)  # type: ignore[arg-type]
    assert len(calls) == ncu_child.WINDOW_CALLS and profiler[:2] == ["start", "marker"]
    entry = json.loads(manifest.read_text())
    assert entry["test"] == "/abs/t.py::x" and entry["step"] == "step" and entry["ops"] >= 3


def test_on_several_ranks_the_window_leaves_the_collectives_out() -> None:
    names = ["aten.mm.default", "c10d._allgather_base_.default", "aten.add.Tensor", "_c10d_functional.wait.default"]
    durations = [50.0, 30.0, 10.0, 10.0]
    collectives = frozenset({1, 3})
    within = decide(names, durations, 100.0, top_ops=24, skip=collectives)  # within the cap: every other op
    assert within.chosen == frozenset({0, 2}) and within.share == pytest.approx(0.6)
    assert within.facts() == {"ops": 4, "profiled_ops": 2, "op_share": 0.6, "collectives_left_out": 2}
    capped = decide(names, durations, 100.0, top_ops=1, skip=collectives)
    assert capped.chosen == frozenset({0}) and capped.share == pytest.approx(0.5)
    only = decide(names[1::2], durations[1::2], 40.0, top_ops=24, skip=frozenset({0, 1}))
    assert only.chosen == NO_OPERATION and only.facts()["profiled_ops"] == 0
    events: list[str] = []
    x = torch.ones(4)
    windowed_call(lambda: (x + 1) * 2, only, lambda: events.append("start"), lambda: events.append("stop"))
    assert events == []  # nothing profiled, rather than a collective's kernel replayed without its peers

    def broken() -> None:
        raise RuntimeError("not under a dispatch mode")

    alone = rank_step(broken, 24, time.perf_counter, lambda a, b: b - a, lambda: None)
    assert alone.whole_step  # one process: the whole step, as before
    peers = rank_step(broken, 24, time.perf_counter, lambda a, b: b - a, lambda: None, peers=True)
    assert peers.chosen == NO_OPERATION and "RuntimeError" in str(peers.facts()["nothing_profiled"])


def test_each_process_is_cut_at_its_own_markers_whatever_order_ncu_lists_the_processes_in() -> None:
    """ncu may list the rank's kernels before the child's though the child's first window opened first."""
    from pytest_gpuperf.profiling.ncu_capture import split_windows
    from pytest_gpuperf.profiling.ncu_parse import KernelRecord, parse_raw

    assert {k.process for k in parse_raw((DATA / "h200_linear_fp16_step_raw.csv").read_text())} == {"1222"}

    def kernel(name: str, process: str) -> KernelRecord:
        return KernelRecord(0, name, 1e-6, 50.0, 50.0, 10.0, process=process)

    marker = "void at::cuda::<unnamed>::spin_kernel(long)"
    listed = [kernel(marker, "20"), kernel("rank_gemm", "20"), kernel(marker, "10"), kernel("first", "10")]
    listed += [kernel(marker, "10"), kernel("third", "10")]
    manifest = [("a", "step", 0), ("fsdp", "step", 0), ("c", "step", 0)]
    windows = split_windows(listed, manifest, [10, 20, 10])
    assert {key: [k.name for k in found] for key, found in windows.items()} == {
        ("a", "step", 0): ["first"],
        ("fsdp", "step", 0): ["rank_gemm"],
        ("c", "step", 0): ["third"],
    }
    in_list_order = split_windows(listed, manifest)  # without the processes: the list's order, as before
    assert [k.name for k in in_list_order[("a", "step", 0)]] == ["rank_gemm"]


def _one_window_session(tmp_path: Path, csv_name: str, node_id: str, facts: dict[str, object]) -> tuple[Path, Path]:
    """A session CSV holding one window (a real capture behind a marker row) and its manifest line."""
    lines = [line for line in (DATA / csv_name).read_text().splitlines() if line[:1] == '"']
    header, units, rows = lines[0], lines[1], lines[2:]
    cells = rows[0].split('","')
    cells[header.split(",").index('"Kernel Name"')] = "void at::cuda::<unnamed>::spin_kernel(long)"
    csv_file, manifest = tmp_path / "session.csv", tmp_path / "manifest.jsonl"
    csv_file.write_text("\n".join([header, units, '","'.join(cells), *rows]) + "\n")
    manifest.write_text(json.dumps({"node_id": node_id, "step": "step", "occurrence": 0, **facts}) + "\n")
    return csv_file, manifest


def _extension(tmp_path: Path, ncu: bool = True) -> Any:
    from pytest_gpuperf.profiling.extension import ProfilingExtension, ProfilingSettings

    settings = ProfilingSettings(False, ncu, tmp_path / "art", None, 60.0, tmp_path, False)
    return ProfilingExtension(settings, roofs=None)  # type: ignore[arg-type]


def test_the_parent_adds_ncu_class_and_table_to_the_step_its_ranks_measured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pytest_gpuperf.profiling.records import PROFILE_KEY

    facts = {"ops": 612, "profiled_ops": 24, "op_share": 0.92, "window_s": 41.0, "pid": 1222}
    csv_file, manifest = _one_window_session(tmp_path, "h200_linear_fp16_step_raw.csv", NODE, facts)
    script = f'cp {manifest} "$GPUPERF_NCU_MANIFEST"\nwhile [ "$1" != "--log-file" ]; do shift; done\n'
    script += f'cp {csv_file} "$2"\n'
    monkeypatch.setenv("GPUPERF_NCU", str(fake_ncu(tmp_path, script)))
    extension = _extension(tmp_path)
    extension.select_ncu_tests({NODE: NODE})
    item = SimpleNamespace(nodeid=NODE, stash={}, get_closest_marker=lambda name: None)
    metrics = extension.pytest_gpuperf_after_world(item, _cuda_context(), {"step": 300e-6})
    bound = {m.name: m for m in metrics}["step.ncu_bound"]
    assert bound.value == COMPUTE_BOUND and bound.extra["profiled_ops"] == 24 and bound.extra["window_s"] == 41.0
    (record,) = item.stash[PROFILE_KEY]
    assert record.step == "step" and "over 11 kernel(s)" in record.verdicts[0]
    text = record.text()
    assert "top 24 of 612 operations profiled (92% of their device time)" in text
    (table,) = record.ncu_tables
    assert table["nodeid"] == NODE and table["bound"] == COMPUTE_BOUND and table["rows"]
    assert "pid" not in table["selection"]  # the window's process serves the cut, not the report
    assert _extension(tmp_path, ncu=False).pytest_gpuperf_after_world(item, _cuda_context(), {"step": 1.0}) == []


class _Judging:
    """What ``conclude`` asks of the judging service: a tolerance, a judgement; it keeps what was stored."""

    def __init__(self) -> None:
        self.stored: list[Any] = []

    def tolerance(self, *args: Any) -> None:
        return None

    def judge(self, context: Any, metrics: list[Metric]) -> list[Metric]:
        return metrics

    def store(self, context: Any, verdicts: list[Metric]) -> None:
        self.stored += verdicts


def test_the_world_hook_gets_each_step_with_the_slowest_ranks_time_and_its_metrics_are_judged() -> None:
    from pytest_gpuperf.distributed.runner import DistSpec, conclude
    from pytest_gpuperf.distributed.tasks import STATUS_OK, RankResult

    results = {r: RankResult(rank=r, status=STATUS_OK) for r in range(2)}
    for r, result in results.items():
        result.metrics = [Metric("fwd.time", 0.010 * (r + 1), "s", "lower", KIND_TIME)]
    asked: list[dict[str, Any]] = []

    def after_world(**kwargs: Any) -> list[list[Metric] | None]:
        asked.append(kwargs)
        return [[Metric("fwd.extra", 1.0, "", "equal", KIND_CUSTOM)], None]

    judging = _Judging()
    handle = SimpleNamespace(judging=judging, context=SimpleNamespace(in_world=lambda n: f"world of {n}"), metrics=[])
    item = SimpleNamespace(
        funcargs={"gpuperf": handle},
        stash={},
        add_report_section=lambda *args: None,
        config=SimpleNamespace(hook=SimpleNamespace(pytest_gpuperf_after_world=after_world)),
    )
    conclude(item, DistSpec(2, "cpu", 60.0), results, None)  # type: ignore[arg-type]
    assert asked == [{"item": item, "context": "world of 2", "steps": {"fwd": pytest.approx(0.020)}}]
    assert "fwd.extra" in {m.name for m in judging.stored} and "fwd.imbalance" in {m.name for m in judging.stored}
    smoke = SimpleNamespace(judging=None, context=None)
    item.funcargs["gpuperf"] = smoke
    conclude(item, DistSpec(2, "cpu", 60.0), results, None)  # type: ignore[arg-type]
    assert len(asked) == 1  # nothing is measured, so nothing is added, in smoke mode


#: A distributed test whose rank hangs in the ncu child: it names its pid, then waits for good.
HANGING_RANK_TEST = """
import os, time
from pathlib import Path
import pytest

@pytest.mark.gpuperf_distributed(world_size=1)
def test_rank_hangs(gpuperf, gpuperf_rank):
    window = gpuperf._instead  # what the child's task sent: its stand-in for measuring, here rank 0's window
    Path({pids!r}, "window").write_text(f"{{type(window).__name__}} {{window.test}} {{window.manifest}}")
    Path({pids!r}, "rank0").write_text(str(os.getpid()))
    print("rank 0 is stuck in its window", flush=True)
    time.sleep(300)
"""
#: A fake ``ncu`` that runs the child command it is given (its own options end at ``--log-file X``).
PASS_THROUGH_NCU = 'while [ "$1" != "--log-file" ]; do shift; done\nshift 2\nexec "$@"\n'


@pytest.mark.e2e
def test_a_rank_that_hangs_under_ncu_is_stopped_with_the_session_and_nothing_of_it_is_left(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_gpuperf

    here = str(Path(pytest_gpuperf.__file__).parents[1])  # the child and its ranks import this checkout's plugin
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])]))
    pids = tmp_path / "pids"
    pids.mkdir()
    pytester.makepyfile(test_hang=HANGING_RANK_TEST.format(pids=str(pids)))
    fake = fake_ncu(tmp_path, PASS_THROUGH_NCU)
    pending = start_session(str(fake), ["test_hang.py::test_rank_hangs"], "cpu", pytester.path, tmp_path / "s.csv")
    rank_pid = pids / "rank0"
    for _ in range(6000):  # the child's and the rank's start-up (python, torch, torchrun) on a loaded machine
        if rank_pid.exists() or pending.proc.poll() is not None:  # type: ignore[union-attr]
            break
        time.sleep(0.1)
    assert rank_pid.exists(), "the child's rank never started"
    kind, test, manifest = (pids / "window").read_text().split()
    assert kind == "RankWindow" and test == f"{pytester.path / 'test_hang.py'}::test_rank_hangs[cpu]"
    assert manifest == str(pending.path("windows.jsonl"))
    started = time.monotonic()
    with pytest.raises(NcuUnavailable, match="ran past its 1 s budget") as raised:
        pending.finish(1.0)
    assert time.monotonic() - started < 1.0 + 5.0
    assert "windows captured: none" in str(raised.value)
    pid = int(rank_pid.read_text())
    while process_alive(pid) and time.monotonic() < started + 6.0:
        time.sleep(0.1)
    assert not process_alive(pid), f"the rank {pid} outlived the stopped ncu session by 5 s"
    assert not os.path.exists(pending.scratch)
