"""Every command a message recommends does what the message says: each test runs the command it was shown.

The step's work is a deterministic matmul chain; the slowdown is 8x the work (far beyond any noise), and the
noisy recording is injected into the baseline file, so no assertion depends on this machine's speed.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.steps import MATMUL_CHAIN

STEP = MATMUL_CHAIN
NODE = "test_step.py::test_step[cpu]"
GLOB = re.sub(r"([\[\]])", r"[\1]", NODE)  # the node id as an fnmatch pattern
COMMAND = re.compile(r"pytest --gpuperf --gpuperf-update(?: --gpuperf-[a-z-]+| -o gpuperf_[a-z_]+=\d+)* '[^']+'")


def suggested(output: str) -> list[str]:
    """The first command the output recommends, as arguments for pytester (without ``pytest``)."""
    found = COMMAND.search(output)
    assert found, f"no command suggested in:\n{output}"
    return shlex.split(found.group(0))[1:]


def entry(pytester: pytest.Pytester) -> tuple[Path, dict, dict]:
    [path] = (pytester.path / "baselines").glob("*.yaml")
    doc = yaml.safe_load(path.read_text())
    return path, doc, doc["tests"][NODE]["step.time"]


def test_an_entry_too_noisy_to_decide_says_so_and_the_command_it_suggests_replaces_it(
    pytester: pytest.Pytester, fast_args: list[str], unchanged_args: list[str]
) -> None:
    pytester.makepyfile(test_step=STEP.format(work=1))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    path, doc, stored = entry(pytester)
    stored["process_spread"] = 0.99  # as if the recording's processes had differed 2x on a busy runner
    path.write_text(yaml.safe_dump(doc, sort_keys=False))

    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(passed=1)
    output = result.stdout.str()
    assert "inconclusive" in output and "spread between processes is 99% here" in output
    result.stdout.fnmatch_lines(["test_step.py:*", "*GpuperfWarning: *spread between processes*"])  # the test's place
    assert "session.py" not in output
    command = suggested(output)
    assert command == ["--gpuperf", "--gpuperf-update", "-o", "gpuperf_processes=3", NODE]  # more than recorded

    # Unchanged code re-recorded from more processes, as suggested (their own spread judged at the 4x tolerance of
    # unchanged runs: three processes of this tiny step can differ by more than 25% on a loaded CI machine).
    fixed = pytester.runpytest(*unchanged_args, *command)  # the old entry would have been kept otherwise
    fixed.assert_outcomes(passed=1)
    # Replaced as undecidable, or (a 99% spread is within the 4x tolerance of unchanged runs) as recorded from more
    # processes than the entry: either way by the suggested command.
    fixed.stdout.fnmatch_lines(["*1 judged entr(ies) moved (old -> new):", f"*{GLOB} step.time: *"])
    assert "its recorded spread" in fixed.stdout.str() or "recorded from 3 processes (was 1)" in fixed.stdout.str()
    assert entry(pytester)[2]["process_spread"] < 0.99
    again = pytester.runpytest("--gpuperf", *unchanged_args)
    again.assert_outcomes(passed=1)
    assert "inconclusive" not in again.stdout.str()


def test_an_intended_slowdown_is_recorded_by_the_command_its_failure_suggests_and_never_silently(
    pytester: pytest.Pytester, fast_args: list[str], unchanged_args: list[str]
) -> None:
    pytester.makepyfile(test_step=STEP.format(work=1))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    path, _, _ = entry(pytester)
    recorded = path.read_text()

    pytester.makepyfile(test_step=STEP.format(work=8))
    failed = pytester.runpytest("--gpuperf", *fast_args)
    failed.assert_outcomes(failed=1)
    command = suggested(failed.stdout.str())
    assert command == ["--gpuperf", "--gpuperf-update", "--gpuperf-accept-slower", NODE]

    plain = pytester.runpytest("--gpuperf", "--gpuperf-update", NODE, *fast_args)  # without the flag
    plain.assert_outcomes(passed=1)
    plain.stdout.fnmatch_lines(
        [
            "*1 time/throughput entr(ies) measured slower past their tolerance and were NOT written*"
            "--gpuperf-accept-slower*",
            f"    {GLOB} step.time: * -> * (+*",
        ]
    )
    assert path.read_text() == recorded  # the gate did not loosen

    accepted = pytester.runpytest(*command, *fast_args)
    accepted.assert_outcomes(passed=1)
    # the time moved, and the bound class read from it may have moved with it (written together)
    accepted.stdout.fnmatch_lines(["* judged entr(ies) moved (old -> new):", f"    {GLOB} step.time: * -> * (+*"])
    assert path.read_text() != recorded
    pytester.runpytest("--gpuperf", *unchanged_args).assert_outcomes(passed=1)
