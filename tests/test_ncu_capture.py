"""The ncu session capture: command lines, skip paths, and the attribution of windows to tests.

ncu is absent here: a fake ``ncu`` prints ncu's real errors, or writes a session CSV built from real H200
captures (``tests/data/ncu/``) with marker kernels between the windows, and the manifest the child writes.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.profiling.ncu_capture import (
    ENV_MANIFEST,
    NcuUnavailable,
    capture_session,
    child_manifest,
    child_pytest_args,
    find_ncu,
    ncu_prefix,
    ncu_test_key,
    split_windows,
)
from pytest_gpuperf.profiling.ncu_parse import SOL_METRICS, NcuParseError, parse_raw
from pytest_gpuperf.profiling.ncu_sol_rules import classify_kernels
from pytest_gpuperf.profiling.ncu_verdict import disagreement, which_to_believe
from pytest_gpuperf.profiling.roofline import COMPUTE_BOUND, LATENCY_BOUND, MEMORY_BOUND, Roofs, classify

DATA = Path(__file__).parent / "data" / "ncu"
MARKER = "void at::cuda::<unnamed>::spin_kernel(long)"

#: What ncu 2025.3 prints when the driver restricts the performance counters to admin users.
PERMISSION_ERROR = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on "
    "the target device 0. For instructions on enabling permissions and to get more information see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


def fake_ncu(folder: Path, body: str) -> Path:
    """An executable named ``ncu`` running ``body`` (a shell script)."""
    path = folder / "ncu"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_the_ncu_command_profiles_only_the_region_with_real_clocks(tmp_path: Path) -> None:
    command = ncu_prefix("ncu", tmp_path / "x.csv")
    text = " ".join(command)
    assert "--profile-from-start off" in text
    assert "--clock-control none" in text
    assert "--csv --page raw --print-units base" in text
    assert command[command.index("--metrics") + 1] == ",".join(SOL_METRICS)
    assert command[command.index("--log-file") + 1] == str(tmp_path / "x.csv")


def test_ncu_is_found_through_gpuperf_ncu_or_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPERF_NCU", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert find_ncu() is None
    fake = fake_ncu(tmp_path, "exit 0\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_ncu() == str(fake)
    monkeypatch.setenv("GPUPERF_NCU", str(tmp_path / "missing"))
    assert find_ncu() is None


def test_a_counter_permission_error_becomes_the_skip_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_ncu(tmp_path, f"echo '==PROF== Connected to process 4242'\necho '{PERMISSION_ERROR}'\nexit 1\n")
    with pytest.raises(NcuUnavailable, match="ncu cannot read GPU counters here: ==ERROR== ERR_NVGPUCTRPERM"):
        capture_session(str(fake), ["test_x.py::test_y[cuda]"], "cuda", tmp_path, tmp_path / "a" / "y.csv")


def test_a_library_load_failure_written_to_the_log_file_is_found(tmp_path: Path) -> None:
    # ncu writes its own messages to --log-file; the fake does the same with the text ncu prints
    script = (
        'while [ "$1" != "--log-file" ]; do shift; done\n'
        'echo "==ERROR== Failed to load library: LibraryNotLoaded (libnvperf_host.so)" > "$2"\nexit 1\n'
    )
    fake = fake_ncu(tmp_path, script)
    with pytest.raises(NcuUnavailable, match="LibraryNotLoaded"):
        capture_session(str(fake), ["test_x.py::test_y[cuda]"], "cuda", tmp_path, tmp_path / "y.csv")


def test_a_region_without_kernels_is_reported_not_parsed(tmp_path: Path) -> None:
    fake = fake_ncu(tmp_path, "echo '==WARNING== No kernels were profiled.'\nexit 0\n")
    with pytest.raises(NcuUnavailable, match=r"profiled no kernels"):
        capture_session(str(fake), ["test_x.py::test_y[cuda]"], "cuda", tmp_path, tmp_path / "y.csv")


def test_a_timeout_names_the_option_to_raise(tmp_path: Path) -> None:
    fake = fake_ncu(tmp_path, "sleep 5\n")
    with pytest.raises(NcuUnavailable, match="gpuperf_ncu_timeout"):
        capture_session(str(fake), ["t.py::t"], "cuda", tmp_path, tmp_path / "y.csv", timeout=0.5)


def test_an_overrun_session_is_stopped_inside_its_budget_with_ncus_last_words(tmp_path: Path) -> None:
    """The budget is the whole session's; the message quotes what ncu said last; nothing of the child is left."""
    import time

    from pytest_gpuperf.procs.lifetime import process_alive as alive

    fake = fake_ncu(tmp_path, "echo '==PROF== Connected to process 4242'\necho $$ > child.pid\nsleep 60\n")
    started = time.monotonic()
    with pytest.raises(NcuUnavailable) as raised:
        capture_session(str(fake), ["t.py::a", "t.py::b"], "cuda", tmp_path, tmp_path / "y.csv", timeout=1.0)
    assert time.monotonic() - started < 30  # 1 s budget for both tests (not per test), then a bounded stop
    message = str(raised.value)
    assert "2 test(s) ran past its 1 s budget" in message and "gpuperf_ncu_timeout" in message
    assert "==PROF== Connected to process 4242" in message
    pid_file = next(tmp_path.rglob("child.pid"), None)
    if pid_file is not None:
        deadline = time.monotonic() + 5
        while alive(int(pid_file.read_text())) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(int(pid_file.read_text()))


def test_the_child_gets_its_manifest_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_MANIFEST, raising=False)
    assert child_manifest() is None
    monkeypatch.setenv(ENV_MANIFEST, str(tmp_path / "w.jsonl"))
    assert child_manifest() == tmp_path / "w.jsonl"


def session_csv() -> tuple[str, list[dict[str, object]]]:
    """A session CSV from the real Linear fp16 capture: three windows (11 kernels, none, 1), opened by markers."""
    lines = [line for line in (DATA / "h200_linear_fp16_step_raw.csv").read_text().splitlines() if line.startswith('"')]
    header, units, rows = lines[0], lines[1], lines[2:]
    name_column = next(csv.reader([header])).index("Kernel Name")
    marker_cells = next(csv.reader([rows[2]]))
    marker_cells[name_column] = MARKER
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerow(marker_cells)
    marker = out.getvalue().strip()
    body = [marker, *rows, marker, marker, rows[0]]
    manifest = [
        {"node_id": "t.py::test_linear[cuda]", "step": "step", "occurrence": 0},
        {"node_id": "t.py::test_empty[cuda]", "step": "step", "occurrence": 0},
        {"node_id": "t.py::test_linear[cuda]", "step": "step", "occurrence": 1},
    ]
    return "\n".join(["==PROF== Connected to process 1", header, units, *body]), manifest


def test_windows_are_cut_at_the_markers_and_given_to_the_manifest_entries_in_order() -> None:
    text, manifest = session_csv()
    kernels = parse_raw(text)
    keys = [(str(m["node_id"]), str(m["step"]), int(m["occurrence"])) for m in manifest]  # type: ignore[call-overload]
    windows = split_windows(kernels, keys)
    assert [len(windows[k]) for k in keys] == [11, 0, 1]
    assert all("spin_kernel" not in k.name for w in windows.values() for k in w)
    assert sum(k.duration_s for k in windows[keys[0]]) == pytest.approx(201.6e-6, rel=0.02)
    with pytest.raises(NcuParseError, match=r"3 window.* but the child recorded 2"):
        split_windows(kernels, keys[:2])
    with pytest.raises(NcuParseError, match="before any window marker"):
        split_windows(kernels[1:], keys)


def test_one_ncu_child_captures_every_test_of_the_session(tmp_path: Path) -> None:
    text, manifest = session_csv()
    (tmp_path / "session.csv").write_text(text)
    (tmp_path / "manifest.jsonl").write_text("".join(json.dumps(m) + "\n" for m in manifest))
    calls = tmp_path / "calls"
    script = (
        f'echo "$@" >> {calls}\n'
        f'cp {tmp_path / "manifest.jsonl"} "${ENV_MANIFEST}"\n'
        'while [ "$1" != "--log-file" ]; do shift; done\n'
        f'cp {tmp_path / "session.csv"} "$2"\n'
    )
    fake = fake_ncu(tmp_path, script)
    ids = ["t.py::test_linear[cuda]", "t.py::test_empty[cuda]"]
    session = capture_session(str(fake), ids, "cuda", tmp_path, tmp_path / "out" / "ncu-session.ncu.csv")
    assert len(calls.read_text().splitlines()) == 1  # one ncu process for the whole session
    assert " ".join(ids) in calls.read_text()
    linear = session.capture("t.py::test_linear[cuda]", "step", 0)
    assert len(linear.kernels) == 11 and linear.csv_path.exists()
    assert session.cost_per_test == pytest.approx(session.wall_s / 2)
    assert session.capture("t.py::test_empty[cuda]", "step", 0).kernels == []
    assert len(session.capture("t.py::test_linear[cuda]", "step", 1).kernels) == 1
    with pytest.raises(NcuUnavailable, match=r"captured no window for t\.py::test_other"):
        session.capture("t.py::test_other[cuda]", "step", 0)


H200 = Roofs(781e12, 4.25e12, "bfloat16", "h200")


def test_a_disagreement_says_which_verdict_to_believe() -> None:
    kernels = parse_raw((DATA / "h200_layernorm_softmax_step_raw.csv").read_text())
    sol = classify_kernels(kernels)
    assert sol.bound == COMPUTE_BOUND  # SM 77% on both kernels
    tensor = 16384 * 4096 * 2
    line = classify(0, 4 * tensor, 180e-6, H200)  # no FLOPs counted: the bandwidth side (70% of the roof)
    assert line.bound == MEMORY_BOUND
    assert "no FLOPs counted" in line.explain() and "measure(flops=...)" in line.explain()  # not a real 0 FLOP/s
    assert "no FLOPs counted" not in classify(2 * 8192**3, 3 * 8192**2 * 2, 1.4e-3, H200).explain()

    class Capture:
        pass

    capture = Capture()
    capture.kernels = kernels  # type: ignore[attr-defined]
    text = disagreement(line, sol, capture)  # type: ignore[arg-type]
    assert text.startswith("analytic memory-bound but ncu compute-bound: believe the ncu verdict")
    assert "no FLOPs" in text
    gaps = classify(0, 4 * tensor, 10e-3, H200)  # the same kernels inside a 10 ms step: mostly gaps
    assert gaps.bound == LATENCY_BOUND
    who, why = which_to_believe(gaps, sol, sum(k.duration_s for k in kernels))
    assert who == "analytic" and "gaps between kernels" in why
    assert (
        disagreement(
            classify(2 * 8192**3, 3 * 8192**2 * 2, 1.4e-3, H200),
            classify_kernels(parse_raw((DATA / "h200_large_matmul_step_raw.csv").read_text())),
            capture,
        )
        == ""
    )  # type: ignore[arg-type]


def test_the_child_command_is_a_valid_short_gpuperf_run(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(
        test_child="""
        import torch

        def test_child(gpuperf):
            x = torch.randn(32, generator=torch.Generator().manual_seed(0))
            m = gpuperf.measure(lambda: x * 2)
            assert m.metrics and gpuperf.enabled
        """
    )
    args = child_pytest_args(["test_child.py::test_child[cpu]"], "cpu", tmp_path / "baselines", xdist=True)
    done = subprocess.run(args, cwd=pytester.path, capture_output=True, text=True, timeout=300, check=False)
    assert args[:3] == [sys.executable, "-m", "pytest"]
    assert "1 passed" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / "baselines").exists()  # the child never writes baselines


def _extension(tmp_path: Path, node_ids: list[str], worker: bool = False) -> object:
    from pytest_gpuperf.profiling.extension import ProfilingExtension, ProfilingSettings

    settings = ProfilingSettings(
        profile=False,
        ncu=True,
        artifacts_dir=tmp_path,
        latency_share=0.3,
        ncu_timeout=60.0,
        rootdir=tmp_path,
        xdist=True,
        xdist_worker=worker,
    )
    extension = ProfilingExtension(settings, None)  # type: ignore[arg-type]
    extension.ncu_node_ids = node_ids
    return extension


def test_the_session_starts_one_ncu_child_for_all_its_ncu_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gpuperf.profiling.ncu_capture import SessionCapture

    calls: list[list[str]] = []

    def fake_capture(ncu: str, node_ids: list[str], *args: object, **kwargs: object) -> SessionCapture:
        calls.append(list(node_ids))
        return SessionCapture({(n, "step", 0): [] for n in node_ids}, tmp_path / "x.csv", 10.0, [ncu], list(node_ids))

    monkeypatch.setattr("pytest_gpuperf.profiling.ncu_capture.capture_session", fake_capture)
    ids = ["t.py::test_a[cuda]", "t.py::test_b[cuda]", "t.py::test_c[cuda]"]
    ext = _extension(tmp_path, ids)
    for node_id in ids:
        assert ext._session_capture("ncu", node_id).capture(node_id, "step", 0).wall_s == pytest.approx(10 / 3)  # type: ignore[attr-defined]
    assert calls == [ids]
    worker = _extension(tmp_path, ids, worker=True)  # an xdist worker does not know its share of the tests
    worker._session_capture("ncu", ids[0])  # type: ignore[attr-defined]
    assert calls[-1] == [ids[0]]


def test_an_unavailable_ncu_is_asked_once_per_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def refusing(ncu: str, node_ids: list[str], *args: object, **kwargs: object) -> None:
        calls.append(list(node_ids))
        raise NcuUnavailable("ncu cannot read GPU counters here: ERR_NVGPUCTRPERM")

    monkeypatch.setattr("pytest_gpuperf.profiling.ncu_capture.capture_session", refusing)
    ids = ["t.py::test_a[cuda]", "t.py::test_b[cuda]"]
    ext = _extension(tmp_path, ids)
    for node_id in ids:
        with pytest.raises(NcuUnavailable, match="ERR_NVGPUCTRPERM"):
            ext._session_capture("ncu", node_id)  # type: ignore[attr-defined]
    assert calls == [ids]


def test_only_the_cuda_instances_of_perf_tests_join_the_ncu_session() -> None:
    from types import SimpleNamespace

    from pytest_gpuperf.profiling.plugin import _runs_on_cuda

    def item(backend: str | None) -> object:
        callspec = SimpleNamespace(params={"gpuperf_backend": backend}) if backend else None
        return SimpleNamespace(callspec=callspec, nodeid=f"t.py::test_x[{backend}]")

    assert _runs_on_cuda(item("cuda"))  # type: ignore[arg-type]
    assert not _runs_on_cuda(item("cpu"))  # type: ignore[arg-type]
    assert not _runs_on_cuda(item(None))  # type: ignore[arg-type]


USER_FILE = """
import pytest
import torch

OPS = {}  # a module-level cache of the ops, filled at import


def op(name):
    def register(fn):
        OPS[name] = fn
        return fn
    return register


@op("add")
def _add(x):
    return x + x


@op("mul")
def _mul(x):
    return x * x


@op("tanh")
def _tanh(x):
    return torch.tanh(x)


@op("exp")
def _exp(x):
    return torch.exp(x)


@op("relu")
def _relu(x):
    return torch.relu(x)


@op("abs")
def _abs(x):
    return torch.abs(x)


@pytest.mark.parametrize("name", sorted(OPS))
def test_op(gpuperf, name):
    x = torch.randn(256, generator=torch.Generator().manual_seed(0))
    gpuperf.measure(lambda: OPS[name](x))
"""


def _collected(args: list[str], cwd: Path) -> list[str]:
    """Node ids that ``args`` (a pytest command) collects, run with ``--collect-only -q`` in ``cwd``."""
    done = subprocess.run(
        [*args, "--collect-only", *([] if "-q" in args else ["-q"])],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return [line for line in done.stdout.splitlines() if "::" in line and not line.startswith(" ")]


@pytest.mark.e2e
def test_the_child_collects_a_user_files_parametrized_k_selected_tests_under_the_parents_ids(tmp_path: Path) -> None:
    """Issue 22: a user's file outside the rootdir's package, ids with parameters, selected by -k, run with the
    rootdir of a repository given on the command line; the ncu child must collect exactly the parent's tests
    under the parent's node ids (its capture windows are named by them)."""
    repo, user = tmp_path / "repo", tmp_path / "elsewhere" / "ops"
    repo.mkdir()
    user.mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\nmarkers = ["slowish: a marker"]\n')
    (user / "test_user_ops.py").write_text(USER_FILE)
    parent = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "--gpuperf"]
    parent += ["--gpuperf-backend", "cpu", f"--rootdir={repo}", "-c", str(repo / "pyproject.toml")]
    selection = [str(user / "test_user_ops.py"), "-k", "add or mul or tanh or exp or relu"]
    ids = _collected([*parent, *selection], tmp_path)
    assert len(ids) == 5 and all(i.endswith("-cpu]") and "::test_op[" in i for i in ids), ids
    parent_args = parent[3:] + selection
    # before: the child ran in the rootdir, selecting by node id; a file outside the rootdir has an empty path
    # part in its node id (pytest 9: "::test_op[add-cpu]"), so the child's run reached none of its tests
    old = child_pytest_args(ids, "cpu", tmp_path / "baselines", False)
    assert _collected(old, repo) != ids
    keys = [ncu_test_key(user / "test_user_ops.py", i) for i in ids]
    assert all(k.startswith(str(user / "test_user_ops.py") + "::test_op[") for k in keys)
    child = child_pytest_args(keys, "cpu", tmp_path / "b", False, repo, repo / "pyproject.toml", parent_args)
    assert _collected(child, tmp_path) == ids  # from where the parent was started: the same tests, the same ids
    assert "-k" not in child and "--gpuperf-backend" in child  # the child selects by test, never by -k


def test_windows_are_found_by_the_file_whatever_rootdir_each_side_had(tmp_path: Path) -> None:
    """The child records each window under ncu_test_key (absolute file path + the rest of the id): a parent whose
    rootdir differs from the child's finds it, a parametrized id included."""
    from pytest_gpuperf.profiling.ncu_capture import SessionCapture

    path = tmp_path / "elsewhere" / "ops" / "test_user_ops.py"
    parent_id = "::test_op[relu-cuda]"  # the parent's id of a file outside its rootdir
    child_id = "ops/test_user_ops.py::test_op[relu-cuda]"  # the same test in a child with another rootdir
    assert ncu_test_key(path, parent_id) == ncu_test_key(path, child_id) == f"{path}::test_op[relu-cuda]"
    session = SessionCapture({(ncu_test_key(path, child_id), "step", 0): []}, tmp_path / "s.csv", 1.0, [])
    session.keys, session.tests = {parent_id: ncu_test_key(path, parent_id)}, [parent_id]
    assert session.capture(parent_id, "step", 0).kernels == []
    with pytest.raises(NcuUnavailable, match=r"windows recorded: .*test_op\[relu-cuda\] step 'step'"):
        session.capture(parent_id, "other", 0)


def test_the_parents_plugin_and_ini_options_reach_the_child() -> None:
    from pytest_gpuperf.profiling.ncu_capture import forwarded_options

    args = ["-p", "myplug", "-pother", "-o", "a=b", "--import-mode=importlib", "--confcutdir", "x", "-k", "add"]
    args += ["--noconftest", "-v", "tests/test_x.py", "--override-ini=c=d"]
    assert forwarded_options(args) == [
        "-p", "myplug", "-pother", "-o", "a=b", "--import-mode=importlib", "--confcutdir", "x", "--noconftest",
        "--override-ini=c=d",
    ]  # fmt: skip


def test_a_gated_child_waits_for_go_or_stop_and_for_a_parent_that_is_still_there(tmp_path: Path) -> None:
    from pytest_gpuperf.profiling.ncu_capture import wait_for_gate

    gate = tmp_path / "gate"
    gate.write_text("go")
    assert wait_for_gate(gate, os.getpid()) is True
    gate.write_text("stop")
    assert wait_for_gate(gate, os.getpid()) is False
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert wait_for_gate(tmp_path / "never-opened", gone.pid) is False  # the parent died: do not wait forever


#: A fake ``ncu`` that runs the child command it is given, as ncu does (its own options end at ``--log-file X``).
PASS_THROUGH_NCU = 'while [ "$1" != "--log-file" ]; do shift; done\nshift 2\nexec "$@"\n'
#: The child's tests: each marks that it ran; the conftest marks that the child collected them (the hook before
#: ``pytest_collection_finish``, where the child waits). The conftest imports torch when it is imported, so the
#: import the child's gate makes before it waits is already done when "collected" appears: from then on the child
#: is at its gate, and the test times the gate, not a torch import on a loaded machine.
GATED_CHILD_TESTS = """
from pathlib import Path

def test_a():
    Path("ran_a").write_text("ran")
"""
GATED_CHILD_CONFTEST = """
from pathlib import Path

import torch  # noqa: F401

def pytest_collection_modifyitems(items):
    Path("collected").write_text("yes")
"""


def _gated_child(pytester: pytest.Pytester, tmp_path: Path) -> tuple[object, Path]:
    from pytest_gpuperf.profiling.ncu_capture import start_session

    pytester.makepyfile(test_child=GATED_CHILD_TESTS, conftest=GATED_CHILD_CONFTEST)
    fake = fake_ncu(tmp_path, PASS_THROUGH_NCU)
    pending = start_session(
        str(fake), ["test_child.py::test_a"], "cpu", pytester.path, tmp_path / "out" / "s.csv", gated=True
    )
    collected = pytester.path / "collected"
    for _ in range(6000):  # the child's start-up (python, torch, pytest) on a loaded machine: up to 10 minutes
        if collected.exists() or pending.proc.poll() is not None:  # type: ignore[attr-defined]
            break
        time.sleep(0.1)
    assert collected.exists(), "the child never finished collecting"
    return pending, pytester.path / "ran_a"


@pytest.mark.e2e
def test_a_prestarted_ncu_child_collects_then_runs_nothing_until_released(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pending, ran = _gated_child(pytester, tmp_path)
    time.sleep(1.0)  # time to run the test, if the gate let it through
    assert pending.proc.poll() is None and not ran.exists()  # type: ignore[attr-defined]
    with pytest.raises(NcuUnavailable, match=r"profiled no kernels|no usable CSV"):  # the CPU child opens no window
        pending.finish(600)  # type: ignore[attr-defined]
    assert ran.read_text() == "ran"  # released: the child ran its test


@pytest.mark.e2e
def test_a_prestarted_ncu_child_that_no_test_released_leaves_without_running_its_tests(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session waits 5 s for a told child before killing it; a loaded 2-core machine can need longer for the
    # child's interpreter to leave, and what is checked here is that it leaves by itself.
    monkeypatch.setattr("pytest_gpuperf.profiling.ncu_capture.DISCARD_WAIT_SECONDS", 120.0)
    pending, ran = _gated_child(pytester, tmp_path)
    pending.discard()  # type: ignore[attr-defined]
    assert pending.proc.returncode == 0 and not ran.exists()  # type: ignore[attr-defined]
