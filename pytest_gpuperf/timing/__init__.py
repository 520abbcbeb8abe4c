"""Timing: how long one step takes on its device (the measuring pipeline's "time" stage).

* :mod:`.loop`: :func:`measure_time`, the timing loop (warm-up, then the timed samples);
* :mod:`.sampling`: :class:`MeasureConfig`, :class:`TimingResult` and the sample loop both clocks share;
* :mod:`.warmup`, :mod:`.contention`, :mod:`.l2_flush`: warm-up to steady state, CPU contention, cold-cache runs;
* :mod:`.cuda`: the GPU's own time per step on CUDA (graphs, CUPTI, NVML clocks);
* :mod:`.metrics`: the metrics one timed step yields (time, throughput, cycles, host overhead, rates);
* :mod:`.sync_timer`: pytest-benchmark's device-synchronizing timer;
* :mod:`.calibration`: the host CPU's speed class, a fixed kernel timed once per process.

Code outside this package imports the names below from here.
"""

from __future__ import annotations

from pytest_gpuperf.timing.loop import measure_time
from pytest_gpuperf.timing.sampling import CPU_CLOCKS, GRAPH_MODES, MeasureConfig, TimingResult

__all__ = ["CPU_CLOCKS", "GRAPH_MODES", "MeasureConfig", "TimingResult", "measure_time"]
