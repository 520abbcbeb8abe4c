"""Shared helpers for pytest-gpuperf's own tests."""

from __future__ import annotations

import pytest

#: Fast measuring settings for end-to-end runs on a small, shared CPU.
FAST = ["--gpuperf-max-time", "0.3", "--gpuperf-min-samples", "5", "-p", "no:cacheprovider", "-p", "no:randomly"]


@pytest.fixture
def fast_args() -> list[str]:
    """Command-line flags that keep measuring short in end-to-end tests."""
    return list(FAST)
