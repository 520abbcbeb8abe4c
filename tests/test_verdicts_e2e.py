"""Verdicts end to end on a deterministic step: a 20x slowdown fails after a fresh-process confirmation,
noise the baseline recorded makes a slowdown inconclusive (a warning; a failure under --gpuperf-strict),
and gpuperf_processes records the spread between processes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.steps import MATMUL_CHAIN

STEP = MATMUL_CHAIN
NODE = "test_step.py::test_step[cpu]"


def baseline(pytester: pytest.Pytester) -> tuple[Path, dict]:
    [path] = (pytester.path / "baselines").glob("*.yaml")
    return path, yaml.safe_load(path.read_text())


def test_a_20x_slower_step_fails_after_a_fresh_process_confirms_it(
    pytester: pytest.Pytester, fast_args: list[str], unchanged_args: list[str]
) -> None:
    pytester.makepyfile(test_step=STEP.format(work=1))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    pytester.makepyfile(test_step=STEP.format(work=20))
    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(failed=1)
    # "confirmed in a fresh process (+N%)", or, when the first run was itself doubtful (a step that never settled on a
    # loaded runner), "confirmed in a fresh process after a doubtful first run (...)": failed by the confirmation both
    result.stdout.fnmatch_lines(["*time * > baseline *confirmed in a fresh process *(*"])
    pytester.makepyfile(test_step=STEP.format(work=1))
    pytester.runpytest("--gpuperf", *unchanged_args).assert_outcomes(passed=1)


def test_a_slowdown_within_the_recorded_spread_between_processes_is_inconclusive(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_step=STEP.format(work=1))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    path, doc = baseline(pytester)
    doc["tests"][NODE]["step.time"]["process_spread"] = 0.99  # as if processes had differed 2x on this runner
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    # The same work: any reading within 99% + 25% of it is no evidence either way (an "unchanged" run may be a
    # slower step in a fast process); the reader refuses spreads over 100%, so no wider band excuses more.
    result = pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-json", "r.json", "--junitxml", "j.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*GpuperfWarning*spread between processes is 99% here; a 25% tolerance cannot be judged*",
            # the table row: the reason's first clause (then what the step's kernels did)
            "*inconclusive (this test's spread between processes is 99% here[;)]*",
        ]
    )
    assert result.stdout.str().count("a 25% tolerance cannot be judged") == 1  # the full reason once: the warning
    doc = json.loads((pytester.path / "r.json").read_text())
    [test] = doc["gpuperf"]["tests"]
    assert next(m for m in test["metrics"] if m["metric"] == "step.time")["status"] == "inconclusive"
    properties = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "j.xml").iter("property")}
    assert "raise time_tolerance" in properties["gpuperf.step.time.inconclusive"]
    strict = pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*inconclusive*(--gpuperf-strict)*"])


def test_processes_record_the_spread_between_processes_and_the_smallest_detectable_change(
    pytester: pytest.Pytester, fast_args: list[str], unchanged_args: list[str]
) -> None:
    pytester.makepyfile(test_step=STEP.format(work=1))
    args = [a for a in fast_args]
    args[args.index("gpuperf_processes=1")] = "gpuperf_processes=3"
    pytester.runpytest("--gpuperf-update", *args).assert_outcomes(passed=1)
    _, doc = baseline(pytester)
    entry = doc["tests"][NODE]["step.time"]
    assert entry["processes"] == 3 and entry["process_spread"] >= 0.0
    assert entry["min_detectable_change"] >= 0.25  # never below the tolerance it is judged at
    result = pytester.runpytest("--gpuperf", *unchanged_args, "-rA")  # unchanged code on a loaded machine
    result.assert_outcomes(passed=1)
