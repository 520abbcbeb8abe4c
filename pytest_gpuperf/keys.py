"""Stash keys shared by the core plugin and the feature plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend  # noqa: F401 - used in a StashKey's string type
    from pytest_gpuperf.session import GpuperfSession  # noqa: F401 - used in the StashKey's string type

#: The active measuring session; present only under ``--gpuperf`` / ``--gpuperf-update``.
SESSION_KEY = pytest.StashKey["GpuperfSession"]()
#: On a test item: the backend this instance runs on (set by the ``gpuperf_backend`` fixture).
BACKEND_KEY = pytest.StashKey["Backend"]()
#: On a test item: the world size its metrics are judged under (set by the distributed feature before setup).
WORLD_SIZE_KEY = pytest.StashKey[int]()
#: The session's fresh-process replica workers (started on first use by the distributed feature).
REPLICAS_KEY = pytest.StashKey[Any]()  # a distributed.replicate.ReplicaPool

#: ``always`` in a process's environment: classify every step, measuring roofs the cache lacks even when no verdict
#: of that process needs them (A/B workers: the controller compares A's bound class with B's).
ROOFS_ENV = "GPUPERF_ROOFS"
