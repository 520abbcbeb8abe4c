"""Shared helpers for pytest-gpuperf's own tests."""

from __future__ import annotations

import pytest

#: Fast measuring settings for end-to-end runs on a small, shared CPU.
FAST = [
    "--gpuperf-max-time",
    "0.3",
    "--gpuperf-min-samples",
    "5",
    "--gpuperf-processes",
    "1",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:randomly",
]


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


@pytest.fixture
def fast_args() -> list[str]:
    """Command-line flags that keep measuring short in end-to-end tests."""
    return list(FAST)
