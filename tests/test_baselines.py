"""Unit tests of the baseline store: parsing, errors with lines, stable output, atomic concurrent updates."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
import yaml

from pytest_gpuperf.baselines import (
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
            r"x.yaml:4: not valid YAML \(expected ',' or '\]'.*while parsing a flow sequence on line 3\)",
        ),
        ("schema_version: 2\nfingerprint: {}\n", r"x.yaml:1: schema_version is 2"),
        ("- a\n- b\n", r"x.yaml:1: top level must be a mapping"),
        ("", r"x.yaml: file is empty"),
        ("schema_version: 1\nfingerprint: {}\ntests:\n  t::x:\n    m: {unit: B}\n", r"x.yaml:5: metric 'm' of 't::x'"),
        (
            "schema_version: 1\nfingerprint: {}\ntests:\n  t::x:\n    m: {value: 1, samples: [a]}\n",
            r"x.yaml:5: .*samples must be a list of numbers",
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
    assert [p.name for p in tmp_path.iterdir()] == ["cpu.yaml"]  # no temporary file left behind


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
