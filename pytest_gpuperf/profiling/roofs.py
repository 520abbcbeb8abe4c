"""Measured roofs, kept in pytest's cache: peak FLOP/s, DRAM and last-level-cache bandwidth of a device.

Each backend measures its own roofs. A backend with a ``measure_roof(what, dtype_class, tries)``
method (the Vulkan backend: its copy and FMA-chain kernels) answers for itself; torch
backends use the workloads here:

* **compute**: a large square matmul in the step's dtype class (``n = 8192`` on GPUs,
  ``1024`` on the CPU; bf16 stands for fp16 too), ``2 n^3`` FLOPs; fp32 on CUDA is
  calibrated with the same TF32 setting the test runs with;
* **DRAM**: the best of three streaming patterns far larger than the caches (1 GiB per
  tensor on GPUs, 128 MiB on the CPU): a copy ``dst.copy_(src)`` (one read + one write), an
  add ``torch.add(a, b, out=c)`` (two reads + one write) and a read-only reduction
  ``x.sum()``; a copy alone is not always the fastest DRAM pattern (on a GPU an add can beat
  it), so real kernels would beat a copy roof;
* **cache**: the best of a copy and a read-only sum over a quarter and a half of the
  last-level cache (GPU L2 from the device properties, CPU LLC from ``/sys/devices/system/cpu``),
  many calls in a row so the data stays resident; on CUDA the calls are replayed from one CUDA
  graph, because an eager ``copy_`` of a few MiB is shorter than its launch, and a roof timed
  eagerly measures the launch rate, which can read below the DRAM roof.

Every calibration is the best of :data:`TRIES` timed tries, with the CPU thread count and
clock the timing loop measures CPU steps with. Results are kept in
pytest's cache (``config.cache``, under ``.pytest_cache/``, which pytest keeps out of
git) per hardware fingerprint (plus CPU threads): :mod:`.roof_store`. A roof a step beats is re-measured
once per session (:meth:`RoofProvider.refresh`) and the best of old and new is kept,
so a roof measured during a busy moment heals itself; ``gpuperf_recalibrate``
measures everything again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.profiling.roof_store import RoofStore, cache_key
from pytest_gpuperf.profiling.roofline import DRAM, Roofs

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

TRIES = 5
#: Tries when a step beat the roof: a roof that was too low gets a more thorough second look.
REFRESH_TRIES = 3 * TRIES
#: dtypes calibrated as another (same matrix-unit rate on current GPUs and CPUs).
DTYPE_CLASS = {"float16": "bfloat16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64"}


def dtype_class(dtype: str, backend: Backend) -> str:
    """The calibration class of a dtype name: ``float16`` -> ``bfloat16``; fp32 on CUDA notes TF32."""
    cls = DTYPE_CLASS.get(dtype, "float32")
    if cls == "float32" and backend.name == "cuda":
        import torch

        if torch.backends.cuda.matmul.allow_tf32:
            cls = "float32-tf32"
    return cls if backend.runs_torch else "float32"


def _timed(backend: Backend, fn: Callable[[], object], iters: int) -> float:
    """Seconds of ``iters`` calls, on the clock the timing loop uses for such a step.

    A one-thread CPU step is timed on the thread's CPU time (the timing loop's
    ``thread_cpu`` clock), so slices the scheduler gave to other processes count neither
    in the step nor in its roof; everything else on the backend's own clock.
    """
    if backend.name == "cpu":
        import torch

        if torch.get_num_threads() == 1:
            started = time.thread_time()
            for _ in range(iters):
                fn()
            return time.thread_time() - started
    return backend.time_block(fn, iters)


def _best_time(backend: Backend, fn: Callable[[], object], iters: int, tries: int = TRIES) -> float:
    """Best per-call seconds over ``tries`` samples of ``iters`` calls (after one warm-up call)."""
    _timed(backend, fn, 1)
    return min(_timed(backend, fn, iters) / iters for _ in range(tries))


def measure_peak_flops(backend: Backend, cls: str, tries: int = TRIES) -> dict[str, float]:
    """Time a large random matmul in dtype class ``cls``; returns FLOP/s, size and seconds."""
    import torch

    dtype = getattr(torch, cls.split("-")[0])
    n = 1024 if backend.name == "cpu" else (4096 if cls == "float64" else 8192)
    a = _random_matrix(backend, n, 7).to(dtype=dtype)
    b = _random_matrix(backend, n, 8).to(dtype=dtype)
    seconds = _best_time(backend, lambda: a @ b, 1 if backend.name == "cpu" else 3, tries)
    return {"peak_flops": 2.0 * n**3 / seconds, "matmul_n": n, "seconds": seconds}


def _random_values(backend: Backend, shape: tuple[int, ...], seed: int) -> Any:
    """Random float32 values of ``shape`` on the backend's device (never all zeros), drawn where they live.

    On CUDA they are drawn by the GPU's own generator: 2^28 values drawn on the CPU and copied took seconds of
    the first test's roof measurement, the GPU draws them in milliseconds.
    """
    import torch

    if backend.name == "cuda":
        gen = torch.Generator(device=backend.device()).manual_seed(seed)
        return torch.randn(shape, generator=gen, device=backend.device())
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(shape, generator=gen).to(backend.device())


def _random_matrix(backend: Backend, n: int, seed: int) -> Any:
    """A random float32 ``n x n`` matrix on the backend's device."""
    return _random_values(backend, (n, n), seed)


def _random(backend: Backend, nbytes: int, seed: int) -> Any:
    """A random float32 tensor of about ``nbytes`` on the backend's device (never all zeros)."""
    return _random_values(backend, (max(1, nbytes // 4),), seed)


def _pattern(name: str, src: Any) -> tuple[Callable[[], object], float]:
    """The step of one streaming pattern over ``src`` (and tensors like it), and the bytes one call moves."""
    import torch

    size = src.numel() * src.element_size()
    if name == "copy":
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 2.0 * size
    if name == "add":
        other, out = src + 1.0, torch.empty_like(src)  # random too, without a second slow randn
        return (lambda: torch.add(src, other, out=out)), 3.0 * size
    if name == "sum":
        return (lambda: src.sum()), float(size)
    raise ValueError(f"unknown bandwidth pattern {name!r}")


#: DRAM patterns: bytes per call over the tensor size (copy: read + write; add: 2 reads + write; sum: read).
DRAM_PATTERNS = ("copy", "add", "sum")
CACHE_PATTERNS = ("copy", "sum")


def _graph_time(fn: Callable[[], object], calls: int, tries: int) -> float:
    """Best per-call seconds of ``calls`` calls replayed from one CUDA graph (no launch gaps)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up outside the capture (allocator, kernels)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    best = float("inf")
    for _ in range(tries):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e-3 / calls)
    return best


def best_bandwidth(
    backend: Backend, patterns: tuple[str, ...], nbytes: int, iters: int, tries: int = TRIES, graph: bool = False
) -> dict[str, Any]:
    """The best bandwidth of ``patterns`` over tensors of ``nbytes``, each pattern the best of ``tries``.

    Returns ``bandwidth`` (the best), ``pattern`` (which one), ``patterns`` (each one's
    bandwidth, for the report) and ``tensor_bytes``. ``graph``: replay ``iters`` calls from
    one CUDA graph instead of launching them (CUDA only; falls back to launching).
    """
    rates: dict[str, float] = {}
    src = _random(backend, nbytes, 8)  # one random source for every pattern (randn of 1 GiB is slow)
    for name in patterns:
        fn, moved = _pattern(name, src)
        seconds = None
        if graph and backend.name == "cuda":
            try:
                seconds = _graph_time(fn, iters, tries)
            except RuntimeError:  # capture refused (an old driver, a debug mode): launch the calls instead
                seconds = None
        if seconds is None:
            seconds = _best_time(backend, fn, iters, tries)
        rates[name] = moved / seconds
        del fn
    best = max(rates, key=lambda name: rates[name])
    return {"bandwidth": rates[best], "pattern": best, "patterns": rates, "tensor_bytes": float(nbytes)}


def measure_dram_bandwidth(backend: Backend, tries: int = TRIES) -> dict[str, Any]:
    """The best DRAM bandwidth of a copy, an add and a read-only sum far larger than the caches."""
    nbytes = 128 * 2**20 if backend.name == "cpu" else 2**30
    if backend.name == "cuda":
        import torch

        nbytes = min(nbytes, torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory // 16)
    return best_bandwidth(backend, DRAM_PATTERNS, nbytes, 1 if backend.name == "cpu" else 5, tries)


def last_level_cache(backend: Backend) -> tuple[str, int] | None:
    """(name, bytes) of the device's last-level cache: CUDA L2, CPU LLC; None where unknown."""
    if backend.name == "cuda":
        import torch

        size = int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0))
        return ("L2", size) if size > 0 else None
    if backend.name == "cpu":
        return ("LLC", cpu_llc_bytes()) if cpu_llc_bytes() else None
    return None


def cpu_llc_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """Size of the CPU's highest cache level from sysfs (0 when unreadable)."""
    best_level, best_size = 0, 0
    for index in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            level = int((index / "level").read_text().strip())
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * scale
        except ValueError:
            continue
        if level > best_level or (level == best_level and size > best_size):
            best_level, best_size = level, size
    return best_size


def measure_cache_bandwidth(backend: Backend, tries: int = TRIES) -> dict[str, Any] | None:
    """The best copy or read-only sum bandwidth over a quarter and a half of the last-level cache, or None."""
    cache = last_level_cache(backend)
    if cache is None:
        return None
    name, size = cache
    cpu = backend.name == "cpu"
    results = []
    for fraction in (4, 2):  # the working set: a quarter, then a half of the cache (a copy's two tensors together)
        results.append(best_bandwidth(backend, CACHE_PATTERNS, size // (2 * fraction), 20 if cpu else 50, tries, True))
    best = max(results, key=lambda result: float(result["bandwidth"]))
    return {**best, "cache_bytes": float(size), "cache_name": name}


def measure(backend: Backend, what: str, cls: str, tries: int = TRIES) -> dict[str, Any] | None:
    """One roof of ``backend``: ``compute`` (dtype class ``cls``), ``dram`` or ``cache``; None if not measurable."""
    from pytest_gpuperf.procs.cpu_lock import serialised

    custom = getattr(backend, "measure_roof", None)
    with serialised(backend.is_host_cpu()):  # a roof times the host CPU: under xdist, one worker at a time
        if custom is not None:
            return custom(what, cls, tries)
        if not backend.runs_torch:
            return None
        if backend.name == "cpu":  # with the thread count CPU steps are measured with (gpuperf_cpu_threads)
            from pytest_gpuperf.backends.cpu_threads import effective, measuring_threads

            with measuring_threads(effective()):
                return _torch_roof(backend, what, cls, tries)
        return _torch_roof(backend, what, cls, tries)


def _torch_roof(backend: Backend, what: str, cls: str, tries: int) -> dict[str, Any] | None:
    """One roof of a torch backend, from the workloads of this module."""
    if what == "compute":
        return measure_peak_flops(backend, cls, tries)
    if what == "dram":
        return measure_dram_bandwidth(backend, tries)
    return measure_cache_bandwidth(backend, tries)


class RoofProvider:
    """Measured roofs per (fingerprint, dtype class): from memory, pytest's cache, or a calibration run."""

    def __init__(self, store: RoofStore, recalibrate: bool = False) -> None:
        self.store = store
        self.recalibrate = recalibrate
        self._fresh: set[str] = set()
        self._refreshed: set[tuple[str, str]] = set()
        #: Keys this process measured or saved: its own entry is the newest, no need to read the file again.
        self._fresh_here: set[str] = set()
        self.calibrated: list[str] = []

    def _entry(self, key: str, fingerprint: dict[str, Any], fresh: bool = False) -> dict[str, Any]:
        entry = self.store.load(key, fresh=fresh and key not in self._fresh_here)
        if entry is None or (self.recalibrate and key not in self._fresh):
            entry = {"fingerprint": {k: fingerprint.get(k) for k in ("backend", "device_name", "arch")}}
            entry["compute"] = {}
        self._fresh.add(key)
        return entry

    def cached(self, backend: Backend, fingerprint: dict[str, Any], dtype: str) -> bool:
        """True when the roofs for ``dtype``'s class are known without measuring (this session or the cache)."""
        key = cache_key(fingerprint)
        if self.recalibrate and key not in self._fresh:
            return False
        entry = self.store.load(key)
        return entry is not None and "dram" in entry and dtype_class(dtype, backend) in entry["compute"]

    def roofs(self, backend: Backend, fingerprint: dict[str, Any], dtype: str) -> Roofs:
        """The roofs for ``dtype``'s class on this device, calibrating what is not cached yet.

        What is missing is measured under the store's lock, after reading the cache again: of several processes
        of one run (xdist workers, A/B workers) one measures and the others read its result.
        """
        key = cache_key(fingerprint)
        cls = dtype_class(dtype, backend)
        entry = self._entry(key, fingerprint)
        if "dram" in entry and cls in entry["compute"]:
            return self._roofs(entry, key, cls)
        with self.store.measuring():
            if not self.recalibrate:  # recalibrating measures again whatever the file holds
                entry = self._entry(key, fingerprint, fresh=True)
            measured = []
            if "dram" not in entry:
                entry["dram"] = measure(backend, "dram", cls)
                entry["cache"] = measure(backend, "cache", cls)
                measured.append("DRAM and cache bandwidth")
            if cls not in entry["compute"]:
                entry["compute"][cls] = measure(backend, "compute", cls)
                measured.append(f"{cls} compute")
            if measured:
                self._save(key, entry, fingerprint)
                self._fresh_here.add(key)
                self.calibrated.append(f"{key} ({', '.join(measured)})")
        return self._roofs(entry, key, cls)

    def refresh(self, backend: Backend, fingerprint: dict[str, Any], dtype: str, level: str) -> Roofs | None:
        """Re-measure the roof a step beat (``level``: DRAM, the cache's name, or ``compute``), keeping the best.

        At most once per session and roof; returns the new roofs, or None when already refreshed.
        """
        key = cache_key(fingerprint)
        cls = dtype_class(dtype, backend)
        what = "compute" if level == "compute" else ("dram" if level == DRAM else "cache")
        if (key, what + cls) in self._refreshed:
            return None
        self._refreshed.add((key, what + cls))
        with self.store.measuring():
            entry = self._entry(key, fingerprint, fresh=True)
            new = measure(backend, what, cls, REFRESH_TRIES)
            old = entry["compute"].get(cls) if what == "compute" else entry.get(what)
            rate = "peak_flops" if what == "compute" else "bandwidth"
            if new is not None and (not old or float(new[rate]) > float(old[rate])):
                if what == "compute":
                    entry["compute"][cls] = new
                else:
                    entry[what] = new
            self._save(key, entry, fingerprint)
            self._fresh_here.add(key)
        self.calibrated.append(f"{key} ({level} re-measured after a step beat it)")
        return self._roofs(entry, key, cls)

    def _save(self, key: str, entry: dict[str, Any], fingerprint: dict[str, Any]) -> None:
        entry["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        entry["torch"] = fingerprint.get("torch")
        self.store.store(key, entry)

    @staticmethod
    def _roofs(entry: dict[str, Any], key: str, cls: str) -> Roofs:
        cache = entry.get("cache") or {}
        return Roofs(
            peak_flops=float(entry["compute"][cls]["peak_flops"]),
            bandwidth=float(entry["dram"]["bandwidth"]),
            dtype_class=cls,
            key=key,
            cache_bandwidth=float(cache["bandwidth"]) if cache.get("bandwidth") else None,
            cache_bytes=float(cache["cache_bytes"]) if cache.get("cache_bytes") else None,
            cache_name=str(cache.get("cache_name") or "LLC"),
        )
