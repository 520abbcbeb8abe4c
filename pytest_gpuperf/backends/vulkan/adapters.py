"""Enumerate wgpu's Vulkan (and Metal) adapters and pick one by index, name or type."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: wgpu backends this plugin measures on: Vulkan everywhere, Metal on macOS (same WGSL, same timing).
NATIVE_BACKENDS = ("Vulkan", "Metal")
#: wgpu ``adapter_type`` values accepted as a TYPE selector (case-insensitive).
DEVICE_TYPES = ("DiscreteGPU", "IntegratedGPU", "VirtualGPU", "CPU", "Unknown")
#: Preference when no selector is given: a real GPU before a software one.
_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4}


@dataclass(frozen=True)
class AdapterInfo:
    """What one adapter says about itself (``index`` counts Vulkan/Metal adapters only)."""

    index: int
    name: str
    vendor: str
    vendor_id: int
    device_id: int
    device_type: str
    driver: str
    backend: str
    timestamp_query: bool
    features: frozenset[str]

    def describe(self) -> str:
        """``0: NVIDIA GeForce RTX 4090 | Vulkan | DiscreteGPU | timestamps``."""
        stamps = "timestamps" if self.timestamp_query else "no timestamps"
        return f"{self.index}: {self.name} | {self.backend} | {self.device_type} | {stamps}"


def adapter_info(index: int, adapter: Any) -> AdapterInfo:
    """Read an :class:`AdapterInfo` from a ``wgpu.GPUAdapter``."""
    info = adapter.info
    return AdapterInfo(
        index=index,
        name=str(info.get("device", "")),
        vendor=str(info.get("vendor", "")),
        vendor_id=int(info.get("vendor_id", 0) or 0),
        device_id=int(info.get("device_id", 0) or 0),
        device_type=str(info.get("adapter_type", "Unknown")),
        driver=str(info.get("description", "")),
        backend=str(info.get("backend_type", "")),
        timestamp_query="timestamp-query" in adapter.features,
        features=frozenset(str(f) for f in adapter.features),
    )


@lru_cache(maxsize=1)
def all_adapters() -> tuple[Any, ...]:
    """Every adapter wgpu finds on any of its backends (enumerated once per process)."""
    import wgpu

    return tuple(wgpu.gpu.enumerate_adapters_sync())


def native_adapters() -> tuple[tuple[AdapterInfo, Any], ...]:
    """The Vulkan/Metal adapters among :func:`all_adapters`, numbered from 0, with their ``GPUAdapter``."""
    found = [a for a in all_adapters() if a.info.get("backend_type") in NATIVE_BACKENDS]
    return tuple((adapter_info(i, a), a) for i, a in enumerate(found))


def other_adapters() -> list[str]:
    """``name (backend)`` of the adapters this plugin does not measure on (OpenGL, D3D12 ...), for skip reasons."""
    return [
        f"{a.info.get('device', '?')} ({a.info.get('backend_type', '?')})"
        for a in all_adapters()
        if a.info.get("backend_type") not in NATIVE_BACKENDS
    ]


class AdapterSelectionError(LookupError):
    """No adapter matches ``gpuperf_vulkan_device``; the message lists the adapters."""


def select_adapter(infos: list[AdapterInfo], spec: str) -> AdapterInfo:
    """Pick by INDEX (``0``), TYPE (``DiscreteGPU``, ``cpu``) or NAME substring (``RTX``).

    An empty ``spec`` picks the most GPU-like adapter (discrete first, CPU last),
    the lower index on a tie.
    """
    if not infos:
        raise AdapterSelectionError("wgpu found no Vulkan or Metal adapter")
    spec = spec.strip()
    if not spec:
        return min(infos, key=lambda a: (_TYPE_RANK.get(a.device_type, 3), a.index))
    listing = "; ".join(a.describe() for a in infos)
    if spec.isdigit():
        for info in infos:
            if info.index == int(spec):
                return info
        raise AdapterSelectionError(f"gpuperf_vulkan_device={spec}: no adapter with that index; adapters: {listing}")
    by_type = [a for a in infos if a.device_type.lower() == spec.lower()]
    if by_type:
        return by_type[0]
    by_name = [a for a in infos if spec.lower() in a.name.lower()]
    if by_name:
        return by_name[0]
    raise AdapterSelectionError(
        f"gpuperf_vulkan_device={spec!r} matches no adapter index, type ({', '.join(DEVICE_TYPES)}) "
        f"or name; adapters: {listing}"
    )
