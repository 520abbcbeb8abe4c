"""Unit tests of ``--gpuperf-ab``: judging from injected per-process values, refs, worktrees, import paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuperf.ab import gitref
from pytest_gpuperf.ab.evidence import TestEvidence, judge_evidence
from pytest_gpuperf.ab.imports import a_side_paths, editable_mappings, editable_warnings, package_dirs, pythonpath
from pytest_gpuperf.ab.judge import SideSample, judge_metric, judge_numeric
from pytest_gpuperf.ab.report import markdown_lines, terminal_lines
from pytest_gpuperf.ab.runner import child_env, side_scope
from pytest_gpuperf.results import worst_status as worst

TIME = {"unit": "s", "better": "lower", "kind": "time", "tolerance": 0.25, "label": "time"}
THROUGHPUT = {"unit": "rows/s", "better": "higher", "kind": "throughput", "tolerance": 0.25, "label": "throughput"}
PAIRS = [(0, 0), (1, 1)]


def side(*values: float, status: str = "new") -> list[SideSample]:
    return [SideSample(v, [], status) for v in values]


def judge(a: list[float], b: list[float], info: dict = TIME, final: bool = True, pairs=PAIRS):
    return judge_metric(info["label"], side(*a), side(*b), pairs, info, final)


def test_unchanged_passes_and_a_slow_process_on_either_side_does_not_matter() -> None:
    assert judge([1.00, 1.02], [1.01, 0.99]).status == "unchanged"
    # A whole process several times slower (seen on this CPU) on the B side: the best processes still agree.
    assert judge([1.00, 1.02], [4.0, 1.01]).status == "inconclusive"  # two B processes disagree: never a failure
    assert judge([1.00, 1.02], [4.0, 1.01, 1.02], pairs=[(0, 0), (1, 1)]).status == "unchanged"


def test_slower_b_is_a_regression_only_beyond_tolerance_and_noise() -> None:
    verdict = judge([1.00, 1.01], [1.50, 1.52])
    assert verdict.status == "regression"
    assert verdict.worse == pytest.approx(1.5)
    assert verdict.pairs == pytest.approx([1.5, 1.52 / 1.01])
    assert verdict.ratio == pytest.approx(1.5)
    assert judge([1.00, 1.01], [1.20, 1.21]).status == "unchanged"  # +20% < 25% tolerance


def test_throughput_is_oriented_higher_is_better() -> None:
    slower = judge([100.0, 99.0], [66.0, 65.0], info=THROUGHPUT)
    assert slower.status == "regression"
    assert slower.a == 100.0 and slower.b == 66.0
    assert slower.pairs[0] == pytest.approx(0.66)
    assert judge([100.0, 99.0], [125.0, 124.0], info=THROUGHPUT).status == "improvement"


def test_twenty_percent_faster_is_shown_as_an_improvement_at_a_25_percent_tolerance() -> None:
    assert judge([1.00, 1.02], [0.80, 0.81]).status == "improvement"


def test_disagreeing_processes_are_undecided_then_inconclusive_with_the_reason() -> None:
    pending = judge([1.0, 1.6], [1.5, 2.4], final=False)
    assert pending.status == "undecided" and not pending.decided
    final = judge([1.0, 1.6], [1.5, 2.4], final=True)
    assert final.status == "inconclusive"
    assert "spread between processes is 60%" in final.message and "25% tolerance" in final.message


def test_a_regression_needs_half_of_the_pairs_past_the_tolerance() -> None:
    # Best-vs-best says +50%, but each pair says otherwise: never a failure on that evidence alone.
    verdict = judge([1.0, 1.0, 3.0], [1.5, 1.5, 1.5], pairs=[(2, 0), (2, 1), (0, 2)])
    assert verdict.status != "regression"


def test_memory_uses_an_absolute_slack_and_stored_baselines_keep_gating() -> None:
    info = {"unit": "B", "better": "lower", "kind": "memory", "tolerance": 0.05, "label": "peak memory"}
    assert judge([1000.0, 1000.0], [2000.0, 2000.0], info=info).status == "unchanged"  # +1000 B < 64 KiB
    big = judge([1e8, 1e8], [2e8, 2e8], info=info)
    assert big.status == "regression"
    stored = judge_metric("m", side(1e8, 1e8), side(1e8, 1e8, status="regression"), PAIRS, info, True)
    assert stored.status == "regression" and "stored baseline" in stored.message
    mixed = judge_metric(
        "m", side(1e8, 1e8), [SideSample(1e8, [], "regression"), SideSample(1e8, [], "unchanged")], PAIRS, info, True
    )
    assert mixed.status == "inconclusive"


def test_categories_show_both_sides_and_informational_metrics_never_fail() -> None:
    info = {"unit": "", "better": "equal", "kind": "category", "label": "bound"}
    a = [SideSample("compute-bound", [], "unchanged")] * 2
    b = [SideSample("memory-bound", [], "changed")] * 2
    verdict = judge_metric("step.bound", a, b, PAIRS, info, True)
    assert (verdict.a, verdict.b, verdict.status) == ("compute-bound", "memory-bound", "changed")
    info_time = {**TIME, "tolerance": 0.25}
    a_info, b_info = side(1.0, 1.0, status="info"), side(5.0, 5.0, status="info")
    quiet = judge_metric("step.time", a_info, b_info, PAIRS, info_time, True)
    assert quiet.status == "info" and not quiet.judged


def test_worst_orders_statuses() -> None:
    assert worst(["unchanged", "inconclusive", "improvement"]) == "inconclusive"
    assert worst(["unchanged", "regression", "inconclusive"]) == "regression"
    assert worst([]) == "info"


def _entry(value: float, samples: list[float], status: str = "new") -> dict:
    verdict = {"metric": "step.time", "label": "time", "value": value, "unit": "s", "better": "lower"}
    verdict.update(kind="time", status=status, tolerance=0.25, sample_values=samples)
    return {"outcome": "passed", "error": None, "payload": {"verdicts": [verdict]}}


def test_judge_evidence_pairs_processes_and_uses_sample_precision() -> None:
    evidence = TestEvidence("t.py::x")
    evidence.a = [_entry(1.0, [1.0] * 10), _entry(1.01, [1.01] * 10)]
    evidence.b = [_entry(2.0, [2.0] * 10), _entry(2.02, [2.02] * 10)]
    (verdict,) = judge_evidence(evidence, final=True)
    assert verdict.status == "regression" and verdict.pairs == pytest.approx([2.0, 2.0])
    noisy = TestEvidence("t.py::y")
    spread = [1.0 + 0.1 * i for i in range(10)]  # the best process's own q20 is uncertain by ~20%
    noisy.a = [_entry(1.0, spread), _entry(1.0, spread)]
    noisy.b = [_entry(1.4, spread), _entry(1.4, spread)]
    (verdict,) = judge_evidence(noisy, final=True)
    assert verdict.status == "inconclusive"


def test_judge_evidence_marks_metrics_measured_on_one_side_only() -> None:
    evidence = TestEvidence("t.py::x", a=[{"outcome": "error", "error": "boom", "payload": None}], b=[_entry(1.0, [])])
    (verdict,) = judge_evidence(evidence, final=True)
    assert verdict.status == "info" and verdict.message == "only measured on B (the working tree)" and verdict.judged
    assert evidence.errors("A") == ["boom"] and evidence.errors("B") == []


@pytest.mark.parametrize("ref", ["", "-rf", "--output=/tmp/x", "main;rm -rf /", "a b", "$(id)", "main..dev", "x`y`"])
def test_option_and_shell_looking_refs_are_refused(ref: str) -> None:
    with pytest.raises(gitref.AbRefError, match="--gpuperf-ab"):
        gitref.check_ref_name(ref)


@pytest.mark.parametrize("ref", ["origin/main", "HEAD~1", "main^", "v1.2.3", "@{u}", "0123abcd", "feature/x-y_z"])
def test_plain_refs_are_accepted(ref: str) -> None:
    assert gitref.check_ref_name(ref) == ref


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit: src/pkg/__init__.py holding VERSION = 1."""
    root = tmp_path / "repo"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "one")
    return root


def test_worktree_checks_out_the_ref_and_is_removed(repo: Path) -> None:
    (repo / "src" / "pkg" / "__init__.py").write_text("VERSION = 2\n")
    worktree = gitref.Worktree.create(repo, "HEAD")
    assert worktree.sha == _git(repo, "rev-parse", "HEAD").strip() and len(worktree.short) == 12
    assert (worktree.path / "src" / "pkg" / "__init__.py").read_text() == "VERSION = 1\n"
    worktree.remove()
    assert not worktree.path.parent.exists()
    assert str(worktree.path) not in _git(repo, "worktree", "list")
    worktree.remove()  # idempotent


def test_a_worktree_left_by_a_killed_run_is_swept_by_the_next_and_a_live_ones_is_kept(repo: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: the killed run's
    left = gitref.Worktree.create(repo, "HEAD")
    (left.path.parent / gitref.OWNER_FILE).write_text(f"{dead.pid} 1")
    live = gitref.Worktree.create(repo, "HEAD")  # sweeps the dead run's, keeps nothing else
    assert not left.path.parent.exists() and str(left.path) not in _git(repo, "worktree", "list")
    assert live.path.exists()
    again = gitref.Worktree.create(repo, "HEAD")  # the live run's (this process) survives another run's start
    assert live.path.exists() and str(live.path) in _git(repo, "worktree", "list")
    for worktree in (live, again):
        worktree.remove()


def test_unknown_ref_and_no_repository_are_clear_errors(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(gitref.AbRefError, match="not a commit"):
        gitref.resolve_commit(repo, "no-such-branch")
    (tmp_path / "plain").mkdir()
    with pytest.raises(gitref.AbRefError, match="needs a git repository"):
        gitref.toplevel(tmp_path / "plain")


def test_untracked_compiled_extensions_are_found(repo: Path) -> None:
    (repo / "src" / "pkg" / "_ext.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\0")
    dirs = package_dirs(repo, [repo / "src", repo], {})
    assert dirs == [repo / "src" / "pkg"]
    assert gitref.untracked_extensions(repo, dirs) == ["src/pkg/_ext.cpython-311-x86_64-linux-gnu.so"]
    _git(repo, "add", "-f", "src/pkg")
    assert gitref.untracked_extensions(repo, dirs) == []


def test_a_side_import_path_puts_the_worktree_first(tmp_path: Path) -> None:
    tree, wt = tmp_path / "tree", tmp_path / "wt"
    for folder in (tree / "src", tree / "lib", wt / "src", wt / "lib"):
        folder.mkdir(parents=True)
    paths = a_side_paths(tree, wt, [str(tree / "lib"), "/usr/lib/python3"], {"pkg": tree / "src" / "pkg"})
    assert paths == [str(wt / "src"), str(wt), str(wt / "lib")]
    joined = pythonpath(paths, os.pathsep.join([str(tree / "src"), "/opt/other"]), tree)
    assert joined.split(os.pathsep) == [*paths, "/opt/other"]  # the working tree's own entries are dropped


def test_editable_finder_mapping_is_read_and_a_missing_package_on_ref_is_named(tmp_path: Path) -> None:
    module = type(sys)("__editable___demo_1_0_finder")
    module.MAPPING = {"demo": str(tmp_path / "tree" / "src" / "demo")}

    class Finder:
        pass

    Finder.__module__ = module.__name__
    sys.modules[module.__name__] = module
    try:
        mapping = editable_mappings([Finder])
    finally:
        del sys.modules[module.__name__]
    assert mapping == {"demo": tmp_path / "tree" / "src" / "demo"}
    (tmp_path / "wt").mkdir()
    (lines,) = editable_warnings((tmp_path / "tree").resolve(), tmp_path / "wt", mapping)
    assert "'demo' is installed in editable mode" in lines and "src/demo" in lines


def test_worker_environment_and_scope(tmp_path: Path) -> None:
    base = {"PYTEST_XDIST_WORKER": "gw0", "GITHUB_STEP_SUMMARY": "/x", "KEEP": "1", "GPUPERF_AB_FOREIGN_ROOT": "/y"}
    env = child_env(base, "/a:/b", None, tmp_path)
    assert env["PYTHONPATH"] == "/a:/b" and env["KEEP"] == "1"
    assert env["GPUPERF_ROOFS"] == "always"  # both sides classify their steps, so A/B compares bound classes
    for dropped in ("PYTEST_XDIST_WORKER", "GITHUB_STEP_SUMMARY", "GPUPERF_AB_FOREIGN_ROOT"):
        assert dropped not in env
    tree = tmp_path.resolve()
    scope = side_scope([str(tree / "tests" / "t.py") + "::test_x", "/elsewhere/t.py"], tree, Path("/wt"))
    assert scope == ["/wt/tests/t.py::test_x"]


def test_worker_plugin_reports_modules_imported_from_the_foreign_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gpuperf.ab import worker_plugin

    foreign = tmp_path / "tree"
    foreign.mkdir()
    (foreign / "leaky_mod_for_ab.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(foreign))
    __import__("leaky_mod_for_ab")
    monkeypatch.setenv("GPUPERF_AB_FOREIGN_ROOT", str(foreign))
    monkeypatch.setenv("GPUPERF_AB_SIDE_ROOT", str(tmp_path / "wt"))
    try:
        assert any(line.startswith("leaky_mod_for_ab (") for line in worker_plugin._leaks())
    finally:
        sys.modules.pop("leaky_mod_for_ab", None)


def test_worker_plugin_ignores_the_environments_own_packages_in_a_venv_inside_the_working_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23: with ``.venv/`` inside the repository every A/B run warned about site-packages/pytest and 1833 more."""
    from pytest_gpuperf.ab import worker_plugin

    tree = tmp_path / "tree"
    site_packages = tree / ".venv" / "lib" / "site-packages"
    (site_packages / "envpkg_for_ab").mkdir(parents=True)
    (site_packages / "envpkg_for_ab" / "__init__.py").write_text("X = 1\n")
    (site_packages / "projinvenv_for_ab").mkdir()
    (site_packages / "projinvenv_for_ab" / "__init__.py").write_text("X = 1\n")
    (tree / "treemod_for_ab.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(site_packages))
    monkeypatch.syspath_prepend(str(tree))
    for name in ("envpkg_for_ab", "projinvenv_for_ab", "treemod_for_ab"):
        __import__(name)
    monkeypatch.setenv("GPUPERF_AB_FOREIGN_ROOT", str(tree))
    monkeypatch.setenv("GPUPERF_AB_SIDE_ROOT", str(tmp_path / "wt"))
    monkeypatch.setenv("GPUPERF_AB_PACKAGES", "projinvenv_for_ab")
    try:
        leaks = worker_plugin._leaks(environment=[tree / ".venv"])
        assert [line.partition(" ")[0] for line in leaks] == ["projinvenv_for_ab", "treemod_for_ab"]
        assert not any(".venv" in line for line in worker_plugin._leaks(environment=[tree / ".venv"])[1:])
        assert sys.prefix and Path(sys.prefix).resolve() in worker_plugin._environment_roots()
    finally:
        for name in ("envpkg_for_ab", "projinvenv_for_ab", "treemod_for_ab"):
            sys.modules.pop(name, None)


def _summary() -> dict:
    metric = judge([1.0, 1.01], [1.5, 1.52]).as_dict()
    return {
        "ref": "origin/main",
        "sha": "0123456789abcdef",
        "title": "gpuperf A/B against origin/main (0123456789ab)",
        "tests": {"t.py::test_x[cpu]": {"outcome": "failed", "status": "regression", "metrics": [metric], "note": ""}},
        "new": ["t.py::test_new[cpu]"],
        "removed": ["t.py::test_old[cpu]"],
        "warnings": ["compiled extension(s) built only in the working tree"],
        "processes": {"A": 2, "B": 2, "min": 2, "max": 4},
        "max_time": 0.5,
        "cost_per_test_s": {"A": 3.0, "B": 3.5},
        "worker_errors": [],
    }


def test_terminal_and_markdown_sections_show_both_sides() -> None:
    text = "\n".join(line for line, _ in terminal_lines(_summary()))
    assert "A = origin/main (0123456789ab)" in text and "REGRESSION" in text and "+50.0%" in text
    assert "new (only in the working tree): t.py::test_new[cpu]" in text
    assert "removed (only in origin/main): t.py::test_old[cpu]" in text
    assert "WARNING: compiled extension" in text and "workers measured A 3.0 s, B 3.5 s" in text
    markdown = "\n".join(markdown_lines(_summary()))
    assert markdown.startswith("### A/B against `origin/main` (`0123456789ab`): 1 REGRESSION")
    row = "| `t.py::test_x[cpu]` | time | 1.00 s | 1.50 s | +50.0% | +50%, +50% | 25% | :red_circle: REGRESSION |"
    assert row in markdown
    assert json.dumps(_summary())  # JSON-able


class FakeRunner:
    """An AbRunner whose workers are simulated: per side, a value per test and process."""

    def __init__(self, values: dict[str, dict[str, list[float]]], collected: dict[str, list[str]]) -> None:
        from pytest_gpuperf.ab.runner import AbRunner, Side

        def side_of(name: str) -> Side:
            return Side(name, Path("/r"), Path("/r"), Path("/r"), {}, ["/r/t.py"])

        self.calls: list[tuple[str, int, tuple[str, ...]]] = []
        #: ("spawn" | "ready" | "run" | "exit" | "kill", side, pair), in order: when each worker was started ahead,
        #: ran, was reaped (a worker that ran: by ``discard``, after the controller's reports) or killed (never ran).
        self.events: list[tuple[str, str, int]] = []
        self.wholes: list[bool] = []  # each spawn's ``whole`` (the controller's whole scope)
        runner = self

        class Warm:
            def __init__(self, side: str, pair: int) -> None:
                self.side, self.pair = side, pair
                self.released_at = 0.0

            def wait(self, timeout: float) -> None:
                runner.events.append(("exit", self.side, self.pair))

            def kill(self) -> None:
                runner.events.append(("kill", self.side, self.pair))

            def wait_ready(self, timeout: float) -> None:
                runner.events.append(("ready", self.side, self.pair))

        class Runner(AbRunner):
            def install_worker_plugin(self) -> Path:
                return Path("/unused")

            def spawn(self, side, pair, selected, full_scope=True, whole=False):  # type: ignore[no-untyped-def]
                runner.events.append(("spawn", side.name, pair))
                runner.wholes.append(whole)
                return Warm(side.name, pair)

            def finish(self, warm, side, pair, selected):  # type: ignore[no-untyped-def]
                from pytest_gpuperf.ab.runner import WorkerRun

                assert (warm.side, warm.pair) == (side.name, pair)
                warm.released_at = 1.0
                runner.events.append(("run", side.name, pair))
                runner.calls.append((side.name, pair, tuple(selected)))
                index = sum(1 for c in runner.calls if c[0] == side.name) - 1
                tests = {}
                for nodeid in selected:
                    if nodeid in collected[side.name]:
                        value = values[side.name][nodeid][index]
                        entry = _entry(value, [value] * 10)
                        tests[nodeid] = entry
                data = {"collected": collected[side.name], "tests": tests}
                return WorkerRun(side.name, pair, 1.0, len(tests), data)

        self.runner = Runner(side_of("A"), side_of("B"), [], min_processes=2, max_processes=4)


def test_rounds_alternate_and_only_undecided_tests_get_more_processes() -> None:
    fake = FakeRunner(
        values={
            "A": {"t.py::x": [1.0] * 4, "t.py::noisy": [1.0, 1.0, 1.0, 1.0]},
            "B": {"t.py::x": [2.0] * 4, "t.py::noisy": [1.0, 1.5, 1.02, 1.6], "t.py::new": [1.0]},
        },
        collected={"A": ["t.py::x", "t.py::noisy", "t.py::gone"], "B": ["t.py::x", "t.py::noisy", "t.py::new"]},
    )
    outcome = fake.runner.run(["t.py::x", "t.py::noisy", "t.py::new"])
    assert [c[:2] for c in fake.calls] == [("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2)]
    assert fake.calls[4][2] == ("t.py::x", "t.py::noisy")  # x, 2x slower in two pairs, is confirmed by a third
    assert outcome.new == ["t.py::new"] and outcome.removed == ["t.py::gone"]
    (x,) = outcome.evidence["t.py::x"].verdicts
    assert x.status == "regression" and len(x.a_values) == 3
    (noisy,) = outcome.evidence["t.py::noisy"].verdicts
    assert noisy.status == "unchanged" and len(noisy.b_values) == 3  # the third B process matched the best
    assert outcome.evidence["t.py::new"].last_payload("B") is not None
    assert outcome.cost("A") == pytest.approx(3.0 / 6)  # three 1 s A runs measured 2 + 2 + 2 tests
    # the workers of the two minimum pairs started up together and had all started before the first measured;
    # every later pair started while the pair before it measured; the fourth pair, which no test needed (both
    # were decided after three), was killed without running (a worker told to stop would finish its start-up first)
    first_run = fake.events.index(("run", "A", 0))
    assert [e for e in fake.events[:first_run] if e[0] == "ready"] == [
        ("ready", "A", 0), ("ready", "B", 0), ("ready", "B", 1), ("ready", "A", 1)
    ]  # fmt: skip
    runs = [e for e in fake.events if e[0] == "run"]
    for i, event in enumerate(runs[:-1]):
        following = runs[i + 1]
        assert fake.events.index(("spawn", *following[1:])) < fake.events.index(event)
    assert fake.events.index(("spawn", "A", 2)) < fake.events.index(("run", "B", 1))
    assert ("spawn", "B", 3) in fake.events and ("run", "B", 3) not in fake.events
    assert [e for e in fake.events if e[0] in ("exit", "kill")] == [("kill", "B", 3), ("kill", "A", 3)]
    fake.runner.discard()  # the controller's unconfigure, after its reports: the exits of the six that ran
    assert sorted(e[1:] for e in fake.events if e[0] == "exit") == sorted(
        [("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2)]
    )


def test_workers_started_before_collection_are_the_first_pairs_and_unused_ones_are_killed() -> None:
    values = {"A": {"t.py::x": [1.0] * 4}, "B": {"t.py::x": [1.0] * 4}}
    fake = FakeRunner(values, collected={"A": ["t.py::x"], "B": ["t.py::x"]})
    fake.runner.prestart()  # the controller's pytest_sessionstart: nothing is selected yet
    assert fake.events == [("spawn", "A", 0), ("spawn", "B", 0), ("spawn", "B", 1), ("spawn", "A", 1)]
    assert fake.wholes == [True] * 4  # each collects the controller's whole scope
    outcome = fake.runner.run(["t.py::x"])
    assert [c[:2] for c in fake.calls] == [("A", 0), ("B", 0), ("B", 1), ("A", 1)]  # the prestarted ones ran
    assert [e for e in fake.events if e[0] == "spawn"][4:] == [("spawn", "A", 2), ("spawn", "B", 2)]  # pair 2 ahead
    assert outcome.evidence["t.py::x"].verdicts[0].status == "unchanged"
    idle = FakeRunner(values, collected={"A": ["t.py::x"], "B": ["t.py::x"]})
    idle.runner.prestart()
    idle.runner.discard()  # no perf test selected: nothing ran, and nobody waits for their start-up
    assert [e[0] for e in idle.events] == ["spawn"] * 4 + ["kill"] * 4 and idle.calls == []


def test_worker_plugin_reports_project_packages_loaded_from_outside_its_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gpuperf.ab import worker_plugin

    installed = tmp_path / "site-packages"
    (installed / "projpkg_for_ab").mkdir(parents=True)
    (installed / "projpkg_for_ab" / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(installed))
    __import__("projpkg_for_ab")
    monkeypatch.delenv("GPUPERF_AB_FOREIGN_ROOT", raising=False)
    monkeypatch.setenv("GPUPERF_AB_SIDE_ROOT", str(tmp_path / "wt"))
    monkeypatch.setenv("GPUPERF_AB_PACKAGES", "projpkg_for_ab,other")
    try:
        assert worker_plugin._leaks() == [
            f"projpkg_for_ab ({(installed / 'projpkg_for_ab' / '__init__.py').resolve()})"
        ]
        monkeypatch.setenv("GPUPERF_AB_SIDE_ROOT", str(installed))
        assert worker_plugin._leaks() == []  # loaded from the side's own root: fine
    finally:
        sys.modules.pop("projpkg_for_ab", None)


def _clocked(time: float, clock: float, bound: str = "compute-bound") -> dict:
    """One A/B process's payload: time and cycles per step of a step run at ``clock`` MHz (5% tolerance)."""
    cycles = time * clock * 1e6
    timing = {
        "metric": "step.time",
        "label": "time",
        "value": time,
        "unit": "s",
        "better": "lower",
        "kind": "time",
        "status": "new",
        "tolerance": 0.05,
        "sample_values": [time] * 10,
        "extra": {"sm_clock_mhz": clock},
    }
    cyc = {
        "metric": "step.cycles",
        "label": "cycles",
        "value": cycles,
        "unit": "cycles",
        "better": "lower",
        "kind": "cycles",
        "status": "info",
        "tolerance": 0.05,
        "sample_values": [cycles] * 10,
        "extra": {},
    }
    category = {"metric": "step.bound", "value": bound, "kind": "category", "status": "new", "unit": ""}
    return {"outcome": "passed", "error": None, "payload": {"verdicts": [timing, cyc, category]}}  # fmt: skip


def test_ab_judges_cycles_when_the_processes_ran_at_different_sm_clocks() -> None:
    # The same work (1.25 M cycles) in processes at 1485-1935 MHz: times spread 30%, cycles agree.
    unchanged = TestEvidence("t.py::gemm")
    unchanged.a = [_clocked(1.25e6 / 1485e6, 1485), _clocked(1.25e6 / 1935e6, 1935)]
    unchanged.b = [_clocked(1.25e6 / 1700e6, 1700), _clocked(1.25e6 / 1600e6, 1600)]
    verdict = judge_evidence(unchanged, final=True)[0]
    assert verdict.status == "inconclusive" and "straddle" in verdict.message  # time B/A spreads 30%: undecidable
    same = TestEvidence("t.py::gemm")  # the same work, B's processes at a 5% lower clock: time +5.3%, cycles 0%
    same.a = [_clocked(1.25e6 / 1575e6, 1575), _clocked(1.25e6 / 1580e6, 1580)]
    same.b = [_clocked(1.25e6 / 1500e6, 1500), _clocked(1.25e6 / 1505e6, 1505)]
    verdict = judge_evidence(same, final=True)[0]
    assert verdict.status == "inconclusive" and "cycles per step" in verdict.message
    slowed = TestEvidence("t.py::gemm")  # +12% of the work, B's processes at a lower clock: both measures fail
    slowed.a = [_clocked(1.25e6 / 1585e6, 1585), _clocked(1.25e6 / 1580e6, 1580)]
    slowed.b = [_clocked(1.40e6 / 1500e6, 1500), _clocked(1.40e6 / 1505e6, 1505)]
    verdict = judge_evidence(slowed, final=True)[0]
    assert verdict.status == "regression" and "both past it" in verdict.message
    memory = TestEvidence("t.py::copy")  # a memory-bound step keeps its time verdict whatever the SM clock
    memory.a = [_clocked(1e-3, 1980, "memory-bound"), _clocked(1e-3, 1500, "memory-bound")]
    memory.b = [_clocked(1e-3, 1700, "memory-bound"), _clocked(1e-3, 1980, "memory-bound")]
    verdict = judge_evidence(memory, final=True)[0]
    assert verdict.status == "unchanged" and "cycles" not in verdict.message


def test_ab_lets_time_decide_when_the_processes_clocks_spread_alike_on_both_sides() -> None:
    # As on the H200 under its power cap: every worker at its own clock (1395-1905 MHz), A and B alike, while the
    # GEMM's time barely follows the NVML clock. Cycles would spread 30% and straddle; time decides.
    unchanged = TestEvidence("t.py::gemm")
    unchanged.a = [_clocked(0.81e-3, 1410), _clocked(0.81e-3, 1905)]
    unchanged.b = [_clocked(0.81e-3, 1395), _clocked(0.81e-3, 1890)]
    verdict = judge_evidence(unchanged, final=True)[0]
    assert verdict.status == "unchanged" and "time decides" in verdict.message
    slowed = TestEvidence("t.py::gemm")  # +10% of the time in B, the same clocks
    slowed.a = [_clocked(0.81e-3, 1410), _clocked(0.81e-3, 1905)]
    slowed.b = [_clocked(0.891e-3, 1395), _clocked(0.891e-3, 1890)]
    verdict = judge_evidence(slowed, final=True)[0]
    assert verdict.status == "regression" and "time decides" in verdict.message


# Per-process GEMM throughputs (TFLOP/s) of two A/B runs on the H200 (gpu/r4_call4.sh), workers at 1380-1680 MHz.
H200_UNCHANGED = ([1224.0, 1296.4, 1223.4, 1233.7], [1232.3, 1228.5, 1201.4, 1227.4])
H200_SLOWER = ([1225.3, 1223.4, 1248.6, 1215.3], [1145.6, 1117.7, 1168.3, 1162.8])  # K 4096 -> 4480: +9.9%


def _gemm_processes(tflops: list[float], clocks: list[float]) -> list[dict]:
    return [_clocked(1.0 / value, clock) for value, clock in zip(tflops, clocks, strict=True)]


def test_ab_pairs_decide_where_one_boosted_process_left_the_best_process_rule_undecided() -> None:
    clocks_a, clocks_b = [1455, 1680, 1440, 1500], [1470, 1500, 1410, 1545]  # both sides alike
    unchanged = TestEvidence("t.py::gemm")
    unchanged.a, unchanged.b = (
        _gemm_processes(H200_UNCHANGED[0], clocks_a),
        _gemm_processes(H200_UNCHANGED[1], clocks_b),
    )
    verdict = judge_evidence(unchanged, final=True)[0]
    assert verdict.status == "unchanged" and "round pairs" in verdict.message and "3 of 4 within" in verdict.message
    slower = TestEvidence("t.py::gemm")
    slower.a, slower.b = _gemm_processes(H200_SLOWER[0], clocks_a), _gemm_processes(H200_SLOWER[1], clocks_b)
    verdict = judge_evidence(slower, final=True)[0]
    assert verdict.status == "regression" and "past the tolerance" in verdict.message
    early = TestEvidence("t.py::gemm")  # two pairs are too few for the paired rule: more rounds
    early.a, early.b = (
        _gemm_processes(H200_UNCHANGED[0][:2], clocks_a[:2]),
        _gemm_processes(H200_UNCHANGED[1][:2], clocks_b[:2]),
    )
    assert judge_evidence(early, final=False)[0].status == "undecided"


def test_the_paired_rule_leaves_split_pairs_undecided() -> None:
    from pytest_gpuperf.ab.clocks import decide_on_pairs
    from pytest_gpuperf.ab.judge import AbVerdict

    verdict = AbVerdict("step.time", "time", "s", "lower", "time", "undecided", [], [], tolerance=0.05)
    verdict.pairs = [1.08, 0.99, 1.09, 1.00]  # half past, half within: neither side has 3 of 4
    assert decide_on_pairs(verdict) is None
    verdict.pairs = [0.90, 0.91, 0.92, 1.0]
    assert decide_on_pairs(verdict) == "improvement"


@pytest.mark.e2e
def test_a_gated_worker_waits_for_go_runs_and_says_when_its_results_are_written(tmp_path: Path) -> None:
    """The worker plugin in a real pytest process: started ahead, it collects, waits on stdin, and after "go"
    runs only the tests the select file names; a runner that goes away (stdin closed) makes it exit without running
    anything."""
    from pytest_gpuperf.ab.runner import AbRunner, Side

    (tmp_path / "test_w.py").write_text("def test_a(gpuperf):\n    pass\n\ndef test_b(gpuperf):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugin"), *sys.path])}
    env.pop("PYTEST_ADDOPTS", None)
    side = Side("B", tmp_path, tmp_path, tmp_path, env, [str(tmp_path / "test_w.py")])
    runner = AbRunner(side, side, ["--gpuperf-backend", "cpu", "-p", "no:randomly"], scratch=tmp_path, timeout=300)
    runner.install_worker_plugin()
    unused = runner.spawn(side, 1, ["test_w.py::test_a[cpu]"])
    warm = runner.spawn(side, 0, ["test_w.py::test_a[cpu]"])
    assert warm is not None and unused is not None
    run = runner.finish(warm, side, 0, ["test_w.py::test_b[cpu]"])
    assert run.error is None, run.error
    assert set(run.data["collected"]) == {"test_w.py::test_a[cpu]", "test_w.py::test_b[cpu]"}
    outcomes = {n: t["outcome"] for n, t in run.data["tests"].items()}
    assert outcomes == {"test_w.py::test_b[cpu]": "passed"}  # only what it was told, once told
    assert run.data["prewarm_failed"] == []  # it paid its first test's one-time costs while it waited
    warm.wait(60)
    assert warm.timeline(0.0).keys() == {"spawned", "ready", "go", "done"}
    assert unused.proc.stdin is not None
    unused.proc.stdin.close()  # the runner went away
    unused.wait(60)
    assert unused.proc.returncode == 0 and not unused.out.exists()  # stopped before running: no results
    assert "A/B worker not needed" in unused.output()


def test_a_count_that_reads_zero_on_both_sides_is_unchanged_and_a_new_one_fails() -> None:
    # Host syncs per step read 0 in every worker of an unchanged GEMM on the H200: judged as ratios, 0 / 0 made
    # every unchanged CUDA A/B run inconclusive.
    zeros = [SideSample(0.0) for _ in range(4)]
    status, *_rest, message = judge_numeric(zeros, zeros, [(i, i) for i in range(4)], "lower", 0.0, "custom", True)
    assert status == "unchanged" and "same on both sides" in message
    ones = [SideSample(1.0) for _ in range(4)]
    status, *_rest, message = judge_numeric(zeros, ones, [(i, i) for i in range(4)], "lower", 0.0, "custom", True)
    assert status == "regression" and "A 0, B 1" in message


def _fitted(time: float, clock: float, fit: tuple[float, float]) -> dict:
    process = _clocked(time, clock)
    process["payload"]["verdicts"][0]["extra"].update(clock_exponent=fit[0], clock_exponent_se=fit[1])
    return process


def test_sides_at_different_clocks_are_judged_by_the_pairs_over_the_workers_exponent_band() -> None:
    # A GEMM whose time follows the clock as f**-0.3: B's workers ran 6% faster clocks than A's.
    fit = (0.3, 0.05)
    a_clocks, b_clocks = [1480, 1490, 1485, 1495], [1575, 1580, 1570, 1585]

    def time_at(clock: float, work: float) -> float:
        return 2.0e-4 * work * (clock / 1500.0) ** -0.3

    unchanged = TestEvidence("t.py::gemm")
    unchanged.a = [_fitted(time_at(f, 1.0), f, fit) for f in a_clocks]
    unchanged.b = [_fitted(time_at(f, 1.0), f, fit) for f in b_clocks]
    verdict = judge_evidence(unchanged, final=True)[0]
    assert verdict.status == "unchanged" and "f^-0.20..f^-0.40" in verdict.message, verdict.message
    slower = TestEvidence("t.py::gemm")  # +8% of the work, partly hidden by B's faster clocks (time reads +6%)
    slower.a = [_fitted(time_at(f, 1.0), f, fit) for f in a_clocks]
    slower.b = [_fitted(time_at(f, 1.08), f, fit) for f in b_clocks]
    verdict = judge_evidence(slower, final=True)[0]
    assert verdict.status == "regression" and "both past it" in verdict.message, verdict.message


def test_a_timing_regression_seen_in_two_pairs_waits_for_a_third_while_more_can_run() -> None:
    # Unchanged code on this CPU: both B processes of one test landed slow (-23%, -25% throughput) and the A/B
    # failed it after two pairs. Two pairs now make it a suspect; a third pair decides.
    suspect = judge([207.0, 205.0], [157.0, 155.0], info=THROUGHPUT, final=False)
    assert suspect.status == "undecided" and "one more pair" in suspect.message
    three = [(0, 0), (1, 1), (2, 2)]
    still = judge([207.0, 205.0, 206.0], [157.0, 155.0, 208.0], info=THROUGHPUT, final=False, pairs=three)
    assert still.status == "undecided"  # one fast B process: B's best two now spread 32%, more rounds
    four = [(0, 0), (1, 1), (2, 2), (3, 3)]
    cleared = judge([207.0, 205.0, 206.0, 207.0], [157.0, 155.0, 208.0, 207.0], info=THROUGHPUT, pairs=four)
    assert cleared.status == "unchanged"
    confirmed = judge([207.0, 205.0, 206.0], [157.0, 155.0, 156.0], info=THROUGHPUT, final=False, pairs=three)
    assert confirmed.status == "regression"
    assert judge([207.0, 205.0], [157.0, 155.0], info=THROUGHPUT, final=True).status == "regression"  # no more runs


def test_prewarm_names_modules_that_exist_and_fails_nothing_here() -> None:
    """A renamed module would silently leave its import to the first test again: every listed name must exist."""
    import importlib.util

    from pytest_gpuperf.ab.prewarm import LAZY_MODULES, prewarm

    assert [name for name in LAZY_MODULES if importlib.util.find_spec(name) is None] == []
    assert prewarm() == []
