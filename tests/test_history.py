"""``gpuperf history``: change points, drift and creep over a scratch repository's baseline commits.

The series are written by the tests (seeded noise), so every assertion is about deterministic quantities.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_gpuperf.history.analysis import Finding, analyse
from pytest_gpuperf.history.changepoints import find_change_points
from pytest_gpuperf.history.cli import main
from pytest_gpuperf.history.series import Point, Series

TEST_ID = "perf_tests/test_x.py::test_step[cuda]"


def _noisy(n: int, seed: int, noise: float = 0.03) -> np.ndarray:
    return 1.0 + noise * np.random.default_rng(seed).standard_normal(n)


def test_a_flat_series_has_no_change_point() -> None:
    assert find_change_points(_noisy(24, seed=3)) == []


def test_a_large_step_is_found_where_it_is() -> None:
    values = _noisy(12, seed=4)
    values[6:] *= 1.3
    (point,) = find_change_points(values)
    assert point.index == 6
    assert point.earliest <= 6 <= point.latest
    assert point.change == pytest.approx(0.3, abs=0.06)
    assert point.p_value < 0.001


def test_two_steps_are_both_found() -> None:
    values = _noisy(30, seed=5, noise=0.01)
    values[10:] *= 1.15
    values[20:] *= 0.8
    assert [p.index for p in find_change_points(values)] == [10, 20]


def test_constant_and_short_series() -> None:
    assert find_change_points([5.0] * 10) == []
    assert find_change_points([1.0, 2.0, 3.0]) == []
    assert find_change_points([1.0] * 5 + [2.0] * 5)[0].index == 5  # noiseless step


def test_min_change_drops_tiny_steps() -> None:
    values = np.r_[np.full(8, 100.0), np.full(8, 100.1)]
    assert find_change_points(values)  # exact values: any step is significant
    assert find_change_points(values, min_change=0.01) == []


def _series(values: list[float], better: str = "lower", kind: str = "time", device: str = "cuda-x") -> Series:
    points = [Point(f"c{i:02d}", f"2026-01-{i + 1:02d}T00:00:00+00:00", v) for i, v in enumerate(values)]
    return Series(device, TEST_ID, "step.time", "s", better, kind, points)


def test_drift_and_creep_follow_the_metric_direction() -> None:
    creeping = analyse(_series([1.0, 1.04, 1.08, 1.12]))
    assert creeping.drift == pytest.approx(0.12)
    assert creeping.creep_tolerance == pytest.approx(0.10)  # twice the GPU time tolerance
    assert creeping.creeping
    faster = analyse(_series([1.0, 0.8]))
    assert not faster.creeping
    slower_throughput = analyse(_series([100.0, 85.0], better="higher", kind="throughput"))
    assert slower_throughput.creeping
    cpu = analyse(_series([1.0, 1.3], device="cpu-amd"))
    assert cpu.creep_tolerance == pytest.approx(0.5) and not cpu.creeping
    assert analyse(_series([1.0, 1.3], device="cpu-amd"), creep=0.2).creeping
    counts = Finding(_series([1.0, 2.0], kind="custom"))
    assert not counts.creeping


def test_the_default_tolerances_are_the_gates() -> None:
    from pytest_gpuperf.history import analysis
    from pytest_gpuperf.settings import OPTIONS

    defaults = {spec[0].lstrip("-").replace("-", "_"): spec[2] for spec in OPTIONS}
    assert analysis.GPU_TIME_TOLERANCE == defaults["gpuperf_time_tolerance"]
    assert analysis.CPU_TIME_TOLERANCE == defaults["gpuperf_cpu_time_tolerance"]
    assert analysis.MEMORY_TOLERANCE == defaults["gpuperf_memory_tolerance"]


# --- a scratch repository ------------------------------------------------------------------------------------------

HEADER = """schema_version: 1
fingerprint:
  backend: cuda
  device_name: Test GPU
tests:
"""


def _entry_yaml(metrics: dict[str, float]) -> str:
    lines = [f"  {TEST_ID}:"]
    for name, value in metrics.items():
        kind = "memory" if name.endswith("peak_memory") else "time"
        unit = "B" if kind == "memory" else "s"
        lines += [f"    {name}:", f"      value: {value!r}", f"      unit: {unit}", "      better: lower",
                  f"      kind: {kind}"]
    return "\n".join(lines) + "\n"


def _git(repo: Path, *args: str, date: str = "") -> str:
    env = {**os.environ, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date} if date else None
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


def _scratch_repo(tmp_path: Path, values: list[dict[str, float]]) -> Path:
    """A repository with one commit per element of ``values`` writing baselines/cuda-x.yaml."""
    repo = tmp_path / "repo"
    (repo / "baselines").mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    for i, metrics in enumerate(values):
        (repo / "baselines" / "cuda-x.yaml").write_text(HEADER + _entry_yaml(metrics))
        (repo / "code.txt").write_text(str(i))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"commit {i + 1}", date=f"2026-01-{i + 1:02d}T00:00:00+00:00")
    return repo


def _run_json(repo: Path, *extra: str) -> dict:
    out = repo / "history.json"
    assert main(["history", "--baselines", str(repo / "baselines"), "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


@pytest.mark.e2e
def test_history_names_the_commit_of_a_step(tmp_path: Path) -> None:
    noise = _noisy(12, seed=11)
    values = [{"step.time": float(v * (1.3 if i >= 6 else 1.0)), "step.peak_memory": 1000.0} for i, v in
              enumerate(noise)]
    repo = _scratch_repo(tmp_path, values)
    shas = _git(repo, "log", "--reverse", "--format=%H").split()
    document = _run_json(repo)
    (series,) = [s for s in document["series"] if s["metric"] == "step.time"]
    assert [p["commit"] for p in series["points"]] == shas
    (step,) = series["change_points"]
    assert abs(shas.index(step["commit"]) + 1 - 7) <= 1  # commit 7 (+-1)
    assert step["change"] == pytest.approx(0.3, abs=0.08)
    memory = [s for s in document["series"] if s["metric"] == "step.peak_memory"]
    assert len(memory[0]["points"]) == 1  # an entry an update left as it was adds no point


@pytest.mark.e2e
def test_flat_history_has_no_change_point_and_a_ramp_creeps(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    flat = _noisy(24, seed=12)
    repo = _scratch_repo(tmp_path, [{"step.time": float(v)} for v in flat])
    (series,) = _run_json(repo)["series"]
    assert series["change_points"] == []
    ramp_repo = _scratch_repo(tmp_path / "ramp", [{"step.time": 1.02**i} for i in range(8)])
    (ramp,) = _run_json(ramp_repo)["series"]
    assert ramp["drift"] == pytest.approx(1.02**7 - 1) and ramp["drift"] > 0.10
    assert ramp["creeping"] is True
    capsys.readouterr()
    code = main(["history", "--baselines", str(ramp_repo / "baselines"), "--fail-on-creep"])
    assert code == 1
    assert "CREEP past 10%" in capsys.readouterr().out


@pytest.mark.e2e
def test_since_starts_the_series_at_that_revision(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path, [{"step.time": 1.0 + i / 10} for i in range(5)])
    third = _git(repo, "log", "--reverse", "--format=%H").split()[2]
    (series,) = _run_json(repo, "--since", third)["series"]
    assert [p["value"] for p in series["points"]] == [1.2, 1.3, 1.4]
    assert series["drift"] == pytest.approx(1.4 / 1.2 - 1)


@pytest.mark.e2e
def test_reports_add_points_and_patterns_select(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path, [{"step.time": 1.0, "step.peak_memory": 10.0}])
    reports = tmp_path / "reports"
    reports.mkdir()
    report = {
        "format": "pytest-gpuperf-report",
        "commit_info": {"id": "f" * 40, "time": "2026-02-01T00:00:00+00:00"},
        "gpuperf": {"mode": "compare", "tests": [{"nodeid": TEST_ID, "device": "cuda-x", "metrics": [
            {"metric": "step.time", "value": 1.5}, {"metric": "step.bound", "value": "compute-bound"}]}]},
    }
    (reports / "run1.json").write_text(json.dumps(report))
    (reports / "broken.json").write_text("{")
    document = _run_json(repo, "--reports", str(reports), "--metric", "*.time")
    (series,) = document["series"]
    assert [p["value"] for p in series["points"]] == [1.0, 1.5]
    assert series["points"][1]["source"] == "report"
    assert any("broken.json" in note for note in document["notes"])


@pytest.mark.e2e
def test_markdown_and_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    repo = _scratch_repo(tmp_path, [{"step.time": v} for v in [1.0] * 4 + [2.0] * 4])
    md, plots = tmp_path / "h.md", tmp_path / "plots"
    code = main(["history", "--baselines", str(repo / "baselines"), "--markdown", str(md), "--plot", str(plots)])
    assert code == 0
    assert "| `perf_tests/test_x.py::test_step[cuda]` |" in md.read_text()
    pictures = sorted(p.name for p in plots.iterdir())
    assert len([p for p in pictures if p.endswith(".png")]) == 1 and "index.html" in pictures
    assert "data:image/png;base64," in (plots / "index.html").read_text()


@pytest.mark.e2e
def test_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "baselines").mkdir()
    assert main(["history", "--baselines", str(tmp_path / "baselines")]) == 2
    assert "git" in capsys.readouterr().err
    assert main(["nonsense"]) == 2
    repo = _scratch_repo(tmp_path, [{"step.time": 1.0}])
    assert main(["history", "--baselines", str(repo / "baselines"), "--since", "no-such-rev"]) == 2
    assert "no-such-rev" in capsys.readouterr().err


@pytest.mark.e2e
def test_python_dash_m_runs_the_command(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path, [{"step.time": 1.0}, {"step.time": 1.1}])
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf", "history", "--baselines", "baselines"],
        cwd=repo, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "1 series, 0 change point(s)" in done.stdout
