"""The seed's Linear forward + backward timed in one fresh process (run N times by gpu/timing.sh): one table row.

Prints the judged device time (CUDA-graph replay), the eager time, host-bound flag, warm-up and NVML's SM clock.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from pytest_gpuperf.backends.cuda import CudaBackend
from pytest_gpuperf.timing import MeasureConfig, measure_time


def main(label: str) -> None:
    """Measure once in this process and print one row labelled ``label``."""
    torch.manual_seed(0)
    layer = nn.Linear(4096, 4096).to("cuda", torch.float16)
    x = torch.randn(1024, 4096, device="cuda", dtype=torch.float16, requires_grad=True)

    def step() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).sum().backward()

    r = measure_time(CudaBackend(), step, MeasureConfig(warmup_time=0.3))
    clocks = r.clocks or {}
    print(
        f"process {label}: {r.method} device {r.typical * 1e6:.1f} us, eager {(r.eager_time or 0) * 1e6:.1f} us, "
        f"host-bound {r.host_bound}, n={len(r.samples)}, warm-up {r.warmup_calls} calls settled={r.settled}, "
        f"SM {clocks.get('sm_clock_mhz')} MHz, reasons {clocks.get('clock_event_reasons')}",
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "0")
