"""Measured roofs: the peak FLOP/s and bytes/s this device really reaches, never a datasheet.

Calibration, once per hardware fingerprint (and per dtype class for compute):

* **compute**: a large square matmul in the step's dtype class (``n = 8192`` on GPUs,
  ``1024`` on the CPU; bf16 stands for fp16 too), best of a few timed runs, ``2 n^3`` FLOPs;
  fp32 on CUDA is calibrated with the same TF32 setting the test runs with;
* **bandwidth**: a large device copy ``dst.copy_(src)`` (1 GiB on GPUs, 128 MiB on the
  CPU, well past the caches), best of a few runs, counting a read and a write of every byte.

Results are cached in ``.gpuperf/roofs.json`` under the rootdir, keyed by the
fingerprint's identity fields (plus the CPU thread count), so later sessions reuse them;
``--gpuperf-recalibrate`` measures again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.fingerprint import baseline_filename

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

CACHE_NAME = ".gpuperf/roofs.json"
CACHE_VERSION = 1
#: dtypes calibrated as another (same matrix-unit rate on current GPUs and CPUs).
DTYPE_CLASS = {"float16": "bfloat16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64"}


@dataclass(frozen=True)
class Roofs:
    """Measured peak compute (for one dtype class) and bandwidth of one device."""

    peak_flops: float
    peak_bandwidth: float
    dtype_class: str
    cache_key: str


def dtype_class(dtype: str, backend_name: str) -> str:
    """The calibration class of a dtype name: ``float16`` -> ``bfloat16``; fp32 on CUDA notes TF32."""
    cls = DTYPE_CLASS.get(dtype, "float32")
    if cls == "float32" and backend_name == "cuda":
        import torch

        if torch.backends.cuda.matmul.allow_tf32:
            cls = "float32-tf32"
    return cls


def cache_key(fingerprint: dict[str, Any]) -> str:
    """Fingerprint identity as a readable key (the baseline file's stem, plus CPU threads)."""
    key = baseline_filename(fingerprint).removesuffix(".yaml")
    if fingerprint.get("threads"):
        key += f"-t{fingerprint['threads']}"
    return key


def _best_time(backend: Backend, fn: Callable[[], object], repeats: int, iters: int) -> float:
    """Best per-call seconds over ``repeats`` samples of ``iters`` calls (after one warm-up call)."""
    backend.time_block(fn, 1)
    return min(backend.time_block(fn, iters) / iters for _ in range(repeats))


def measure_peak_flops(backend: Backend, cls: str) -> dict[str, float]:
    """Time a large random matmul in dtype class ``cls``; returns FLOP/s, size and seconds."""
    import torch

    dtype = getattr(torch, cls.split("-")[0])
    n = 1024 if backend.name == "cpu" else (4096 if cls == "float64" else 8192)
    gen = torch.Generator(device="cpu").manual_seed(7)
    a = torch.randn(n, n, generator=gen).to(device=backend.device(), dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=backend.device(), dtype=dtype)
    seconds = _best_time(backend, lambda: a @ b, repeats=5, iters=1 if backend.name == "cpu" else 3)
    return {"peak_flops": 2.0 * n**3 / seconds, "matmul_n": n, "seconds": seconds}


def measure_peak_bandwidth(backend: Backend) -> dict[str, float]:
    """Time a large device copy (read + write of every byte); returns bytes/s, size and seconds."""
    import torch

    nbytes = 128 * 2**20 if backend.name == "cpu" else 2**30
    if backend.name == "cuda":
        nbytes = min(nbytes, torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory // 8)
    gen = torch.Generator(device="cpu").manual_seed(8)
    src = torch.randn(nbytes // 4, generator=gen).to(backend.device())
    dst = torch.empty_like(src)
    seconds = _best_time(backend, lambda: dst.copy_(src), repeats=5, iters=1 if backend.name == "cpu" else 5)
    return {"peak_bandwidth": 2.0 * src.numel() * 4 / seconds, "copy_bytes": src.numel() * 4, "seconds": seconds}


class RoofCache:
    """The JSON file of measured roofs; reads tolerate a missing or broken file, writes are atomic."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        """All cached entries (empty when the file is missing, unreadable or of another version)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        entries = data.get("devices", {})
        return entries if isinstance(entries, dict) else {}

    def store(self, key: str, entry: dict[str, Any]) -> None:
        """Merge one device's entry into the file (re-read first, then replace atomically)."""
        entries = self.load()
        entries[key] = entry
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": CACHE_VERSION, "devices": entries}, indent=2), encoding="utf-8")
        os.replace(tmp, self.path)


class RoofProvider:
    """Measured roofs per (fingerprint, dtype class), from memory, the cache file, or a calibration run."""

    def __init__(self, cache: RoofCache, recalibrate: bool = False) -> None:
        self.cache = cache
        self.recalibrate = recalibrate
        self._entries: dict[str, dict[str, Any]] = {}
        self.calibrated: list[str] = []

    def roofs(self, backend: Backend, fingerprint: dict[str, Any], dtype: str) -> Roofs:
        """The roofs for ``dtype``'s class on this device, calibrating what is not cached yet."""
        key = cache_key(fingerprint)
        cls = dtype_class(dtype, backend.name)
        entry = self._entries.get(key)
        if entry is None and not self.recalibrate:
            entry = self.cache.load().get(key)
        if entry is None:
            entry = {"fingerprint": {k: fingerprint.get(k) for k in ("backend", "device_name", "arch")}, "compute": {}}
        changed = False
        if "bandwidth" not in entry:
            entry["bandwidth"] = measure_peak_bandwidth(backend)
            changed = True
        if cls not in entry["compute"]:
            entry["compute"][cls] = measure_peak_flops(backend, cls)
            changed = True
        if changed:
            entry["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            entry["torch"] = fingerprint.get("torch")
            self.cache.store(key, entry)
            self.calibrated.append(f"{key} ({cls})")
        self._entries[key] = entry
        return Roofs(
            peak_flops=float(entry["compute"][cls]["peak_flops"]),
            peak_bandwidth=float(entry["bandwidth"]["peak_bandwidth"]),
            dtype_class=cls,
            cache_key=key,
        )
