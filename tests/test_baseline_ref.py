"""``--gpuperf-baseline-ref``: judged against a git ref's baselines, every changed entry listed (real git repos)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from pytest_gpuperf.baselines.diff import diff_tests
from pytest_gpuperf.baselines.ref import GitRef, GitRefError

RECORDED = """
import pytest

VALUES = {values!r}

@pytest.mark.parametrize("name", sorted(VALUES))
def test_latency(gpuperf, name):
    gpuperf.record("script.latency", VALUES[name], "s")
"""


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` with a fixed identity; return stdout."""
    env_args = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    done = subprocess.run(["git", *env_args, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def baseline_path(pytester: pytest.Pytester) -> Path:
    [path] = sorted((pytester.path / "baselines").glob("*.yaml"))
    return path


def test_a_pr_that_loosens_its_baseline_is_still_judged_by_the_base_refs_and_the_change_is_listed(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    git(pytester.path, "init", "-q", "-b", "main")
    pytester.makepyfile(test_rec=RECORDED.format(values={"a": 1.0, "b": 1.0, "c": 1.0}))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=3)
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "baselines")

    # The "PR": test a got 60% slower and its baseline was edited to match; test b's entry removed; c untouched.
    pytester.makepyfile(test_rec=RECORDED.format(values={"a": 1.6, "b": 1.0, "c": 1.0}))
    path = baseline_path(pytester)
    data = yaml.safe_load(path.read_text())
    data["tests"]["test_rec.py::test_latency[a-cpu]"]["script.latency"]["value"] = 1.7
    del data["tests"]["test_rec.py::test_latency[b-cpu]"]
    path.write_text(yaml.safe_dump(data))

    pytester.runpytest("--gpuperf", *fast_args).assert_outcomes(passed=3)  # the working tree looks fine
    result = pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-baseline-ref", "main", "--gpuperf-json", "r.json")
    result.assert_outcomes(failed=1, passed=2)
    result.stdout.fnmatch_lines(
        ["*script: latency 1.60 s > baseline 1.00 s (+60.0%, tolerance 5%)*", "*gpuperf baseline changes against main*"]
    )
    out = result.stdout.str()
    assert (
        f"baselines/{path.name}: metric changed test_rec.py::test_latency[a-cpu] script.latency: "
        "value 1.00 s -> 1.70 s (+70.0%)  [LOOSENS THE GATE]"
    ) in out
    assert (
        f"baselines/{path.name}: test removed test_rec.py::test_latency[b-cpu]: 1 metric(s) no longer gated"
        "  [LOOSENS THE GATE]"
    ) in out
    ref = json.loads((pytester.path / "r.json").read_text())["gpuperf"]["baseline_ref"]
    assert ref["ref"] == "main" and ref["commit"] == git(pytester.path, "rev-parse", "main").strip()
    assert [(c["change"], c["test"], c["loosens"]) for c in ref["changes"]] == [
        ("metric changed", "test_rec.py::test_latency[a-cpu]", True),
        ("test removed", "test_rec.py::test_latency[b-cpu]", True),
    ]


def test_a_new_baseline_file_is_listed_and_tests_it_holds_are_new_against_the_ref(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    git(pytester.path, "init", "-q", "-b", "main")
    pytester.makefile(".txt", readme="no baselines yet")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "start")
    pytester.makepyfile(test_rec=RECORDED.format(values={"a": 1.0}))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    result = pytester.runpytest(
        "--gpuperf", *fast_args, "--gpuperf-baseline-ref", "HEAD", "--gpuperf-markdown", "pr.md"
    )
    result.assert_outcomes(passed=1)
    name = baseline_path(pytester).name
    out = result.stdout.str()
    assert f"baselines/{name}: file added: 1 test(s)" in out
    assert f"baselines/{name}: test added test_rec.py::test_latency[a-cpu]: 1 metric(s)" in out
    assert "no baseline" in out  # judged against HEAD, which has no baselines
    markdown = (pytester.path / "pr.md").read_text()
    assert "### Baseline entries this PR changes against `HEAD`" in markdown
    assert f"| `baselines/{name}` | file added |" in markdown


def test_an_unknown_ref_is_a_usage_error_with_the_fetch_hint(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    git(pytester.path, "init", "-q", "-b", "main")
    pytester.makepyfile(test_rec=RECORDED.format(values={"a": 1.0}))
    result = pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-baseline-ref", "origin/nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpuperf-baseline-ref origin/nosuch: no such commit in *; fetch it first*"])


def test_outside_a_git_repository_the_ref_option_says_so(tmp_path: Path) -> None:
    with pytest.raises(GitRefError, match="is not inside a git repository"):
        GitRef.resolve("main", tmp_path / "baselines")


def test_reading_a_file_at_a_ref_and_a_missing_file(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "x.yaml").write_text("schema_version: 1\nfingerprint: {backend: cpu}\ntests: {}\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "one")
    (tmp_path / "baselines" / "x.yaml").write_text("changed in the working tree\n")
    ref = GitRef.resolve("main", tmp_path / "baselines")
    assert ref.read(tmp_path / "baselines" / "x.yaml").startswith("schema_version: 1")
    assert ref.read(tmp_path / "baselines" / "absent.yaml") is None
    assert ref.list_yaml(tmp_path / "baselines") == ["x.yaml"]
    loaded = ref.loader()(tmp_path / "baselines" / "x.yaml")
    assert loaded is not None and loaded.fingerprint == {"backend": "cpu"}


def test_diff_marks_what_loosens_the_gate_in_each_metrics_direction() -> None:
    before = {
        "t1": {
            "time": {"value": 1.0, "better": "lower"},
            "tput": {"value": 100.0, "better": "higher"},
            "mem": {"value": 10, "better": "lower"},
        },
    }
    after = {
        "t1": {
            "time": {"value": 0.9, "better": "lower"},  # tighter
            "tput": {"value": 80.0, "better": "higher"},  # looser
            "extra": {"value": 1.0},
        },
        "t2": {"time": {"value": 1.0}},
    }
    changes = {(c.change, c.test, c.metric): c for c in diff_tests("b.yaml", before, after)}
    assert set(changes) == {
        ("metric changed", "t1", "time"),
        ("metric changed", "t1", "tput"),
        ("metric removed", "t1", "mem"),
        ("metric added", "t1", "extra"),
        ("test added", "t2", None),
    }
    assert not changes["metric changed", "t1", "time"].loosens
    assert changes["metric changed", "t1", "tput"].loosens
    assert changes["metric removed", "t1", "mem"].loosens
    assert changes["metric changed", "t1", "time"].detail == "value 1 -> 0.9 (-10.0%)"


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ({"value": float("nan"), "better": "lower", "kind": "time"}, True),
        ({"value": float("inf"), "better": "lower", "kind": "time"}, True),
        ({"value": -5, "better": "lower", "kind": "time"}, True),
        ({"value": "fast", "better": "lower", "kind": "time"}, True),
        ({"value": 1.0, "better": "higher", "kind": "time"}, True),  # direction flipped
        ({"value": 1.0, "better": "lower", "kind": "custom"}, True),  # kind changed
        ({"value": 1.0, "better": "lower", "kind": "time", "samples": [float("nan")] * 3}, True),
        ({"value": 1.0, "better": "lower", "kind": "time", "samples": [2.0, 2.1, 2.2]}, True),  # slower samples
        ({"value": 1.0, "better": "lower", "kind": "time", "samples": [0.9, 0.95, 1.0]}, False),  # faster samples
        ({"value": 0.9, "better": "lower", "kind": "time", "samples": [1.0, 1.1, 1.2]}, False),  # tighter value
    ],
)
def test_a_change_to_a_number_that_switches_the_gate_off_loosens_it(after: dict, expected: bool) -> None:
    from pytest_gpuperf.baselines.diff import loosens

    before = {"value": 1.0, "better": "lower", "kind": "time", "samples": [1.0, 1.1, 1.2]}
    assert loosens(before, after) is expected


def test_a_working_tree_baseline_edited_to_nan_is_listed_as_loosening_the_gate(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    git(pytester.path, "init", "-q", "-b", "main")
    pytester.makepyfile(test_rec=RECORDED.format(values={"a": 1.0}))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "baselines")
    path = baseline_path(pytester)
    path.write_text(path.read_text().replace("value: 1.0", "value: .nan"))
    result = pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-baseline-ref", "main")
    result.assert_outcomes(passed=1)  # judged against main's entry
    result.stdout.fnmatch_lines(
        [f"baselines/{path.name}: unreadable: *value must be a finite number, got nan*[[]LOOSENS THE GATE[]]"]
    )


def test_the_ref_loader_pickles_so_ranks_read_the_same_baselines(tmp_path: Path) -> None:
    """Distributed ranks are handed the pytest process's loader: it must survive pickling and read the ref."""
    import pickle

    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "x.yaml").write_text(
        "schema_version: 1\nfingerprint: {backend: cpu}\ntests:\n  t::a:\n    m: {value: 1.0}\n"
    )
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "one")
    (tmp_path / "baselines" / "x.yaml").write_text(
        "schema_version: 1\nfingerprint: {backend: cpu}\ntests:\n  t::a:\n    m: {value: 5.0}\n"
    )
    loader = pickle.loads(pickle.dumps(GitRef.resolve("main", tmp_path / "baselines").loader()))
    loaded = loader(tmp_path / "baselines" / "x.yaml")
    assert loaded is not None and loaded.tests["t::a"]["m"]["value"] == 1.0
    assert loaded.path == tmp_path / "baselines" / "x.yaml"
