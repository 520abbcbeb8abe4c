"""ncu on multi-kernel steps (issue 37): the child's choice of operations, the per-kernel table, the manifest's
facts, the kept ``--set full`` report and the clean stop of an ncu that hangs.

No GPU here: the choice runs on CPU tensors with a host clock, the tables parse real H200 captures
(``tests/data/ncu/``), and ``ncu`` is a shell script.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from pytest_gpuperf.procs.lifetime import process_alive
from pytest_gpuperf.profiling.ncu_capture import NcuUnavailable, capture_session, find_ncu, ncu_prefix
from pytest_gpuperf.profiling.ncu_parse import parse_raw
from pytest_gpuperf.profiling.ncu_select import Selection, choose, decide, rank_step, windowed_call
from pytest_gpuperf.profiling.ncu_table import markdown_of, step_table
from pytest_gpuperf.profiling.roofline import COMPUTE_BOUND, MEMORY_BOUND

DATA = Path(__file__).parent / "data" / "ncu"


def fake_ncu(folder: Path, body: str) -> Path:
    """An executable named ``ncu`` running ``body`` (a shell script)."""
    path = folder / "ncu"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_the_longest_operations_are_chosen_up_to_the_cap_or_the_coverage() -> None:
    durations = [1.0, 50.0, 2.0, 30.0, 10.0, 5.0, 2.0]  # 100 in all
    assert choose(durations, top_ops=2) == ([1, 3], pytest.approx(0.8))
    chosen, share = choose(durations, top_ops=10)  # 50 + 30 + 10 = 90%: the coverage stops it
    assert chosen == [1, 3, 4] and share == pytest.approx(0.9)
    names = [f"op{i}" for i in range(len(durations))]
    assert decide(names, durations, 100.0, top_ops=3).chosen == frozenset({1, 3, 4})
    small = decide(names, durations, 100.0, top_ops=7)  # no more operations than the cap: the whole step
    assert small.whole_step and "within the cap of 7" in small.reason
    assert decide(names, durations, 100.0, top_ops=0).whole_step
    hidden = decide(names, durations, 400.0, top_ops=3)  # the ops saw a quarter of the step: graph or Triton
    assert hidden.whole_step and "25%" in hidden.reason
    assert Selection(frozenset({1}), ("a", "b"), 0.8).facts() == {"ops": 2, "profiled_ops": 1, "op_share": 0.8}


def _step() -> object:
    """A small eager step of distinct ATen operations, the matmul far the longest."""
    a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))

    def step() -> torch.Tensor:
        b = a + 1
        c = b @ b
        return (c.relu() * 2).sum()

    return step


def test_the_ranking_call_sees_each_aten_operation_and_the_window_opens_only_around_the_chosen() -> None:
    step = _step()
    calls, now = [0], [0]

    def mark() -> int:  # a clock where the second operation (the matmul) takes 100 ticks and every other one 1
        index, calls[0] = calls[0], calls[0] + 1
        if index >= 1 and (index - 1) % 2 == 1:  # the mark after an operation
            now[0] += 100 if (index - 1) // 2 == 1 else 1
        return now[0]

    def seconds(a: int, b: int) -> float:
        return float(b - a)

    selection = rank_step(step, 1, mark, seconds, lambda: None)
    assert not selection.whole_step and selection.chosen == frozenset({1})
    assert "mm" in selection.names[1] and "add" in selection.names[0] and len(selection.names) >= 4
    events: list[str] = []
    differing = windowed_call(step, selection, lambda: events.append("start"), lambda: events.append("stop"))
    assert events == ["start", "stop"] and differing == 0


def test_a_ranking_call_that_fails_captures_the_whole_step() -> None:
    def broken() -> None:
        raise RuntimeError("not under a dispatch mode")

    selection = rank_step(broken, 2, time.perf_counter, lambda a, b: b - a, lambda: None)
    assert selection.whole_step and "RuntimeError: not under a dispatch mode" in selection.reason


def test_the_step_table_reads_real_ncu_rows_and_names_the_kernels_that_make_the_difference() -> None:
    kernels = parse_raw((DATA / "h200_linear_fp16_step_raw.csv").read_text())
    selection = {"ops": 40, "profiled_ops": 24, "op_share": 0.93}
    table = step_table("step", kernels, 300e-6, selection, MEMORY_BOUND)
    assert table.verdict.bound == COMPUTE_BOUND and table.kernels == 11
    assert sum(r.share for r in table.rows) == pytest.approx(1.0)
    assert [r.calls for r in table.rows][:2] == [2, 1]  # the two NNT GEMMs are one row
    assert table.rows[0].name.startswith("nvjet_sm90_hsh") and table.rows[0].bound == COMPUTE_BOUND
    assert table.covered_share == pytest.approx(201.6e-6 / 300e-6, rel=0.02)
    text = "\n".join(table.lines())
    assert "top 24 of 40 operations profiled (93% of their device time)" in text
    assert "step, weighted by kernel time: compute-bound" in text
    assert "ncu's compute-bound comes from: nvjet_sm90_hsh" in text and "analytic memory-bound: 16%" in text
    data = json.loads(json.dumps(table.as_dict("t.py::test_linear[cuda]")))  # the JSON report's entry
    assert data["bound"] == COMPUTE_BOUND and data["selection"] == selection and len(data["rows"]) == 6
    assert data["difference"][0].startswith("nvjet") and data["analytic_bound"] == MEMORY_BOUND
    markdown = markdown_of(data)
    assert markdown.count("\n| `") == 6 and "| compute-bound |" in markdown
    assert step_table("step", kernels, None, {}, COMPUTE_BOUND).difference_text() == ""


def _session_files(tmp_path: Path, facts: dict[str, object]) -> tuple[str, str]:
    """A session CSV of one window (the real large-matmul capture behind a marker) and its manifest line."""
    lines = [line for line in (DATA / "h200_large_matmul_step_raw.csv").read_text().splitlines() if line[:1] == '"']
    header, units, row = lines[0], lines[1], lines[2]
    name = header.split(",").index('"Kernel Name"')
    cells = row.split('","')
    cells[name] = "void at::cuda::<unnamed>::spin_kernel(long)"
    marker = '","'.join(cells)
    (tmp_path / "session.csv").write_text("\n".join([header, units, marker, row]) + "\n")
    entry = {"node_id": "t.py::test_mm[cuda]", "step": "step", "occurrence": 0, **facts}
    (tmp_path / "manifest.jsonl").write_text(json.dumps(entry) + "\n")
    return str(tmp_path / "session.csv"), str(tmp_path / "manifest.jsonl")


def test_what_the_child_chose_reaches_the_parents_capture(tmp_path: Path) -> None:
    csv_file, manifest = _session_files(tmp_path, {"ops": 312, "profiled_ops": 24, "op_share": 0.91})
    script = (
        f'cp {manifest} "$GPUPERF_NCU_MANIFEST"\nwhile [ "$1" != "--log-file" ]; do shift; done\ncp {csv_file} "$2"\n'
    )
    fake = fake_ncu(tmp_path, script)
    session = capture_session(str(fake), ["t.py::test_mm[cuda]"], "cuda", tmp_path, tmp_path / "out" / "s.csv")
    capture = session.capture("t.py::test_mm[cuda]", "step", 0)
    assert len(capture.kernels) == 1 and capture.report is None
    assert capture.selection == {"ops": 312, "profiled_ops": 24, "op_share": 0.91}


def test_the_full_report_is_asked_of_ncu_and_read_back_when_its_log_holds_no_rows(tmp_path: Path) -> None:
    report = tmp_path / "art" / "ncu-session.ncu-rep"
    command = ncu_prefix("ncu", tmp_path / "x.csv", report)
    assert command[1:6] == ["--set", "full", "--export", str(report), "--force-overwrite"]
    assert "--set" not in ncu_prefix("ncu", tmp_path / "x.csv")
    csv_file, manifest = _session_files(tmp_path, {"ops": 3, "whole_step": "3 operation(s), within the cap of 24"})
    script = (  # like ncu with --export: the rows go to the report; `ncu --import R --csv` prints them
        f'if [ "$1" = "--import" ]; then cat {csv_file}; exit 0; fi\n'
        f'cp {manifest} "$GPUPERF_NCU_MANIFEST"\nwhile [ "$1" != "--export" ]; do shift; done\necho report > "$2"\n'
    )
    fake = fake_ncu(tmp_path, script)
    session = capture_session(
        str(fake), ["t.py::test_mm[cuda]"], "cuda", tmp_path, tmp_path / "art" / "s.csv", full_report=report
    )
    capture = session.capture("t.py::test_mm[cuda]", "step", 0)
    assert capture.report == report and report.read_text() == "report\n"
    assert len(capture.kernels) == 1 and capture.selection["whole_step"].startswith("3 operation")


#: A fake ncu that hangs as a stuck capture does: it names its pids, starts a process that leaves its session
#: (as torchrun's ranks do) and ignores SIGTERM, says something, and sleeps.
HANGING_NCU = """
echo $$ > "{pids}/ncu"
setsid sh -c 'trap "" TERM; echo $$ > "{pids}/detached"; sleep 120' &
trap "" TERM
echo "==PROF== Connected to process 4242 (/usr/bin/python3)"
echo "==PROF== Profiling \\"nvjet_sm90_hsh_256x128\\" - 117: 0%....50%....100% - 9 passes"
sleep 120
"""


def test_a_hanging_ncu_on_path_is_skipped_inside_its_budget_and_nothing_of_it_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_ncu(bin_dir, HANGING_NCU.format(pids=pids))
    monkeypatch.delenv("GPUPERF_NCU", raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    ncu = find_ncu()
    assert ncu == str(bin_dir / "ncu")
    started = time.monotonic()
    with pytest.raises(NcuUnavailable) as raised:
        capture_session(ncu, ["t.py::a", "t.py::b"], "cuda", tmp_path, tmp_path / "y.csv", timeout=2.0)
    stopped = time.monotonic()
    assert stopped - started < 2.0 + 5.0  # the budget, then a stop within 5 s
    message = str(raised.value)
    assert "ran past its 2 s budget" in message and "gpuperf_ncu_timeout" in message
    assert 'Profiling "nvjet_sm90_hsh_256x128" - 117' in message  # ncu's own last words
    for name in ("ncu", "detached"):
        pid = int((pids / name).read_text())
        while process_alive(pid) and time.monotonic() < stopped + 5.0:
            time.sleep(0.1)
        assert not process_alive(pid), f"the {name} process {pid} outlived the skip by 5 s"


def test_a_measure_run_instead_by_a_feature_times_nothing_and_the_ncu_child_leaves_cpu_steps_alone(
    tmp_path: Path,
) -> None:
    """In the ncu child ``measure()`` is the capture window (``pytest_gpuperf_measure_instead``): the core's
    measuring loop never runs there; a step on another backend than CUDA is left to the core."""
    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.context import build_context
    from pytest_gpuperf.fixture import GpuPerf
    from pytest_gpuperf.profiling.ncu_child import NcuChildExtension

    context = build_context("t.py::test_x[cpu]", get_backend("cpu"), {})
    asked: list[str] = []

    def instead(test: object, step: object, name: str) -> bool:
        asked.append(name)
        return True

    calls: list[int] = []
    handle = GpuPerf(context, judging=object(), instead=instead)  # type: ignore[arg-type]
    measured = handle.measure(lambda: calls.append(1), name="fwd")
    assert asked == ["fwd"] and calls == [] and measured.smoke and measured.metrics == {}
    child = NcuChildExtension(tmp_path / "windows.jsonl", top_ops=24)
    assert child.pytest_gpuperf_measure_instead(context, lambda: None, "fwd") is None
    assert not (tmp_path / "windows.jsonl").exists()


def test_the_tables_reach_the_json_report_and_the_markdown_summary() -> None:
    from types import SimpleNamespace

    from pytest_gpuperf.profiling.plugin import _ncu_section, pytest_gpuperf_report_sections
    from pytest_gpuperf.profiling.records import NCU_PAYLOAD, PROFILE_KEY, StepProfile

    kernels = parse_raw((DATA / "h200_layernorm_softmax_step_raw.csv").read_text())
    table = step_table("step", kernels, 200e-6, {"ops": 2, "whole_step": "2 operation(s), within the cap of 24"})
    record = StepProfile("step", ncu_tables=[table.as_dict("t.py::test_norm[cuda]")])
    item = SimpleNamespace(stash={PROFILE_KEY: [record]})
    (section,) = pytest_gpuperf_report_sections(item)  # type: ignore[arg-type,misc]
    tables = section.payload[NCU_PAYLOAD]
    assert tables[0]["nodeid"] == "t.py::test_norm[cuda]" and tables[0]["kernels"] == 2
    (summary,) = _ncu_section(tables)  # type: ignore[misc]
    assert summary.json == {"ncu": tables}
    assert "### Nsight Compute: kernels of each step" in summary.markdown
    assert "every kernel profiled: 2 operation(s), within the cap of 24" in summary.markdown
    assert _ncu_section([]) is None


def test_the_ncu_child_runs_its_distributed_tests_after_every_single_process_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from pytest_gpuperf.profiling.ncu_child import GATE_ENV, NcuChildExtension

    monkeypatch.delenv(GATE_ENV, raising=False)

    def item(name: str, distributed: bool) -> SimpleNamespace:
        marker = object() if distributed else None
        return SimpleNamespace(
            nodeid=f"t.py::{name}", path=tmp_path / "t.py", get_closest_marker=lambda _name, m=marker: m
        )

    items = [item("fsdp", True), item("linear", False), item("ranks", True), item("minillm", False)]
    session = SimpleNamespace(items=list(items))
    NcuChildExtension(tmp_path / "windows.jsonl", top_ops=8).pytest_collection_finish(session)  # type: ignore[arg-type]
    assert [i.nodeid.split("::")[1] for i in session.items] == ["linear", "minillm", "fsdp", "ranks"]
