"""Hardware fingerprints: which runs may be compared with which baselines.

A fingerprint is the dict a backend reports, plus the world size. Only the
*identity* fields (``MATCH_FIELDS``, configurable with the ``gpuperf_match`` ini
key) decide which baseline file applies: backend, device name, architecture
(compute capability on CUDA), memory size in GiB and world size. So a baseline
of one GPU model is never compared with another's, and a 2-rank baseline never
with a 1-rank run. Software versions (driver, CUDA runtime, torch) are recorded
in the file and a difference is shown in the report, but does not pick another
file: a torch upgrade that slows a kernel is exactly what the gate should catch.
"""

from __future__ import annotations

import re
from typing import Any

MATCH_FIELDS: tuple[str, ...] = ("backend", "device_name", "arch", "memory_gib", "world_size")
#: Recorded and shown when they differ from the baseline's (``threads``: the CPU backend's measuring threads).
SOFTWARE_FIELDS: tuple[str, ...] = ("driver", "runtime", "torch", "threads")


def identity(fingerprint: dict[str, Any], fields: tuple[str, ...] = MATCH_FIELDS) -> dict[str, Any]:
    """The part of ``fingerprint`` that must match for a baseline to apply."""
    return {key: fingerprint.get(key) for key in fields}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"


def baseline_filename(fingerprint: dict[str, Any], fields: tuple[str, ...] = MATCH_FIELDS) -> str:
    """A stable, readable file name from the identity fields.

    ``{'backend': 'cuda', 'device_name': 'NVIDIA A100', 'arch': 'sm_80', 'memory_gib': 80,
    'world_size': 1}`` -> ``cuda-nvidia-a100-sm-80-80gib-ws1.yaml``.
    """
    parts = []
    for key in fields:
        value = fingerprint.get(key)
        if key == "memory_gib":
            parts.append(f"{value}gib")
        elif key == "world_size":
            parts.append(f"ws{value}")
        else:
            parts.append(_slug(value))
    return "-".join(parts) + ".yaml"


def describe(fingerprint: dict[str, Any]) -> str:
    """Short human description: ``NVIDIA A100 sm_80`` or ``AMD EPYC ... x86_64 (2 ranks)``."""
    text = f"{fingerprint.get('device_name', '?')} {fingerprint.get('arch', '')}".strip()
    world = fingerprint.get("world_size", 1)
    if world and world != 1:
        text += f" ({world} ranks)"
    return text


def software_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Software fields that differ between a baseline's fingerprint and this run's."""
    return [
        f"{key} {recorded.get(key)} -> {current.get(key)}"
        for key in SOFTWARE_FIELDS
        if recorded.get(key) not in (None, "") and recorded.get(key) != current.get(key)
    ]
