"""The frozen per-test context: who is measured, on what, in which world, with which marker options.

Built once per test by the ``gpuperf`` fixture (or once per task on a rank) and handed down:
the fixture, the plan, the judging service and the feature hooks all read the same object, and
none of them reaches back into pytest's item or the session for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.markers import MarkerError, MarkerOptions, gpuperf_options

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

__all__ = ["MarkerError", "MarkerOptions", "TestContext", "build_context", "env_world_size"]


@dataclass(frozen=True)
class TestContext:
    """One perf test instance: node id, backend, world size (ranks) and its marker options (read-only)."""

    __test__ = False  # not a pytest test class

    node_id: str
    backend: Backend
    world_size: int = 1
    options: Mapping[str, Any] = field(default_factory=MarkerOptions)

    def in_world(self, world_size: int) -> TestContext:
        """The same test judged as a ``world_size``-rank world (its baselines live in ``...-ws<N>.yaml``)."""
        return self if world_size == self.world_size else replace(self, world_size=world_size)

    def option(self, key: str, default: Any = None) -> Any:
        """A marker option, resolved for this backend when it is a per-backend mapping of numbers."""
        value = self.options.get(key, default)
        if isinstance(value, Mapping) and key not in ("tolerances",):
            return value.get(self.backend.name, default)
        return value


def env_world_size() -> int:
    """This process's ``WORLD_SIZE`` (1 outside a distributed launch)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def build_context(
    node_id: str, backend: Backend, marker_kwargs: Mapping[str, Any] | None = None, world_size: int | None = None
) -> TestContext:
    """Freeze the context (world size: given, else ``WORLD_SIZE``) with the marker's checked options.

    :class:`~pytest_gpuperf.markers.MarkerOptions` (checked at collection) are taken as they are; any other
    mapping is checked here (keys and ranges; :class:`MarkerError` names the test and the key).
    """
    if isinstance(marker_kwargs, MarkerOptions):
        options = marker_kwargs
    else:
        options = gpuperf_options(node_id, (), dict(marker_kwargs or {}))
    size = env_world_size() if world_size is None else int(world_size)
    return TestContext(node_id, backend, size, options)
