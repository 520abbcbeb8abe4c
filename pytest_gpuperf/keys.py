"""Stash keys shared by the core plugin and the feature plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.session import GpuperfSession  # noqa: F401 - used in the StashKey's string type

#: The active measuring session; present only under ``--gpuperf`` / ``--gpuperf-update``.
SESSION_KEY = pytest.StashKey["GpuperfSession"]()
