"""CUDA-graph timing of a whole step: the host's launch path off the clock.

A step launched from Python can spend longer in the host's launch path than on
the GPU (a small layer's forward + backward can read twice its graph replay by
events around eager calls), so events around eager calls time the host
as much as the device. Capturing ``iters`` calls of the whole step (forward,
backward, a capturable optimizer) into one CUDA graph and timing its replay
with CUDA events leaves only the GPU's own work (and the graph's small
inter-node gaps). Capture fails for steps that synchronize with the host
(``.item()``, printing a tensor), that use non-capturable ops or optimizers
(``capturable=False``), or that allocate in ways the graph pool cannot serve;
:func:`capture` then returns None with the reason, leaves torch's CUDA RNG
usable, and the caller falls back (:mod:`pytest_gpuperf.timing.cuda.device_time`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: At most this many step calls are captured in one graph (keeps capture time and memory small).
MAX_GRAPH_CALLS = 1000


class GraphTimer:
    """A captured graph of ``iters`` step calls; :meth:`time` replays it once between CUDA events."""

    def __init__(self, graph: Any, iters: int) -> None:
        self.graph = graph
        self.iters = iters

    def time(self) -> float:
        """Seconds one replay of the whole graph (``iters`` calls) took on the GPU."""
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        self.graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def close(self) -> None:
        """Free the graph and its private memory pool (so later peak-memory readings are not inflated)."""
        import torch

        torch.cuda.synchronize()
        self.graph.reset()
        self.graph = None


def capture(step: Callable[[], object], iters: int) -> tuple[GraphTimer | None, str]:
    """Capture ``iters`` (capped at :data:`MAX_GRAPH_CALLS`) calls of ``step``; (None, reason) when it cannot."""
    import torch

    from pytest_gpuperf.timing.cuda.host_syncs import HOST_SYNC_MESSAGE, count_cuda_syncs, host_syncs_known

    known = host_syncs_known(step)  # counted by the measuring pipeline's probe stage, or None
    if known:
        return None, f"RuntimeError: {HOST_SYNC_MESSAGE}"
    iters = max(1, min(iters, MAX_GRAPH_CALLS))
    graph = None
    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    saved_rng = None
    try:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
            # A step that synchronizes with the host (``.item()``, a CPU copy) cannot be captured, and a capture
            # that fails part-way leaves torch's CUDA RNG in capture state ("Offset increment outside graph
            # capture"), breaking every later random op: detect the sync before any capture starts (here when
            # the probe stage did not count them).
            if known is None and count_cuda_syncs(step):
                raise RuntimeError(HOST_SYNC_MESSAGE)
            step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        # A capture that CUDA invalidates (an explicit synchronize, a non-capturable library call) never runs the
        # RNG's capture epilogue: keep a copy of its state to put back when the capture fails.
        saved_rng = generator.clone_state()
        with torch.cuda.graph(graph):
            for _ in range(iters):
                step()
        torch.cuda.synchronize()
        graph.replay()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any capture failure means "time it the usual way"
        for cleanup in (
            lambda: graph.reset() if graph is not None else None,
            lambda: generator.graphsafe_set_state(saved_rng) if saved_rng is not None else None,
            torch.cuda.synchronize,
        ):
            try:
                cleanup()
            except Exception:  # noqa: BLE001 - a failed capture may leave nothing to reset
                pass
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return GraphTimer(graph, iters), ""

