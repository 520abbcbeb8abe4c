"""The ncu window's kernel cap and the session's budget (issue 37): the choice of operations under the cap, the
child's stop before the deadline, the windows kept from a CSV after an overrun, and an overrunning fake ncu whose
session ends inside budget + 5 s with its captured windows classified and nothing of it left.

No GPU here: kernel counts and device times are injected, clocks are injected, CSVs are real H200 captures
(``tests/data/ncu/``) and ``ncu`` is a shell script.
"""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pytest_gpuperf.procs.lifetime import process_alive
from pytest_gpuperf.profiling.ncu_budget import NOT_CAPTURED, Budget, read_deadline, write_deadline
from pytest_gpuperf.profiling.ncu_capture import NcuUnavailable, capture_session
from pytest_gpuperf.profiling.ncu_kernels import kernels_of, multi_tensor_launches, pick_within_cap
from pytest_gpuperf.profiling.ncu_parse import parse_raw
from pytest_gpuperf.profiling.ncu_select import NO_OPERATION, Caps, decide
from pytest_gpuperf.profiling.ncu_table import step_table
from pytest_gpuperf.profiling.ncu_windows import parse_session, split_windows
from pytest_gpuperf.profiling.roofline import COMPUTE_BOUND
from tests.test_ncu_steps import DATA, fake_ncu

MARKER = "void at::cuda::<unnamed>::spin_kernel(long)"


def test_the_longest_operations_are_taken_while_their_kernels_fit_the_cap() -> None:
    durations = [5.0, 40.0, 30.0, 20.0, 5.0]  # 100 in all
    kernels = [1, 32, 40, 1, 1]  # two optimizer-like operations of many kernels
    chosen, share, count = pick_within_cap(durations, kernels, 64, 8, 1.0)
    assert chosen == [0, 1, 3, 4] and count == 35 and share == pytest.approx(0.7)  # the 40-kernel op passed over
    assert pick_within_cap(durations, kernels, 0, 8, 1.0)[2] == 75  # no cap: every operation
    assert pick_within_cap(durations, kernels, 64, 2, 1.0)[0] == [1, 3]  # the operation cap still holds
    names = [f"aten.op{i}" for i in range(5)]
    capped = decide(names, durations, 100.0, Caps(8, 64, tuple(kernels)))
    assert not capped.whole_step and capped.kernels == 35 and capped.chosen == frozenset({0, 1, 3, 4})
    assert capped.facts()["expected_kernels"] == 35 and capped.facts()["max_kernels"] == 64
    small = decide(names, durations, 100.0, Caps(8, 100, tuple(kernels)))  # 75 kernels fit: the whole step
    assert small.whole_step and small.kernels == 75
    none_fit = decide(names[:2], [1.0, 2.0], 3.0, Caps(1, 16, (20, 30)))
    assert none_fit.chosen == NO_OPERATION and "cap of 16 kernels" in none_fit.reason


def test_a_multi_tensor_operation_counts_a_kernel_per_group_of_tensors() -> None:
    assert multi_tensor_launches([10] * 110, depth=1) == 1
    assert multi_tensor_launches([10] * 111, depth=1) == 2
    assert multi_tensor_launches([10] * 100, depth=4) == 3  # 36 tensors per launch at depth 4
    assert multi_tensor_launches([65536 * 320], depth=1) == 1  # one tensor filling the blocks of a launch
    assert multi_tensor_launches([65536 * 321], depth=1) == 2
    params = [torch.zeros(8) for _ in range(100)]
    assert kernels_of("aten._foreach_mul_.Scalar", (params, 0.9)) == 1
    lists = ([torch.zeros(8)] * 100, [torch.zeros(8)] * 100, [torch.zeros(8)] * 100, [torch.zeros(8)] * 100)
    assert kernels_of("aten._fused_adamw_.default", lists) == 3
    assert kernels_of("aten.mm.default", (torch.zeros(2, 2), torch.zeros(2, 2))) == 1


def test_the_child_stops_before_the_deadline_and_skips_a_window_that_would_not_fit(tmp_path: Path) -> None:
    now = [1000.0]
    budget = Budget(1030.0, 30.0, clock=lambda: now[0])
    assert budget.stop_reason() == "" and budget.window_reason(10) == ""  # 30 s left, 1 + 10 x 0.5 s needed
    assert budget.window_reason(60).startswith(NOT_CAPTURED) and "60 kernel(s)" in budget.window_reason(60)
    budget.learn(21.0, 10)  # 2 s per kernel seen
    assert budget.seconds_per_kernel() == pytest.approx(2.0) and budget.window_reason(13) != ""
    now[0] = 1026.0  # 4 s left: below the margin
    stop = budget.stop_reason()
    assert stop.startswith(NOT_CAPTURED) and "4 s of the session's 30 s budget" in stop
    assert Budget(None).stop_reason() == "" and Budget(None).window_reason(10**6) == ""
    write_deadline(tmp_path, 1234.5, 30.0)
    assert read_deadline(tmp_path) == (1234.5, 30.0) and Budget.of(tmp_path).deadline == 1234.5
    assert Budget.of(tmp_path / "absent").deadline is None


def test_a_child_out_of_budget_lists_the_window_as_not_captured_and_stops_its_session(tmp_path: Path) -> None:
    from pytest_gpuperf.profiling.ncu_child import NcuChildExtension

    child = NcuChildExtension(tmp_path / "windows.jsonl", top_ops=8, max_kernels=64)
    child.budget = Budget(time.time() + 1.0, 30.0)  # less than the margin left
    child._session = SimpleNamespace(shouldstop=False)  # type: ignore[assignment]
    context = SimpleNamespace(node_id="t.py::test_a[cuda]", backend=SimpleNamespace(name="cuda"))
    calls: list[int] = []
    with pytest.raises(pytest.skip.Exception, match="not captured: budget"):
        child.pytest_gpuperf_measure_instead(context, lambda: calls.append(1), "step")  # type: ignore[arg-type]
    assert calls == [] and str(child._session.shouldstop).startswith(NOT_CAPTURED)  # type: ignore[union-attr]
    entry = json.loads((tmp_path / "windows.jsonl").read_text())
    assert entry["node_id"] == "t.py::test_a[cuda]" and entry["not_captured"].startswith(NOT_CAPTURED)


def _rows(name: str) -> tuple[str, str, list[str]]:
    lines = [line for line in (DATA / name).read_text().splitlines() if line.startswith('"')]
    return lines[0], lines[1], lines[2:]


def _marker(header: str, row: str) -> str:
    cells = next(csv.reader([row]))
    cells[next(csv.reader([header])).index("Kernel Name")] = MARKER
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="").writerow(cells)
    return out.getvalue()


def interrupted_csv() -> str:
    """A session CSV as ncu writes it when the child was interrupted in its third window: two whole windows (the
    real large-matmul and Linear captures), then a third opened and cut short."""
    header, units, matmul = _rows("h200_large_matmul_step_raw.csv")
    _, _, linear = _rows("h200_linear_fp16_step_raw.csv")
    marker = _marker(header, matmul[0])
    return "\n".join([header, units, marker, *matmul, marker, *linear, marker, linear[0]]) + "\n"


KEYS = [("t.py::test_mm[cuda]", "step", 0), ("t.py::test_linear[cuda]", "step", 0)]


def test_after_an_overrun_the_windows_ncu_wrote_in_full_keep_their_kernels(tmp_path: Path) -> None:
    kernels = parse_raw(interrupted_csv())
    kept = split_windows(kernels, KEYS, partial=True)  # the third window: no manifest line, cut short
    assert [len(kept[k]) for k in KEYS] == [1, 11]
    assert step_table("step", kept[KEYS[0]]).verdict.bound == COMPUTE_BOUND
    cut = split_windows(kernels[:-12], [*KEYS, ("t.py::test_c[cuda]", "step", 0)], partial=True)
    assert list(cut) == [KEYS[0]]  # the CSV stops inside the second window: only the first is whole
    (tmp_path / "s.csv").write_text(interrupted_csv())
    session = parse_session(tmp_path / "s.csv", "", KEYS, 10.0, ["ncu"], ["a", "b"], partial=True)
    assert len(session.capture(*KEYS[1]).kernels) == 11


#: A fake ncu that behaves as ncu does around a child that overruns: the child (a Python process) names its pid,
#: lists two windows and works until interrupted; ncu writes its CSV only once the child has ended, and leaves.
OVERRUNNING_NCU = """
while [ "$1" != "--log-file" ]; do shift; done
log="$2"
scratch=$(dirname "$GPUPERF_NCU_MANIFEST")
echo $$ > {pids}/ncu
echo "==PROF== Connected to process (python)"
{python} -c '
import os, signal, sys, time
from pathlib import Path
scratch = Path(sys.argv[1])
(scratch / "child.pid").write_text(str(os.getpid()))
Path(sys.argv[2], "child").write_text(str(os.getpid()))
Path(sys.argv[3]).write_text(Path(sys.argv[4]).read_text())
try:
    time.sleep(300)
except KeyboardInterrupt:
    print("!!! KeyboardInterrupt !!!", flush=True)
' "$scratch" {pids} "$GPUPERF_NCU_MANIFEST" {manifest}
echo '==PROF== Disconnected from process'
cp {csv} "$log"
"""


@pytest.mark.e2e
def test_an_overrunning_session_ends_inside_its_budget_and_keeps_the_windows_it_captured(tmp_path: Path) -> None:
    import sys

    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "session.csv").write_text(interrupted_csv())
    (tmp_path / "manifest.jsonl").write_text(
        "".join(json.dumps({"node_id": k[0], "step": k[1], "occurrence": k[2]}) + "\n" for k in KEYS)
    )
    script = OVERRUNNING_NCU.format(
        pids=pids, python=sys.executable, manifest=tmp_path / "manifest.jsonl", csv=tmp_path / "session.csv"
    )
    fake = fake_ncu(tmp_path, script)
    ids = [k[0] for k in KEYS] + ["t.py::test_never[cuda]"]
    budget = 8.0  # the child's start-up on a loaded machine fits well inside it; the child then works for 300 s
    started = time.monotonic()
    session = capture_session(str(fake), ids, "cuda", tmp_path, tmp_path / "out" / "s.csv", timeout=budget)
    ended = time.monotonic()
    assert ended - started < budget + 5.0
    assert (pids / "child").exists(), "the fake child never started inside the budget"
    matmul, linear = session.capture(*KEYS[0]), session.capture(*KEYS[1])
    assert len(matmul.kernels) == 1 and len(linear.kernels) == 11
    assert step_table("step", matmul.kernels).verdict.bound == COMPUTE_BOUND
    with pytest.raises(NcuUnavailable) as missing:
        session.capture("t.py::test_never[cuda]", "step", 0)
    message = str(missing.value)
    assert "ran past its 8 s budget" in message and "gpuperf_ncu_timeout" in message
    assert "Disconnected from process" in message  # ncu's last words
    for name in ("ncu", "child"):
        pid = int((pids / name).read_text())
        while process_alive(pid) and time.monotonic() < ended + 5.0:
            time.sleep(0.1)
        assert not process_alive(pid), f"the {name} process {pid} outlived the session by 5 s"


def test_a_child_that_stopped_for_the_budget_keeps_its_windows_and_names_the_budget_for_the_rest(
    tmp_path: Path,
) -> None:
    header, units, matmul = _rows("h200_large_matmul_step_raw.csv")
    (tmp_path / "session.csv").write_text("\n".join([header, units, _marker(header, matmul[0]), *matmul]) + "\n")
    stop = f"{NOT_CAPTURED} (the ncu child stopped opening windows with 3 s of the session's 30 s budget left)"
    lines = [
        {"node_id": KEYS[0][0], "step": "step", "occurrence": 0, "ops": 1},
        {"node_id": KEYS[1][0], "step": "step", "occurrence": 0, "not_captured": stop},
    ]
    (tmp_path / "manifest.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    script = (
        f'cp {tmp_path / "manifest.jsonl"} "$GPUPERF_NCU_MANIFEST"\n'
        f'while [ "$1" != "--log-file" ]; do shift; done\ncp {tmp_path / "session.csv"} "$2"\n'
    )
    ids = [KEYS[0][0], KEYS[1][0], "t.py::test_never[cuda]"]
    session = capture_session(str(fake_ncu(tmp_path, script)), ids, "cuda", tmp_path, tmp_path / "o" / "s.csv")
    assert len(session.capture(*KEYS[0]).kernels) == 1
    with pytest.raises(NcuUnavailable, match=r"^not captured: budget \(the ncu child stopped"):
        session.capture(*KEYS[1])
    with pytest.raises(NcuUnavailable, match=r"^not captured: budget .*; windows recorded: .*test_mm"):
        session.capture("t.py::test_never[cuda]", "step", 0)


def test_ncu_follows_child_processes_only_for_distributed_tests(tmp_path: Path) -> None:
    from pytest_gpuperf.profiling.ncu_command import ncu_prefix

    def target(command: list[str]) -> str:
        return command[command.index("--target-processes") + 1]

    assert target(ncu_prefix("ncu", tmp_path / "x.csv")) == "application-only"
    assert target(ncu_prefix("ncu", tmp_path / "x.csv", all_processes=True)) == "all"
