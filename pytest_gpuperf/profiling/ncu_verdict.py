"""ncu's verdict of a step as metrics, and what to say when it disagrees with the analytic verdict.

Which one to believe when they differ (the test's report names it):

* **the analytic verdict** when the step is host-bound, or when ncu's kernels account for
  less than half of the step's measured time: ncu replays each kernel alone, so it cannot
  see the gaps between kernels (launches, host work, syncs) that dominate such a step;
* **ncu** when the analytic share was flagged as a counting error, or when the analytic
  count has no FLOPs (norms, softmax, elementwise) while ncu sees the SMs busy: ncu reads
  hardware counters, the analytic verdict rests on counted work;
* otherwise **ncu** for what the kernels do, with both verdicts kept: the two disagree near
  a boundary (ncu's grey zone, the analytic ridge or latency line), where either class is
  defensible and the baseline's hysteresis keeps the recorded one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_gpuperf.profiling.roofline import HOST_BOUND
from pytest_gpuperf.results import KIND_CATEGORY, KIND_CUSTOM, Metric

if TYPE_CHECKING:
    from pytest_gpuperf.profiling.ncu_capture import NcuCapture
    from pytest_gpuperf.profiling.ncu_sol_rules import SolVerdict
    from pytest_gpuperf.profiling.roofline import Roofline

#: The kernels must cover at least this share of the step's time for ncu's class to describe the step.
KERNEL_COVERAGE = 0.5


def which_to_believe(line: Roofline, sol: SolVerdict, kernel_seconds: float) -> tuple[str, str]:
    """(``"analytic"`` or ``"ncu"``, why) for a step whose two verdicts differ."""
    coverage = kernel_seconds / line.seconds if line.seconds > 0 else 1.0
    if line.bound == HOST_BOUND:
        return "analytic", "ncu replays each kernel alone and cannot see a host that leaves the device idle"
    if coverage < KERNEL_COVERAGE:
        return "analytic", (
            f"ncu's kernels ran {kernel_seconds * 1e6:.1f} us of the {line.seconds * 1e6:.1f} us step "
            f"({coverage:.0%}); the rest is gaps between kernels that ncu does not see"
        )
    if line.over_roof:
        return "ncu", "the analytic count exceeds the roof (a counting error); ncu reads hardware counters"
    if line.flops <= 0 and sol.sm_pct >= sol.memory_pct:
        return "ncu", "the analytic count has no FLOPs (norms, softmax, elementwise) but ncu sees the SMs busier"
    return "ncu", (
        "ncu reads what the kernels did; the step sits near a boundary where both classes are defensible "
        f"({sol.rule}; analytic {line.explain().split(';')[0]})"
    )


def disagreement(line: Roofline | None, sol: SolVerdict, capture: NcuCapture) -> str:
    """One line saying the two verdicts differ and which to believe ('' when they agree or no analytic one)."""
    if line is None or line.bound == sol.bound:
        return ""
    kernel_seconds = sum(k.duration_s for k in capture.kernels)
    who, why = which_to_believe(line, sol, kernel_seconds)
    return f"analytic {line.bound} but ncu {sol.bound}: believe the {who} verdict; {why}"


def ncu_metrics(
    name: str, sol: SolVerdict, capture: NcuCapture, conflict: str, covered: float | None = None
) -> list[Metric]:
    """``<name>.ncu_bound`` (category) and ncu's SM / memory / DRAM percentages (info); ``covered``: the profiled
    kernels' time over the step's measured time."""
    heaviest = sorted(capture.kernels, key=lambda k: -k.duration_s)[:1]
    extra: dict[str, object] = {
        "sm_pct": sol.sm_pct,
        "memory_pct": sol.memory_pct,
        "dram_pct": sol.dram_pct,
        "rule": sol.rule,
        "kernels": len(capture.kernels),
        "kernel_seconds": sum(k.duration_s for k in capture.kernels),
        "csv": str(capture.csv_path),
        "capture_wall_s": capture.wall_s,
        "top_kernel": heaviest[0].short_name() if heaviest else "",
    }
    for fact in ("ops", "profiled_ops", "op_share", "window_s"):
        if fact in capture.selection:
            extra[fact] = capture.selection[fact]
    if covered is not None:
        extra["covered_share"] = round(covered, 4)
    if conflict:
        extra["disagreement"] = conflict
    return [
        Metric(f"{name}.ncu_bound", sol.bound, "", "equal", KIND_CATEGORY, extra=extra),
        Metric(f"{name}.ncu_sm_pct", sol.sm_pct, "%", "equal", KIND_CUSTOM, judged=False),
        Metric(f"{name}.ncu_memory_pct", sol.memory_pct, "%", "equal", KIND_CUSTOM, judged=False),
        Metric(f"{name}.ncu_dram_pct", sol.dram_pct, "%", "equal", KIND_CUSTOM, judged=False),
    ]
