"""torch.profiler capture of a few extra calls of a measured step: Chrome trace plus the top kernels.

The trace (CPU and, on CUDA, device activities, with input shapes and memory events)
is written as Chrome-trace JSON, which https://ui.perfetto.dev opens directly. The
top kernels are the profiler's key averages sorted by self device time; on the CPU,
where there are no kernels, by self CPU time of the aten ops.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

PROFILED_CALLS = 3
TOP_KERNELS = 5


@dataclass(frozen=True)
class KernelTime:
    """One kernel (or CPU op) with its total self time over the profiled calls."""

    name: str
    seconds: float
    calls: int
    share: float

    def line(self) -> str:
        """``  41.2%   1.23 ms  x3  ampere_bf16_s16816gemm...``."""
        name = self.name if len(self.name) <= 90 else self.name[:87] + "..."
        return f"{self.share:6.1%} {self.seconds * 1e3:9.3f} ms  x{self.calls:<4d} {name}"


@dataclass
class TraceResult:
    """What a capture produced: the trace file and the heaviest kernels."""

    path: Path
    top: list[KernelTime]
    device_kind: str
    calls: int

    def summary(self) -> str:
        """A few lines for the report: where the trace is and which kernels took the time."""
        what = "kernels by device time" if self.device_kind == "device" else "CPU ops by self time"
        lines = [f"trace: {self.path} (open in https://ui.perfetto.dev)", f"top {what} over {self.calls} calls:"]
        return "\n".join(lines + ["  " + k.line() for k in self.top])


def artifact_stem(node_id: str, step_name: str) -> str:
    """A file-name-safe stem from a test id and step name: ``test_x.py::test_y[cuda]`` -> ``test_x-test_y-cuda``."""
    base = node_id.rsplit("/", 1)[-1].replace(".py::", "-")
    return re.sub(r"[^A-Za-z0-9_.]+", "-", f"{base}-{step_name}").strip("-")


def capture_trace(
    backend: Backend, step: Callable[[], object], path: Path, calls: int = PROFILED_CALLS, top: int = TOP_KERNELS
) -> TraceResult:
    """Profile ``calls`` calls of ``step`` (synchronized at the end) and export a Chrome trace to ``path``."""
    from torch.profiler import ProfilerActivity, profile

    from pytest_gpuperf.backends.cpu_memory import without_probe_noise

    on_device = backend.name == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_device else [])
    backend.synchronize()
    # the trace is the plugin's own probe: torch's allocator note about older tensors is its noise, not the step's
    with without_probe_noise(), profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        for _ in range(calls):
            step()
        backend.synchronize()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return TraceResult(path, top_kernels(prof, on_device, top), "device" if on_device else "cpu", calls)


def top_kernels(prof: object, on_device: bool, count: int) -> list[KernelTime]:
    """The ``count`` heaviest kernels (device) or aten ops (CPU) of a finished profile."""
    from torch.autograd import DeviceType

    events = list(prof.key_averages())  # type: ignore[attr-defined]
    rows: list[tuple[str, float, int]] = []
    if on_device:
        rows = [
            (e.key, float(e.self_device_time_total) * 1e-6, int(e.count))
            for e in events
            if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0
        ]
        if not rows:  # older profilers attribute kernel time to the launching aten ops only
            rows = [
                (e.key, float(e.self_device_time_total) * 1e-6, int(e.count))
                for e in events
                if e.key.startswith("aten::") and e.self_device_time_total > 0
            ]
    else:
        rows = [
            (e.key, float(e.self_cpu_time_total) * 1e-6, int(e.count))
            for e in events
            if e.key.startswith("aten::") and e.self_cpu_time_total > 0
        ]
    total = sum(seconds for _, seconds, _ in rows) or 1.0
    rows.sort(key=lambda r: -r[1])
    return [KernelTime(name, seconds, calls, seconds / total) for name, seconds, calls in rows[:count]]
