"""Peak CPU memory of one call, measured from torch's own allocator events.

``torch.profiler`` with ``profile_memory=True`` records every allocation and free
made through torch's CPU allocator as a ``[memory]`` event with a signed byte
count. Summing them in time order gives the live bytes the step added, and the
maximum of that running sum is the step's peak. This counts tensors (storage of
activations, gradients, temporaries, optimizer state created during the step);
it does not see memory allocated outside torch (numpy arrays, Python objects,
allocator caching in glibc), and tensors that already existed before the step
(weights, inputs) are not part of the number.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable


def measure_cpu_peak_bytes(step: Callable[[], object]) -> int:
    """Run ``step`` once and return the peak of bytes it held live through torch's CPU allocator."""
    # torch.autograd.profiler.profile is the recorder torch.profiler.profile wraps; the wrapper's start asks
    # hasattr(torch, "_inductor"), which imports dynamo and inductor (1.9-7 s of the first test, for nothing).
    from torch.autograd.profiler import profile

    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    logging.getLogger("torch.profiler").setLevel(logging.ERROR)
    with profile(use_cpu=True, use_kineto=True, profile_memory=True, record_shapes=False) as prof:
        step()
    events = [e for e in prof.kineto_results.events() if e.name() == "[memory]" and e.device_type().name == "CPU"]
    events.sort(key=lambda e: e.start_ns())
    live = 0
    peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak
