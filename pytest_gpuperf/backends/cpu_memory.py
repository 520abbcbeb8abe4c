"""Peak CPU memory of one call, measured from torch's own allocator events.

``torch.profiler`` with ``profile_memory=True`` records every allocation and free
made through torch's CPU allocator as a ``[memory]`` event with a signed byte
count. Summing them in time order gives the live bytes the step added, and the
maximum of that running sum is the step's peak. This counts tensors (storage of
activations, gradients, temporaries, optimizer state created during the step);
it does not see memory allocated outside torch (numpy arrays, Python objects,
allocator caching in glibc), and tensors that already existed before the step
(weights, inputs) are not part of the number.

Freeing such an older tensor during the probe makes torch log ``CPUAllocator.cpp:245] Memory block of unknown size
was allocated before the profiling started`` on the process's stderr (a C++ log line, not a Python warning, and
shown with a failing test's captured output). The probe is the plugin's own, so that line is dropped while it runs;
everything else the step writes to stderr is written back.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: The lines torch writes to stderr because of the probe itself: the allocator's note on a tensor older than the
#: profiler, and kineto's start and stop lines.
PROBE_NOISE = (b"allocated before the profiling started", b"] profiler_start", b"] profiler_stop")


@contextmanager
def without_probe_noise() -> Iterator[None]:
    """File descriptor 2 into a temporary file while the probe runs; its lines written back without
    :data:`PROBE_NOISE` (in order, after the probe)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to redirect
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = b"".join(
                line for line in caught.read().splitlines(keepends=True) if not any(n in line for n in PROBE_NOISE)
            )
            while kept:
                kept = kept[os.write(2, kept) :]


def measure_cpu_peak_bytes(step: Callable[[], object]) -> int:
    """Run ``step`` once and return the peak of bytes it held live through torch's CPU allocator."""
    return profiled_peak(step)[0]


def profiled_peak(step: Callable[[], object]) -> tuple[int, Any]:
    """Run ``step`` once under the profiler: the peak of bytes it held live through torch's CPU allocator, and the
    finished profiler (whose op events :mod:`.kernel_probe` reads as the call's kernel signature)."""
    # torch.autograd.profiler.profile is the recorder torch.profiler.profile wraps; the wrapper's start asks
    # hasattr(torch, "_inductor"), which imports dynamo and inductor (1.9-7 s of the first test, for nothing).
    from torch.autograd.profiler import profile

    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    logging.getLogger("torch.profiler").setLevel(logging.ERROR)
    recorder = profile(use_cpu=True, use_kineto=True, profile_memory=True, record_shapes=False)
    with without_probe_noise(), recorder as prof:
        step()
    events = [e for e in prof.kineto_results.events() if e.name() == "[memory]" and e.device_type().name == "CPU"]
    events.sort(key=lambda e: e.start_ns())
    live = 0
    peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak, prof
