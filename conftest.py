"""Repository-wide pytest configuration.

pytest-gpuperf itself is loaded through its ``pytest11`` entry point once the
package is installed (``pip install -e .``); nothing here imports torch, so the
plugin's own unit tests stay fast.
"""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _seed_torch_if_loaded() -> None:
    """Seed torch's RNG before each test when torch is already imported (perf tests)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)
