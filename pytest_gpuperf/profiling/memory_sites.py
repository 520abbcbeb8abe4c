"""Where a grown peak comes from: the allocation sites of one step, named by the user's file and line.

Taken only when a step's peak memory is past its baseline's tolerance (a passing run pays nothing): the step runs
once more under a dispatch mode that sees every op and the tensors it returns: the bytes of new storage are summed
by the line of the caller's own code that ran the op (its innermost frame outside torch, this plugin and installed
packages) and by the op. The same on every torch device (the CPU profiler's memory events name only the enclosing
function's first line). The largest sites go into the failing verdict's message.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pytest_gpuperf.units import format_value

if TYPE_CHECKING:
    from pytest_gpuperf.extensions import MeasureContext
    from pytest_gpuperf.results import Metric

#: Sites named in a failure.
TOP_SITES = 3
#: Path fragments of frames that are not the user's code.
LIBRARY_PARTS = (f"{os.sep}torch{os.sep}", f"{os.sep}pytest_gpuperf{os.sep}", "site-packages", "<frozen", "<string>")


def user_frame(frames: Iterable[tuple[str, int]]) -> str:
    """``file:line`` of the innermost frame outside torch, this plugin and installed packages ('' if none)."""
    for filename, line in frames:
        if filename and not any(part in filename for part in LIBRARY_PARTS):
            return f"{os.path.basename(filename)}:{line}"
    return ""


def _caller_line() -> str:
    """``file:line`` of the innermost frame of the caller's own code on the current stack ('' if none)."""
    import sys

    frame = sys._getframe(2)
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return user_frame(frames)


def _sites(step: Callable[[], object]) -> Counter[tuple[str, str]]:
    """Bytes of new storage each op of one call of ``step`` returned, by (the caller's line, the op)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    sites: Counter[tuple[str, str]] = Counter()

    def storage(tensor: torch.Tensor) -> int:
        return tensor.untyped_storage().data_ptr()

    class Allocations(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {storage(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            grown = sum(
                t.untyped_storage().nbytes()
                for t in tree_leaves(out)
                if isinstance(t, torch.Tensor) and not t._is_view() and storage(t) not in inputs
            )
            if grown:
                sites[(_caller_line() or "(no user frame)", func.overloadpacket.__name__)] += grown
            return out

    with Allocations():
        step()
    return sites


def allocation_sites(step: Callable[[], object], top: int = TOP_SITES) -> list[str]:
    """The largest allocation sites of one call of ``step``: ``file:line op size``, largest first."""
    sites = _sites(step)
    return [f"{where} {op} {format_value(size, 'B')}" for (where, op), size in sites.most_common(top)]


class MemorySites:
    """The count hook: a peak past its baseline's tolerance gets its allocation sites in the failure message."""

    def pytest_gpuperf_after_measure(self, context: MeasureContext) -> list[Metric]:
        """Attach the sites to the step's peak memory metric when it will fail (adds no metric)."""
        metric = next((m for m in context.metrics if m.name == f"{context.name}.peak_memory"), None)
        baseline = context.baseline_value(f"{context.name}.peak_memory") if metric is not None else None
        if metric is None or not isinstance(baseline, (int, float)) or not isinstance(metric.value, (int, float)):
            return []
        tolerance = context.judging.metric_tolerance(context.test, metric)
        if metric.value <= baseline * (1 + tolerance):
            return []
        if not context.test.backend.runs_torch:
            return []
        try:
            sites = allocation_sites(context.step)
        except Exception as exc:  # noqa: BLE001 - attribution must never turn a verdict into an error
            metric.extra["regression_hint"] = f"allocation sites unavailable ({type(exc).__name__}: {exc})"
            return []
        if sites:
            metric.extra["allocation_sites"] = sites
            metric.extra["regression_hint"] = "largest allocations of one step: " + "; ".join(sites)
        return []
