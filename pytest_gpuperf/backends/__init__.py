"""Backend registry: built-in backends plus the ``pytest_gpuperf.backends`` entry-point group.

A third-party package adds a backend with, in its ``pyproject.toml``::

    [project.entry-points."pytest_gpuperf.backends"]
    mybackend = "my_package.gpuperf_backend:MyBackend"

where ``MyBackend`` subclasses :class:`pytest_gpuperf.backends.base.Backend`.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

ENTRY_POINT_GROUP = "pytest_gpuperf.backends"

#: Built-in backends in order of preference (the first available one is the default device).
BUILTIN_BACKENDS: dict[str, str] = {
    "cuda": "pytest_gpuperf.backends.cuda:CudaBackend",
    "mps": "pytest_gpuperf.backends.mps:MpsBackend",
    "vulkan": "pytest_gpuperf.backends.vulkan:VulkanBackend",
    "cpu": "pytest_gpuperf.backends.cpu:CpuBackend",
}


def _load(target: str) -> type[Backend]:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@lru_cache(maxsize=1)
def backend_targets() -> dict[str, str]:
    """Map every known backend name to its ``module:Class`` target (built-ins first)."""
    from importlib.metadata import entry_points

    targets = dict(BUILTIN_BACKENDS)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        targets.setdefault(ep.name, ep.value)
    return targets


def known_backend_names() -> list[str]:
    """Names accepted by ``--gpuperf-backend``."""
    return list(backend_targets())


_instances: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """Return the (cached) backend instance for ``name``; ``KeyError`` if unknown."""
    if name not in _instances:
        targets = backend_targets()
        if name not in targets:
            raise KeyError(name)
        _instances[name] = _load(targets[name])()
    return _instances[name]


def parse_backend_list(value: str) -> list[str]:
    """Split ``"cuda,cpu"`` into names, raising ``ValueError`` naming the unknown ones."""
    names = [part.strip().lower() for part in value.split(",") if part.strip()]
    known = known_backend_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown backend {', '.join(repr(n) for n in unknown)}; known backends: {', '.join(known)}")
    return names
