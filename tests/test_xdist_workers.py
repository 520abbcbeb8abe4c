"""pytest-xdist: one GPU per worker, distributed tests kept off workers, all workers' baselines and results kept."""

from __future__ import annotations

import json

import pytest
import yaml

from pytest_gpuperf.workers.gpus import (
    ENV_GPUS,
    detect_gpus,
    gpu_for_worker,
    parse_gpu_setting,
    pin_worker,
    sharing_warning,
    worker_index,
)

MANY = 30

RECORDED_MANY = f"""
import pytest

@pytest.mark.parametrize("i", range({MANY}))
def test_many(gpuperf, i):
    gpuperf.record("script.latency", 1.0 + i / 1000, "s")
    gpuperf.record("script.items", 100 + i, "items", better="higher")
"""


def test_workers_map_to_gpus_round_robin() -> None:
    assert [worker_index(w) for w in ("gw0", "gw12", "master", "")] == [0, 12, None, None]
    assert [gpu_for_worker(f"gw{i}", ["0", "1", "2", "3"]) for i in range(6)] == ["0", "1", "2", "3", "0", "1"]
    assert gpu_for_worker("gw1", []) is None and gpu_for_worker("master", ["0"]) is None


def test_gpu_setting_respects_cuda_visible_devices_and_explicit_lists() -> None:
    assert parse_gpu_setting("auto", env={"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert parse_gpu_setting("auto", env={"CUDA_VISIBLE_DEVICES": ""}) == []
    assert detect_gpus(env={"CUDA_VISIBLE_DEVICES": "GPU-1a2b, GPU-3c4d"}) == ["GPU-1a2b", "GPU-3c4d"]
    assert parse_gpu_setting("0, 4,5") == ["0", "4", "5"]
    assert parse_gpu_setting("off", env={"CUDA_VISIBLE_DEVICES": "0,1"}) == []


def test_pin_worker_sets_cuda_visible_devices_from_the_controllers_list() -> None:
    env = {ENV_GPUS: "4,6", "PYTEST_XDIST_WORKER": "gw3"}
    assert pin_worker(env) == "6" and env["CUDA_VISIBLE_DEVICES"] == "6"
    untouched = {"PYTEST_XDIST_WORKER": "gw0"}
    assert pin_worker(untouched) is None and "CUDA_VISIBLE_DEVICES" not in untouched


def test_more_workers_than_gpus_is_warned_about() -> None:
    assert sharing_warning(2, ["0", "1"]) is None
    assert "3 xdist workers share 2 GPU(s) 0,1" in (sharing_warning(3, ["0", "1"]) or "")


def test_three_workers_record_many_baselines_and_every_entry_lands_in_the_file(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_many=RECORDED_MANY)
    result = pytester.runpytest("-n", "3", "-v", "--gpuperf-update", *fast_args, "--gpuperf-json", "r.json")
    result.assert_outcomes(passed=MANY)
    [path] = sorted((pytester.path / "baselines").glob("*.yaml"))
    tests = yaml.safe_load(path.read_text())["tests"]
    expected = {f"test_many.py::test_many[{i}-cpu]": i for i in range(MANY)}
    assert set(tests) == set(expected)
    for node_id, i in expected.items():
        assert tests[node_id]["script.latency"]["value"] == pytest.approx(1.0 + i / 1000)
        assert tests[node_id]["script.items"]["value"] == 100 + i
    # The controller's summary and its JSON hold every worker's results.
    out = result.stdout.str()
    assert all(f"{node_id}  [" in out for node_id in expected)
    doc = json.loads((pytester.path / "r.json").read_text())
    assert {t["nodeid"] for t in doc["gpuperf"]["tests"]} == set(expected)
    assert doc["gpuperf"]["summary"]["recorded"] == MANY

    # A second run from three workers is judged against those entries: all unchanged.
    again = pytester.runpytest("-n", "3", "--gpuperf", *fast_args, "--gpuperf-json", "r.json")
    again.assert_outcomes(passed=MANY)
    assert json.loads((pytester.path / "r.json").read_text())["gpuperf"]["summary"]["unchanged"] == MANY


PINNED_CONFTEST = """
import os
from pathlib import Path

worker = os.environ.get("PYTEST_XDIST_WORKER")
if worker:  # written at conftest import, before any test module could import torch
    (Path(__file__).parent / f"pin-{worker}.txt").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
"""

PINNED_TESTS = """
import os
import pytest

@pytest.mark.parametrize("i", range(6))
def test_single(gpuperf, i):
    gpuperf.record("script.latency", 1.0, "s")

@pytest.mark.gpuperf_distributed(world_size=2)
def test_allreduce(gpuperf):
    raise AssertionError("a distributed test must not run on an xdist worker")

def test_script_on_ranks(gpuperf, gpuperf_torchrun):
    raise AssertionError("a torchrun test must not run on an xdist worker")
"""


def test_each_worker_is_pinned_before_conftests_load_and_distributed_tests_stay_off_workers(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makeconftest(PINNED_CONFTEST)
    pytester.makepyfile(test_pinned=PINNED_TESTS)
    result = pytester.runpytest("-n", "3", "--gpuperf", *fast_args, "-o", "gpuperf_worker_gpus=5,7", "-rs")
    result.assert_outcomes(passed=6, skipped=2)
    pins = {p.stem.removeprefix("pin-"): p.read_text() for p in pytester.path.glob("pin-gw*.txt")}
    assert pins == {"gw0": "5", "gw1": "7", "gw2": "5"}
    result.stdout.fnmatch_lines(
        [
            "*xdist: 3 worker(s), GPUs 5,7 (worker gwN uses GPU N mod 2)*",
            "*3 xdist workers share 2 GPU(s) 5,7*Use -n 2*",
            "*distributed perf tests need every GPU*run them in their own invocation without -n*",
        ]
    )


def test_without_gpus_workers_are_left_alone(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # GPU images often set it; "left alone" = unset here
    pytester.makeconftest(PINNED_CONFTEST)
    pytester.makepyfile(test_pinned=PINNED_TESTS)
    result = pytester.runpytest("-n", "2", "--gpuperf", *fast_args, "-o", "gpuperf_worker_gpus=off", "-k", "single")
    result.assert_outcomes(passed=6)
    pins = {p.stem.removeprefix("pin-"): p.read_text() for p in pytester.path.glob("pin-gw*.txt")}
    assert pins == {"gw0": "unset", "gw1": "unset"}
