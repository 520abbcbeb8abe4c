"""Drift probes: fixed workloads timed right after each step sample to cancel machine drift.

Two probes of different character exist for torch backends:

* ``matmul``: a square fp32 matmul (compute-bound), for steps that keep the ALUs busy;
* ``copy``: a device copy larger than the last-level cache (memory-bound), for steps
  limited by bandwidth or latency.

A throttled GPU clock slows compute more than HBM; a CPU shared with other
processes loses cores and memory bandwidth in different proportions. Dividing a
step's time by a probe *of the same kind* cancels most of that (see
``docs/PERFORMANCE.md``). :func:`choose_probe` picks the kind from the step's
``flops`` / ``bytes_moved`` hints, or from a quick count of its FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

MATMUL = "matmul"
COPY = "copy"
#: A step reaching this fraction of the matmul probe's FLOP rate (and more than its
#: fraction of the copy probe's bandwidth) is treated as compute-bound.
COMPUTE_FRACTION = 0.25


@dataclass
class Probe:
    """One reference workload: its name, the zero-argument callable, and its work per call."""

    name: str
    fn: Callable[[], object]
    flops: float = 0.0
    bytes_moved: float = 0.0
    seconds: float = 0.0  # one call's time, measured lazily by :meth:`ProbeSet.rates`

    def __call__(self) -> object:
        return self.fn()


def _random(shape: tuple[int, ...], device: Any, seed: int) -> Any:
    import torch

    where = "cuda" if getattr(device, "type", "cpu") == "cuda" else "cpu"  # generate on the GPU: fast
    gen = torch.Generator(device=where).manual_seed(seed)
    return torch.randn(*shape, generator=gen, device=where).to(device)


def build_probes(backend: Backend) -> dict[str, Probe]:
    """The backend's probes; a backend without torch tensors offers only its own ``reference_workload``."""
    if not backend.runs_torch:
        own = backend.reference_workload()
        return {"backend": Probe("backend", own)} if own is not None else {}
    import torch

    device = backend.device()
    on_cpu = getattr(device, "type", "cpu") == "cpu"
    size = 256 if on_cpu else 2048
    a = _random((size, size), device, 1234)
    b = _random((size, size), device, 1235)
    c = torch.empty_like(a)
    # Larger than the last-level cache: 32 MiB per tensor on CPUs (L3 is 32 MiB here), 64 MiB on GPUs (H200 L2
    # is 60 MiB); on CUDA the probes stay allocated during the session, so they count in every peak-memory
    # reading (about 180 MiB). Neither probe allocates: on the CPU a fresh large output costs page faults whose
    # price swings with the neighbours' load far more than the arithmetic does (docs/PERFORMANCE.md).
    elements = (8 if on_cpu else 16) * 2**20
    src = _random((elements,), device, 1236)
    dst = src.clone()

    def matmul() -> object:
        return torch.mm(a, b, out=c)

    def copy() -> object:
        return dst.copy_(src)

    return {
        MATMUL: Probe(MATMUL, matmul, flops=2.0 * size**3, bytes_moved=3.0 * size * size * 4),
        COPY: Probe(COPY, copy, flops=0.0, bytes_moved=2.0 * elements * 4),
    }


@dataclass
class ProbeSet:
    """The probes of one backend in one session, built and rated once."""

    backend: Backend
    probes: dict[str, Probe] = field(default_factory=dict)
    _rated: bool = False

    @classmethod
    def for_backend(cls, backend: Backend) -> ProbeSet:
        """Build the backend's probes (random data, never zeros)."""
        return cls(backend, build_probes(backend))

    def get(self, name: str) -> Probe | None:
        """The probe called ``name``, or None."""
        return self.probes.get(name)

    def rates(self) -> dict[str, float]:
        """Time each probe once (best of 5 calls) and return FLOP/s of ``matmul`` and B/s of ``copy``."""
        if not self._rated:
            for probe in self.probes.values():
                self.backend.time_block(probe.fn, 2)
                probe.seconds = min(self.backend.time_block(probe.fn, 1) for _ in range(5))
            self._rated = True
        out: dict[str, float] = {}
        if MATMUL in self.probes and self.probes[MATMUL].seconds > 0:
            out["flop_rate"] = self.probes[MATMUL].flops / self.probes[MATMUL].seconds
        if COPY in self.probes and self.probes[COPY].seconds > 0:
            out["bandwidth"] = self.probes[COPY].bytes_moved / self.probes[COPY].seconds
        return out

    def choose(
        self,
        step_seconds: float,
        flops: float | None,
        bytes_moved: float | None,
        step: Callable[[], object] | None = None,
    ) -> Probe | None:
        """The same-kind probe for a step (see :func:`choose_probe`)."""
        if not self.probes:
            return None
        if len(self.probes) == 1:
            return next(iter(self.probes.values()))
        if flops is None and step is not None:
            flops = count_flops(step)
        name = choose_probe(step_seconds, flops, bytes_moved, self.rates())
        return self.probes.get(name)


def choose_probe(step_seconds: float, flops: float | None, bytes_moved: float | None, rates: dict[str, float]) -> str:
    """``matmul`` when the step is compute-bound, else ``copy``.

    Compares the step's achieved fraction of the matmul probe's FLOP rate with its
    fraction of the copy probe's bandwidth; with only FLOPs known, compute-bound
    means reaching :data:`COMPUTE_FRACTION` of the matmul rate.
    """
    if step_seconds <= 0:
        return COPY
    compute = (flops or 0.0) / step_seconds / rates["flop_rate"] if rates.get("flop_rate") else 0.0
    memory = (bytes_moved or 0.0) / step_seconds / rates["bandwidth"] if rates.get("bandwidth") else 0.0
    if bytes_moved:
        return MATMUL if compute > memory else COPY
    return MATMUL if compute >= COMPUTE_FRACTION else COPY


def count_flops(step: Callable[[], object]) -> float | None:
    """FLOPs of one call of ``step`` by torch's FlopCounterMode (matmuls, convs, attention); None on failure."""
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            step()
        return float(counter.get_total_flops())
    except Exception:  # noqa: BLE001 - a step the counter cannot trace just gets the default probe
        return None
