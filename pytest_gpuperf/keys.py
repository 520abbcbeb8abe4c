"""Stash keys shared by the core plugin and the feature plugins."""

from __future__ import annotations

from typing import Any

import pytest

# The keys' values are typed Any: this plain-data module is imported by every layer, so it names no class of the
# layers above it (the session of the hook layer, a backend of the device layer).

#: The active measuring session (a ``session.GpuperfSession``); present only under ``--gpuperf`` / ``--gpuperf-update``.
SESSION_KEY = pytest.StashKey[Any]()
#: On a test item: the backend this instance runs on (a ``backends.base.Backend``, set by the ``gpuperf_backend``
#: fixture).
BACKEND_KEY = pytest.StashKey[Any]()
#: On a test item: the world size its metrics are judged under (set by the distributed feature before setup).
WORLD_SIZE_KEY = pytest.StashKey[int]()
#: The session's fresh-process replica workers (started on first use by the distributed feature).
REPLICAS_KEY = pytest.StashKey[Any]()  # a distributed.replicate.ReplicaPool

#: ``always`` in a process's environment: classify every step, measuring roofs the cache lacks even when no verdict
#: of that process needs them (A/B workers: the controller compares A's bound class with B's).
ROOFS_ENV = "GPUPERF_ROOFS"
