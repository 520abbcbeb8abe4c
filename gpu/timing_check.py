"""Device time on the H200: graph replay vs CUPTI kernel sums vs eager events, NVML clocks (one table).

Run by gpu/timing.sh; writes timing.json under $OUT and prints a table.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
from torch import nn

from pytest_gpuperf.backends.cuda import CudaBackend
from pytest_gpuperf.timing import MeasureConfig, measure_time


def linear_step():
    """The seed's Linear(4096, 4096) forward + backward at batch 1024, fp16."""
    torch.manual_seed(0)
    layer = nn.Linear(4096, 4096).to("cuda", torch.float16)
    x = torch.randn(1024, 4096, device="cuda", dtype=torch.float16, requires_grad=True)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).sum().backward()

    return step


def adamw_step(capturable: bool):
    """AdamW foreach over 20 x 1M parameters (one optimizer step)."""
    params = [torch.randn(1 << 20, device="cuda", requires_grad=True) for _ in range(20)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, foreach=True, capturable=capturable)
    return opt.step


def main() -> None:
    backend = CudaBackend()
    rows = []
    cases = [
        ("linear fwd+bwd", linear_step, {}),
        ("linear fwd+bwd", linear_step, {"cuda_graph": "off"}),
        ("linear fwd+bwd", linear_step, {"cuda_graph": "off", "cupti": False}),
        ("adamw 20x1M", lambda: adamw_step(False), {}),
        ("adamw 20x1M capturable", lambda: adamw_step(True), {}),
    ]
    for name, make, overrides in cases:
        step = make()
        config = MeasureConfig(warmup_time=0.3, **overrides)
        started = time.perf_counter()
        r = measure_time(backend, step, config)
        wall = time.perf_counter() - started
        row = {
            "case": name,
            "config": overrides,
            "method": r.method,
            "device_us": r.typical * 1e6,
            "eager_us": (r.eager_time or 0) * 1e6,
            "host_overhead_us": (r.host_overhead or 0) * 1e6,
            "host_bound": r.host_bound,
            "samples": len(r.samples),
            "warmup_calls": r.warmup_calls,
            "settled": r.settled,
            "stop": r.stop,
            "wall_s": wall,
            "note": r.method_note,
            "clocks": r.clocks,
        }
        rows.append(row)
        print(
            f"{name:24s} {overrides!s:40s} {r.method:10s} device {row['device_us']:8.1f} us  eager "
            f"{row['eager_us']:8.1f} us  host-bound {r.host_bound}  n={len(r.samples):3d} warm={r.warmup_calls:4d} "
            f"settled={r.settled} wall {wall:5.2f} s  clocks {r.clocks}  {r.method_note[:120]}",
            flush=True,
        )
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "timing.json"), "w") as handle:
        json.dump(rows, handle, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
