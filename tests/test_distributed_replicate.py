"""``run_in_fresh_processes``: a perf test measured again in fresh worker processes (gloo-free solo workers)."""

from __future__ import annotations

import json

import pytest

CONFTEST = """
import json
import os

import pytest

from pytest_gpuperf.distributed.replicate import ReplicaError, run_in_fresh_processes


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield
    record = {"test": item.name, "pytest_pid": os.getpid(), "calls": []}
    for processes in (2, 1):
        try:
            runs = run_in_fresh_processes(item, processes=processes, timeout=120)
        except ReplicaError as exc:
            record["calls"].append({"error": str(exc)})
            break
        record["calls"].append(
            [
                {
                    "pid": run.pid,
                    "status": run.status,
                    "ok": run.ok,
                    "metrics": {m["name"]: m["value"] for m in run.metric_dicts()},
                    "samples": {m.name: len(m.samples) for m in run.metrics},
                    "stdout": run.stdout,
                    "error": run.error,
                }
                for run in runs
            ]
        )
    with open(os.path.join(str(item.config.rootpath), "replicas.jsonl"), "a") as out:
        out.write(json.dumps(record) + "\\n")
"""

TESTS = """
import os

import pytest
import torch


@pytest.fixture
def rows():
    return 64


@pytest.mark.parametrize("scale", [3])
def test_a_measures(gpuperf, rows, scale):
    x = torch.randn(rows, 256)
    gpuperf.measure(lambda: x * scale, name="scaled")
    print("body ran in", os.getpid(), "worker" if os.environ.get("GPUPERF_POOL_WORKER") else "pytest")


def test_b_records(gpuperf):
    gpuperf.record("answer", 42.0, unit="x")


def test_c_raises_in_a_worker(gpuperf):
    if os.environ.get("GPUPERF_POOL_WORKER"):
        raise ValueError("only in the worker")


def test_d_dies_in_a_worker(gpuperf):
    if os.environ.get("GPUPERF_POOL_WORKER"):
        print("last words before os._exit", flush=True)
        os._exit(7)


@pytest.fixture
def unpicklable():
    return lambda: 1


def test_e_takes_an_unpicklable_fixture(gpuperf, unpicklable):
    pass


@pytest.fixture(scope="module")
def model(gpuperf_device):
    torch.manual_seed(0)
    return torch.nn.Linear(32, 8).to(gpuperf_device)  # the README's module-scoped model fixture


def test_g_uses_a_module_scoped_model(gpuperf, model):
    x = torch.randn(16, 32)
    gpuperf.record("out_features", float(model(x).shape[1]), unit="x")


class TestF:
    def setup_method(self, method):
        self.width = 32  # set on each fresh instance, as pytest does

    def test_method(self, gpuperf, rows):
        x = torch.randn(rows, self.width)
        gpuperf.record("width", float(x.shape[1]), unit="x")
"""


def test_a_perf_test_runs_again_in_fresh_processes_that_are_reused_across_tests(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_replicas=TESTS)
    result = pytester.runpytest("--gpuperf", *fast_args, "-v")  # -v: the replicas' cost line too
    result.assert_outcomes(passed=7)
    records = {r["test"]: r for r in map(json.loads, (pytester.path / "replicas.jsonl").read_text().splitlines())}

    first, again = records["test_a_measures[3-cpu]"]["calls"]
    pytest_pid = records["test_a_measures[3-cpu]"]["pytest_pid"]
    assert [run["ok"] for run in first] == [True, True]
    pids = {run["pid"] for run in first}
    assert len(pids) == 2 and pytest_pid not in pids, "two distinct processes, neither the pytest process"
    for run in first:
        assert run["metrics"]["scaled.time"] > 0 and run["metrics"]["scaled.peak_memory"] >= 0
        assert run["samples"]["scaled.time"] >= 5  # measured with the session's settings (--gpuperf-min-samples 5)
        assert "worker" in run["stdout"]
    assert again[0]["ok"] and again[0]["pid"] not in pids, "a second call runs in a process new to this test"

    b_first, _ = records["test_b_records[cpu]"]["calls"]
    assert [run["metrics"] for run in b_first] == [{"answer": 42.0}, {"answer": 42.0}]
    assert {run["pid"] for run in b_first} <= pids | {again[0]["pid"]}, "workers are reused across tests"

    c_first = records["test_c_raises_in_a_worker[cpu]"]["calls"][0]
    assert [run["status"] for run in c_first] == ["error", "error"]
    assert "ValueError: only in the worker" in c_first[0]["error"]

    d_first = records["test_d_dies_in_a_worker[cpu]"]["calls"][0]
    assert [run["status"] for run in d_first] == ["died", "died"]
    assert "last words before os._exit" in d_first[0]["error"]
    assert "the worker died without reporting (exited with code 7)" in d_first[0]["error"]  # issue 24: how it died

    g_first, _ = records["test_g_uses_a_module_scoped_model[cpu]"]["calls"]  # tensors travel by value
    assert [run["metrics"] for run in g_first] == [{"out_features": 8.0}, {"out_features": 8.0}], g_first

    f_first, _ = records["test_method[cpu]"]["calls"]  # a method runs on a fresh instance, setup_method first
    assert [run["metrics"] for run in f_first] == [{"width": 32.0}, {"width": 32.0}]

    e_calls = records["test_e_takes_an_unpicklable_fixture[cpu]"]["calls"]
    assert "cannot be sent to another process" in e_calls[0]["error"]
    assert "'unpicklable'" in e_calls[0]["error"]
    result.stdout.fnmatch_lines(
        [
            "*gpuperf replicas: * run(s) in fresh processes on * worker start(s)*",
            "*gpuperf replicas: 6 run(s) did not finish; * First: "
            "test_replicas.py::test_c_raises_in_a_worker[[]cpu[]]: "
            "error: ValueError: only in the worker",
        ]
    )


def test_replicating_needs_gpuperf(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_replicas="def test_plain(gpuperf):\n    pass\n")
    result = pytester.runpytest(*fast_args)
    result.assert_outcomes(passed=1)
    record = json.loads((pytester.path / "replicas.jsonl").read_text())
    assert "needs --gpuperf" in record["calls"][0]["error"]


def test_a_baseline_recorded_from_fewer_processes_than_asked_says_so(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(
        test_partial="""
import os
import torch

def test_only_here(gpuperf):
    if os.environ.get("GPUPERF_POOL_WORKER"):
        raise ValueError("not in a worker")
    x = torch.randn(64, 64)
    gpuperf.measure(lambda: x @ x)
"""
    )
    result = pytester.runpytest("--gpuperf-update", *fast_args, "-o", "gpuperf_processes=3")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_only_here[[]cpu[]]: baseline recorded from 1 of 3 processes; 2 fresh process(es) did not finish*",
            "*gpuperf replicas: 2 run(s) did not finish*ValueError: not in a worker",
        ]
    )
