"""Shared helpers for pytest-gpuperf's own tests."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy  # noqa: F401 - imported here: pytester unloads modules an in-process inner run imported first
import pytest
import torch  # noqa: F401 - likewise: a torch dropped that way fails to import again in the same process

from tests.inner_runs import ForkServer, forked_runpytest

#: Fast measuring settings for end-to-end runs on a small, shared CPU.
FAST = [
    "-o",
    "gpuperf_max_time=0.3",
    "-o",
    "gpuperf_min_samples=5",
    "-o",
    "gpuperf_processes=1",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:randomly",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--inner-runs``: how ``pytester.runpytest`` starts the suite's inner pytest runs."""
    parser.addoption(
        "--inner-runs",
        choices=("fork", "subprocess"),
        default="fork",
        help="fork: forked from one server process that imported torch once (default); "
        "subprocess: a fresh python per inner run (pytester's --runpytest=subprocess)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that runs an inner pytest through ``pytester`` is an end-to-end test: mark it ``e2e``; then
    run the end-to-end tests first.

    ``pytest tests -m "not e2e"`` then runs the unit tests alone. Tests that are end to end without pytester
    (a real subprocess, a rank pool, an installed wheel) carry ``@pytest.mark.e2e`` themselves.

    The order is for ``pytest -n 2``: xdist hands out tests in collection order, so with the seconds-long
    end-to-end tests first the last ones handed out are sub-second unit tests, which even out the workers'
    finishing times; in file order one worker could be left running a rank-pool test alone at the end.
    """
    for item in items:
        if "pytester" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)  # stable: file order within each group


@pytest.fixture(autouse=True)
def _no_outer_xdist_worker_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``pytest tests -n 2`` the processes a test starts must not believe they are xdist workers.

    pytest-xdist sets ``PYTEST_XDIST_WORKER`` (and its siblings) in each worker's environment; an inner pytest
    run, a subprocess or a rank inheriting it would take the plugin's xdist-worker paths.
    """
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def inner_run_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """The fork server of this outer pytest process (each xdist worker has its own).

    Started here, before any test's monkeypatching, so that it imports torch in the outer run's environment.
    """
    server = ForkServer(tmp_path_factory.getbasetemp())
    if request.config.getoption("--inner-runs") == "fork":
        server.start()
    yield server
    server.close()


@pytest.fixture
def pytester(
    pytester: pytest.Pytester, request: pytest.FixtureRequest, inner_run_server: ForkServer
) -> pytest.Pytester:
    """pytester whose ``runpytest`` forks the inner run from :func:`inner_run_server` (see ``tests/inner_runs.py``).

    Under ``--inner-runs subprocess`` or for a test marked ``fresh_process``, inner runs are new processes.
    """
    fork = request.config.getoption("--inner-runs") == "fork" and not request.node.get_closest_marker("fresh_process")
    if fork:
        pytester.runpytest = functools.partial(forked_runpytest, pytester, inner_run_server)  # type: ignore[method-assign]
    return pytester


@pytest.fixture(autouse=True)
def _inner_runs_on_the_cpu_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs measure on the CPU backend unless a test names another backend on its command line.

    On a GPU machine every available backend is selected by default, which would turn each inner test into a
    ``[cuda]`` and a ``[cpu]`` instance; the end-to-end tests describe one backend's behaviour. Tests of the
    default selection itself carry ``@pytest.mark.default_backends``.
    """
    if "pytester" in request.fixturenames and request.node.get_closest_marker("default_backends") is None:
        request.getfixturevalue("pytester")  # pytester clears PYTEST_ADDOPTS when it starts: set it afterwards
        monkeypatch.setenv("PYTEST_ADDOPTS", "--gpuperf-backend cpu")


@pytest.fixture(scope="session")
def steady_calibration_value() -> str:
    """This outer process's host-CPU calibration (measured once), which all its inner runs read."""
    from pytest_gpuperf.timing.calibration import measure_calibration

    return f"{measure_calibration().wall:.4g}"


@pytest.fixture(autouse=True)
def _inner_runs_read_one_calibration(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process an end-to-end test starts reads one host calibration (``GPUPERF_PIN_CALIBRATION``).

    The calibration is real, and on a loaded 2-core CI machine two inner runs seconds apart read it more than the
    machine rule's 12% apart: a recorded, then 20x slower step became "another machine state, inconclusive"
    instead of the failure its test asserts. The machine rule is tested with injected calibrations; a test of
    the measured calibration itself carries ``@pytest.mark.real_calibration``.
    """
    if "pytester" not in request.fixturenames:
        return
    if request.node.get_closest_marker("real_calibration"):
        # Nothing of the host shared either: its inner runs measure the roofs themselves (tests/fork_server.py).
        monkeypatch.setenv("GPUPERF_TEST_REAL_ROOFS", "1")
        return
    from pytest_gpuperf.backends.cpu import BRAND_ENV, cpu_brand
    from pytest_gpuperf.timing.calibration import PIN_ENV

    monkeypatch.setenv(PIN_ENV, request.getfixturevalue("steady_calibration_value"))
    monkeypatch.setenv(BRAND_ENV, cpu_brand())  # read once here, not by a CPUID subprocess in every inner run


@pytest.fixture
def fast_args() -> list[str]:
    """Command-line flags that keep measuring short in end-to-end tests."""
    return list(FAST)


#: Judging unchanged code on a loaded 2-core machine: a step's CPU time moves up to ~1.5x between processes there
#: (and up to 4x on a busy VM), so a run whose assertion is "unchanged code passes" judges time at a 4x tolerance;
#: the slowdowns the suite's tests inject are 8x-20x the work, far beyond it.
UNCHANGED_TOLERANCE = ["-o", "gpuperf_cpu_time_tolerance=3"]


@pytest.fixture
def unchanged_args(fast_args: list[str]) -> list[str]:
    """:func:`fast_args` for a run of unchanged code whose time must not decide the outcome (a 4x tolerance)."""
    return [*fast_args, *UNCHANGED_TOLERANCE]
