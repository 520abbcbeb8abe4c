"""Unit tests of the baseline store: parsing, errors with lines, stable output, atomic concurrent updates."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
import yaml

from pytest_gpuperf.baselines import (
    MAX_SAMPLES,
    BaselineError,
    BaselineFile,
    load_baseline_file,
    parse_baseline_text,
    render_baseline,
    update_baseline_file,
)

FINGERPRINT = {"backend": "cpu", "device_name": "Test CPU", "arch": "x86_64", "memory_gib": 24, "world_size": 1}


def entry(value: float) -> dict:
    return {"value": value, "unit": "B", "better": "lower", "kind": "memory"}


def test_render_is_stable_and_sorted_so_pr_diffs_stay_small(tmp_path: Path) -> None:
    tests = {
        "t.py::b": {"step.time": {"kind": "time", "value": 0.5, "better": "lower", "unit": "s", "samples": [0.5, 0.6]}},
        "t.py::a": {"step.peak_memory": entry(10)},
    }
    text = render_baseline(BaselineFile(tmp_path / "x.yaml", dict(FINGERPRINT), tests))
    assert text == render_baseline(BaselineFile(tmp_path / "x.yaml", dict(FINGERPRINT), dict(reversed(tests.items()))))
    assert text.index("t.py::a") < text.index("t.py::b")
    assert "samples: [0.5, 0.6]" in text
    time_block = text[text.index("step.time:") :]
    assert time_block.index("value: 0.5") < time_block.index("unit: s") < time_block.index("better: lower")
    assert parse_baseline_text(tmp_path / "x.yaml", text).tests == {k: tests[k] for k in sorted(tests)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "schema_version: 1\nfingerprint: {a: 1}\ntests: [unclosed\n",
            r"x.yaml:4: not valid YAML \(.*expected ',' or '\]'.*while parsing a flow sequence on line 3\)",
        ),
        ("schema_version: 0\nfingerprint: {}\n", r"x.yaml:1: schema_version is 0"),
        ("schema_version: true\nfingerprint: {}\n", r"x.yaml:1: schema_version is True"),
        ("fingerprint: {}\nschema_version: '1'\n", r"x.yaml:2: schema_version is '1'"),
        ("- a\n- b\n", r"x.yaml:1: top level must be a mapping"),
        ("", r"x.yaml: file is empty"),
        ("schema_version: 1\nfingerprint: {}\ntests:\n  t::x:\n    m: {unit: B}\n", r"x.yaml:5: metric 'm' of 't::x'"),
        (
            "schema_version: 1\nfingerprint: {}\ntests:\n  t::x:\n    m: {value: 1, samples: [a]}\n",
            r"x.yaml:5: .*samples must be a list of numbers: samples\[0\] must be a number, got 'a'",
        ),
    ],
)
def test_malformed_files_raise_an_error_naming_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(BaselineError, match=expected) as info:
        parse_baseline_text(tmp_path / "x.yaml", text)
    assert "left untouched" in str(info.value)


def test_update_refuses_to_overwrite_a_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    path.write_text("schema_version: 1\ntests: [oops\n")
    with pytest.raises(BaselineError):
        update_baseline_file(path, FINGERPRINT, {"t::a": {"m": entry(1)}})
    assert path.read_text() == "schema_version: 1\ntests: [oops\n"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


def test_update_replaces_only_the_tests_given(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    update_baseline_file(path, FINGERPRINT, {"t::a": {"m": entry(1)}, "t::b": {"m": entry(2)}})
    update_baseline_file(path, FINGERPRINT, {"t::a": {"m": entry(3)}})
    loaded = load_baseline_file(path)
    assert loaded is not None
    assert loaded.tests == {"t::a": {"m": entry(3)}, "t::b": {"m": entry(2)}}


def _writer(args: tuple[str, int]) -> None:
    path, index = args
    for round_ in range(5):
        update_baseline_file(Path(path), FINGERPRINT, {f"t::w{index}_{round_}": {"m": entry(index * 10 + round_)}})


@pytest.mark.e2e
def test_concurrent_updates_from_several_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_writer, [(str(path), i) for i in range(8)])
    data = yaml.safe_load(path.read_text())
    assert set(data["tests"]) == {f"t::w{i}_{r}" for i in range(8) for r in range(5)}
    assert data["tests"]["t::w7_4"]["m"]["value"] == 74


def test_values_from_torch_and_numpy_are_written_as_plain_yaml(tmp_path: Path) -> None:
    import numpy as np

    class Version(str):
        pass

    path = tmp_path / "cpu.yaml"
    fingerprint = {**FINGERPRINT, "torch": Version("2.13.0")}
    update_baseline_file(path, fingerprint, {"t::a": {"m": {"value": np.float64(1.5), "samples": [np.float32(2.0)]}}})
    data = yaml.safe_load(path.read_text())
    assert data["fingerprint"]["torch"] == "2.13.0"
    assert data["tests"]["t::a"]["m"] == {"value": 1.5, "samples": [2.0]}


# -- numbers that would switch the gate off (issue 12, row 1) ----------------------------------------------
HEAD = "schema_version: 1\nfingerprint: {backend: cpu}\ntests:\n  t.py::a:\n"


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        (
            "    step.time: {value: .nan, unit: s, better: lower, kind: time}\n",
            "value must be a finite number, got nan",
        ),
        ("    step.time: {value: .inf, unit: s, kind: time}\n", "value must be a finite number, got inf"),
        ("    step.time: {value: 0.0, unit: s, kind: time}\n", r"value must be > 0, got 0.0 \(kind time\)"),
        ("    step.peak_memory: {value: -5, unit: B, kind: memory}\n", r"value must be >= 0, got -5 \(kind memory\)"),
        ("    step.throughput: {value: -1.0, kind: throughput}\n", "value must be > 0"),
        ("    step.time: {value: 0.1, kind: time, samples: [.nan, .nan, .nan]}\n", r"samples\[0\] must be a finite"),
        ("    step.time: {value: 0.1, kind: time, samples: [0.1, -0.1]}\n", r"samples\[1\] must be > 0"),
        ("    m: {value: .nan, kind: custom}\n", "value must be a finite number, got nan"),
        ("    m: {value: true}\n", "value must be a number, got True"),
        ("    step.peak_memory: {value: fast, unit: B, kind: memory}\n", r"value must be a number, got 'fast'"),
        ("    step.bound: {value: '', kind: category}\n", "value of a category must be a non-empty word"),
        ("    step.bound: {value: 3, kind: category}\n", "value of a category must be a non-empty word, got 3"),
        ("    m: {value: 1, unit: 123}\n", "unit must be a string, got 123"),
        ("    m: {value: 1, better: faster}\n", "better must be one of lower, higher, equal, got 'faster'"),
    ],
)
def test_non_finite_negative_or_mistyped_numbers_are_schema_errors_naming_file_line_test_metric(
    tmp_path: Path, metric: str, expected: str
) -> None:
    name = metric.split(":")[0].strip()
    with pytest.raises(BaselineError, match=rf"x.yaml:5: metric '{name}' of 't.py::a': .*{expected}"):
        parse_baseline_text(tmp_path / "x.yaml", HEAD + metric)


def test_a_newer_schema_version_asks_to_upgrade_the_plugin_not_to_delete_the_file(tmp_path: Path) -> None:
    with pytest.raises(BaselineError) as info:
        parse_baseline_text(tmp_path / "x.yaml", "# c\nschema_version: 7\nfingerprint: {}\n")
    assert "x.yaml:2: schema_version 7 was written by a newer pytest-gpuperf" in str(info.value)
    assert "upgrade pytest-gpuperf" in str(info.value)
    assert "delete it" not in str(info.value)


def test_python_tags_are_refused_with_file_and_line(tmp_path: Path) -> None:
    text = HEAD + "    m: {value: !!python/object/apply:os.system ['true']}\n"
    with pytest.raises(BaselineError, match=r"x.yaml:5: not valid YAML"):
        parse_baseline_text(tmp_path / "x.yaml", text)


# -- size caps (issue 12, rows 2 and 8) -----------------------------------------------------------------------
def test_an_oversized_sample_list_is_refused_before_its_numbers_are_built(tmp_path: Path) -> None:
    samples = ", ".join(["0.5"] * (MAX_SAMPLES + 1))
    text = HEAD + f"    step.time:\n      value: 0.5\n      kind: time\n      samples: [{samples}]\n"
    with pytest.raises(BaselineError, match=r"x.yaml:8: metric 'step.time' of 't.py::a': samples holds 1001 values"):
        parse_baseline_text(tmp_path / "x.yaml", text)


def test_an_oversized_file_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpuperf.baselines import schema

    path = tmp_path / "big.yaml"
    path.write_text(HEAD + "    m: {value: 1}\n" + "#" * 2000)
    monkeypatch.setattr(schema, "MAX_FILE_BYTES", 1000)
    with pytest.raises(BaselineError, match=r"big.yaml: holds more than the 1000 bytes read"):
        load_baseline_file(path)


def _big_file(n_tests: int) -> str:
    tests = {
        f"perf/test_m.py::test_{i}[cpu]": {
            "step.time": {"value": 0.001, "unit": "s", "better": "lower", "kind": "time", "samples": [0.001] * 30},
            "step.peak_memory": entry(1024 * i),
        }
        for i in range(n_tests)
    }
    return render_baseline(BaselineFile(Path("x.yaml"), dict(FINGERPRINT), tests))


def test_a_file_is_composed_once_however_many_metrics_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Line numbers come from one node tree; the old reader composed the whole file once per metric."""
    calls = {"n": 0}
    real_compose = yaml.compose
    loaders = [c for c in (getattr(yaml, "CSafeLoader", None), yaml.SafeLoader) if c is not None]
    real_nodes = {c: c.get_single_node for c in loaders}

    def counting_compose(*args, **kwargs):
        calls["n"] += 1
        return real_compose(*args, **kwargs)

    monkeypatch.setattr(yaml, "compose", counting_compose)
    for cls in loaders:

        def counting_node(self, _real=real_nodes[cls]):
            calls["n"] += 1
            return _real(self)

        monkeypatch.setattr(cls, "get_single_node", counting_node)
    loaded = parse_baseline_text(Path("x.yaml"), _big_file(200))
    assert len(loaded.tests) == 200
    assert calls["n"] == 1


# -- compact, reviewable files (issue 11, row 6) --------------------------------------------------------------
def test_throughput_samples_are_derived_from_the_time_samples_not_stored_twice(tmp_path: Path) -> None:
    text = HEAD + (
        "    step.throughput: {value: 2000.0, unit: items/s, better: higher, kind: throughput}\n"
        "    step.time: {value: 0.5, unit: s, better: lower, kind: time, samples: [0.4, 0.5, 1.0]}\n"
        "    other.throughput: {value: 5.0, kind: throughput, samples: [4.0, 5.0]}\n"
    )
    loaded = parse_baseline_text(tmp_path / "x.yaml", text)
    assert loaded.tests["t.py::a"]["step.throughput"]["samples"] == pytest.approx([1000.0, 2000.0, 2500.0])
    assert loaded.tests["t.py::a"]["other.throughput"]["samples"] == [4.0, 5.0]  # no time sibling: kept as stored
    assert "samples" not in loaded.stored["t.py::a"]["step.throughput"]
    path = tmp_path / "x.yaml"
    path.write_text(render_baseline(loaded))
    assert load_baseline_file(path).tests == loaded.tests  # type: ignore[union-attr]


def test_drift_probe_fields_of_old_files_are_ignored_and_not_written_again(tmp_path: Path) -> None:
    old = "normalized: [.nan, 1.0], reference: matmul"
    text = HEAD + f"    step.time: {{value: 0.5, kind: time, samples: [0.5], {old}}}\n"
    loaded = parse_baseline_text(tmp_path / "x.yaml", text)
    assert set(loaded.tests["t.py::a"]["step.time"]) == {"value", "kind", "samples"}
    assert "normalized" not in render_baseline(loaded)
    assert "reference" not in render_baseline(loaded)


def test_an_update_that_changes_nothing_leaves_the_file_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    path.write_text(_big_file(3) + "# a comment the renderer would drop\n")
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    loaded = load_baseline_file(path)
    assert loaded is not None
    update_baseline_file(
        path,
        {**FINGERPRINT, "torch": "9.9"},
        {"perf/test_m.py::test_1[cpu]": loaded.stored["perf/test_m.py::test_1[cpu]"]},
    )
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime


# -- writing: modes, temp files, refused entries (issue 12, rows 3, 10, 11) ----------------------------------
def test_an_update_keeps_the_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    update_baseline_file(path, FINGERPRINT, {"t::a": {"m": entry(1)}})
    path.chmod(0o644)
    update_baseline_file(path, FINGERPRINT, {"t::a": {"m": entry(2)}})
    assert path.stat().st_mode & 0o777 == 0o644
    path.chmod(0o664)
    update_baseline_file(path, FINGERPRINT, {"t::a": {"m": entry(3)}})
    assert path.stat().st_mode & 0o777 == 0o664


def test_a_new_file_gets_the_umask_mode_not_0600(tmp_path: Path) -> None:
    import os

    old = os.umask(0o022)
    try:
        update_baseline_file(tmp_path / "cpu.yaml", FINGERPRINT, {"t::a": {"m": entry(1)}})
    finally:
        os.umask(old)
    assert (tmp_path / "cpu.yaml").stat().st_mode & 0o777 == 0o644


def test_temp_files_of_a_killed_writer_are_swept_by_the_next_update(tmp_path: Path) -> None:
    stale = tmp_path / ".cpu.yaml.k2j3_x9.tmp"
    stale.write_text("half a file")
    other = tmp_path / ".keep.tmp"
    other.write_text("not ours")
    update_baseline_file(tmp_path / "cpu.yaml", FINGERPRINT, {"t::a": {"m": entry(1)}})
    assert not stale.exists()
    assert other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gitignore", ".gpuperf.lock", ".keep.tmp", "cpu.yaml"]


def test_the_lock_file_beside_the_baselines_is_ignored_by_git(tmp_path: Path) -> None:
    update_baseline_file(tmp_path / "cpu.yaml", FINGERPRINT, {"t::a": {"m": entry(1)}})
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gitignore", ".gpuperf.lock", "cpu.yaml"]
    assert {".gpuperf.lock", ".*.tmp"} <= set((tmp_path / ".gitignore").read_text().splitlines())


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({"unit": "B"}, "needs a 'value'"),
        ({"value": None}, "needs a 'value'"),
        ({"value": [1, 2], "kind": "custom"}, "value must be a number"),
        ({"value": float("nan"), "kind": "time"}, "finite"),
        ({"value": 1.0, "unit": 123}, "unit must be a string"),
    ],
)
def test_an_entry_the_reader_would_refuse_is_never_written(tmp_path: Path, bad: dict, expected: str) -> None:
    path = tmp_path / "cpu.yaml"
    update_baseline_file(path, FINGERPRINT, {"t::a": {"m": entry(1)}})
    before = path.read_text()
    with pytest.raises(
        BaselineError, match=f"refusing to record metric 'm' of 't::b': .*{expected}.*nothing was written"
    ):
        update_baseline_file(path, FINGERPRINT, {"t::b": {"m": bad}, "t::a": {"m": entry(5)}})
    assert path.read_text() == before


def test_a_baselines_path_that_is_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "baselines").write_text("oops")
    with pytest.raises(NotADirectoryError, match=r"baselines path .*baselines exists but is not a directory"):
        update_baseline_file(tmp_path / "baselines" / "cpu.yaml", FINGERPRINT, {"t::a": {"m": entry(1)}})


KILLED_WRITER = """
import sys
from pathlib import Path
from pytest_gpuperf.baselines import update_baseline_file

path = Path(sys.argv[1])
fingerprint = {"backend": "cpu", "device_name": "Test CPU", "arch": "x86_64", "memory_gib": 24, "world_size": 1}
round_ = 0
print("started", flush=True)
while True:
    round_ += 1
    entries = {
        f"t::case_{i}": {"step.time": {"value": 0.001 * (1 + round_ % 7), "kind": "time", "samples": [0.001] * 30}}
        for i in range(300)
    }
    update_baseline_file(path, fingerprint, entries)
"""


@pytest.mark.e2e
def test_a_writer_killed_mid_update_leaves_the_old_or_the_complete_new_file_and_its_temp_file_is_swept(
    tmp_path: Path,
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "cpu.yaml"
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for delay in (0.3, 0.45, 0.6, 0.75, 0.9):
        writer = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, env=env)
        assert writer.stdout is not None and writer.stdout.readline() == b"started\n"
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        if path.exists():  # the old or the complete new file, never half of one
            loaded = load_baseline_file(path)
            assert loaded is not None and len(loaded.tests) == 300
    update_baseline_file(path, FINGERPRINT, {"t::case_0": {"m": entry(1)}})
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_custom_metric_may_hold_a_word_but_a_timing_or_memory_metric_may_not(tmp_path: Path) -> None:
    text = HEAD + "    step.roof_share: {value: counting error, kind: custom}\n"
    loaded = parse_baseline_text(tmp_path / "x.yaml", text)
    assert loaded.tests["t.py::a"]["step.roof_share"]["value"] == "counting error"
    with pytest.raises(BaselineError, match="value must be a number, got 'slow' \\(kind time\\)"):
        parse_baseline_text(tmp_path / "x.yaml", HEAD + "    step.time: {value: slow, kind: time}\n")
