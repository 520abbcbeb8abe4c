"""The Speed-of-Light table of one captured step, as the article reads ncu: per kernel, then the whole step.

Kernels of the same name are one row (a model's layers launch the same GEMM many times): its calls, its device
time and share of the profiled kernels' time, and its SM / memory / DRAM percentages weighted by each launch's
duration, classified by :func:`~pytest_gpuperf.profiling.ncu_sol_rules.classify_sol`. The step's class weighs every
kernel by its time (:func:`~pytest_gpuperf.profiling.ncu_sol_rules.classify_kernels`). The table also says how much
of the step it covers: the operations the ncu child chose (:mod:`.ncu_select`) and the profiled kernels' time
against the step's time measured in the parent. When the analytic class differs from ncu's, :meth:`StepTable.
difference` names the kernels whose own class is ncu's: they are what makes the difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.profiling.ncu_sol_rules import classify_kernels, classify_sol

if TYPE_CHECKING:
    from pytest_gpuperf.profiling.ncu_parse import KernelRecord
    from pytest_gpuperf.profiling.ncu_sol_rules import SolVerdict

#: Rows shown in the test's report and the Markdown; the JSON keeps up to :data:`JSON_ROWS`.
SHOWN_ROWS = 8
JSON_ROWS = 30
#: Characters of a kernel's name shown (its argument list is cut first).
NAME_WIDTH = 70
#: Kernels named as making the difference between the two classes.
DIFFERENCE_ROWS = 3


@dataclass(frozen=True)
class KernelRow:
    """Kernels of one name in a capture window: calls, time, duration-weighted percentages and class."""

    name: str
    calls: int
    duration_s: float
    share: float
    sm_pct: float
    memory_pct: float
    dram_pct: float
    bound: str

    def as_dict(self) -> dict[str, Any]:
        """The row in the JSON report."""
        return {
            "name": self.name,
            "calls": self.calls,
            "duration_s": self.duration_s,
            "share": round(self.share, 4),
            "sm_pct": round(self.sm_pct, 2),
            "memory_pct": round(self.memory_pct, 2),
            "dram_pct": round(self.dram_pct, 2),
            "bound": self.bound,
        }


def kernel_rows(kernels: Sequence[KernelRecord]) -> list[KernelRow]:
    """One row per kernel name, longest total device time first."""
    groups: dict[str, list[KernelRecord]] = {}
    for kernel in kernels:  # by the full name: template instances cut to the same short name stay apart
        groups.setdefault(kernel.name, []).append(kernel)
    total = sum(k.duration_s for k in kernels)
    rows = []
    for group in groups.values():
        seconds = sum(k.duration_s for k in group)
        weights = [k.duration_s / seconds for k in group] if seconds > 0 else [1.0 / len(group)] * len(group)
        sm, memory, dram = (
            sum(w * getattr(k, attr) for w, k in zip(weights, group, strict=True))
            for attr in ("sm_pct", "memory_pct", "dram_pct")
        )
        bound = classify_sol(sm, memory, dram).bound
        rows.append(
            KernelRow(
                group[0].short_name(NAME_WIDTH),
                len(group),
                seconds,
                seconds / total if total > 0 else 0.0,
                sm,
                memory,
                dram,
                bound,
            )
        )
    return sorted(rows, key=lambda r: -r.duration_s)


@dataclass
class StepTable:
    """ncu's table of one step: its rows, the step's weighted verdict and what share of the step it covers."""

    step: str
    verdict: SolVerdict
    rows: list[KernelRow]
    kernels: int
    kernel_seconds: float
    #: The step's time measured in the parent (None: unknown).
    step_seconds: float | None = None
    #: What the ncu child chose (``ops``, ``profiled_ops``, ``op_share`` or ``whole_step``; see ``Selection.facts``).
    selection: Mapping[str, Any] = field(default_factory=dict)
    #: The analytic class when it differs from ncu's ("" when they agree or there is none).
    analytic: str = ""

    @property
    def covered_share(self) -> float | None:
        """The profiled kernels' device time over the step's measured time."""
        if not self.step_seconds or self.step_seconds <= 0:
            return None
        return self.kernel_seconds / self.step_seconds

    def coverage(self) -> str:
        """``top 24 of 612 operations (91% of their device time); kernels ran 1.2 ms of the 1.5 ms step (82%)``."""
        parts = []
        if "profiled_ops" in self.selection:
            parts.append(
                f"top {self.selection['profiled_ops']} of {self.selection.get('ops', '?')} operations profiled "
                f"({float(self.selection.get('op_share', 0)):.0%} of their device time)"
            )
        elif self.selection.get("whole_step"):
            parts.append(f"every kernel profiled: {self.selection['whole_step']}")
        if self.selection.get("max_kernels"):
            parts.append(
                f"{self.selection.get('expected_kernels', '?')} kernel(s) counted in the ranking call, "
                f"cap {self.selection['max_kernels']} per window"
            )
        if self.selection.get("collectives_left_out"):  # rank 0 of several: replays of collectives would hang
            parts.append(f"{self.selection['collectives_left_out']} collective(s) of the ranks left out")
        if "window_s" in self.selection:
            parts.append(f"{float(self.selection['window_s']):.1f} s in the ncu child")
        share = self.covered_share
        if share is not None:
            parts.append(
                f"its {self.kernels} kernel(s) ran {self.kernel_seconds * 1e3:.3f} ms of the "
                f"{self.step_seconds * 1e3:.3f} ms step ({share:.0%})"  # type: ignore[operator]
            )
        return "; ".join(parts)

    def difference(self) -> list[KernelRow]:
        """When the analytic class differs: the longest kernels whose own class is ncu's (they decide it)."""
        if not self.analytic or self.analytic == self.verdict.bound:
            return []
        return [r for r in self.rows if r.bound == self.verdict.bound][:DIFFERENCE_ROWS]

    def difference_text(self) -> str:
        """``ncu's compute-bound comes from: nvjet_x (62%, compute-bound), ...`` ('' without a difference)."""
        rows = self.difference()
        if not rows:
            return ""
        agreeing = sum(r.share for r in self.rows if r.bound == self.analytic)
        named = ", ".join(f"{r.name} ({r.share:.0%} of kernel time)" for r in rows)
        return (
            f"ncu's {self.verdict.bound} comes from: {named}; kernels whose own class is the analytic "
            f"{self.analytic}: {agreeing:.0%} of kernel time"
        )

    def lines(self) -> list[str]:
        """The table in the test's report section (and the verbose summary)."""
        out = [f"ncu kernels of step {self.step!r}, longest first: {self.coverage()}"]
        out.append(
            f"  {'time':>10} {'share':>6} {'calls':>5} {'SM %':>6} {'mem %':>6} {'DRAM %':>6}  {'class':<15} kernel"
        )
        for row in self.rows[:SHOWN_ROWS]:
            out.append(
                f"  {row.duration_s * 1e6:8.1f}us {row.share:6.1%} {row.calls:5d} {row.sm_pct:6.1f} "
                f"{row.memory_pct:6.1f} {row.dram_pct:6.1f}  {row.bound:<15} {row.name}"
            )
        if len(self.rows) > SHOWN_ROWS:
            rest = sum(r.share for r in self.rows[SHOWN_ROWS:])
            out.append(f"  ... {len(self.rows) - SHOWN_ROWS} more kernel name(s), {rest:.0%} of kernel time")
        out.append(f"  step, weighted by kernel time: {self.verdict.describe()}")
        difference = self.difference_text()
        if difference:
            out.append(f"  {difference}")
        return out

    def as_dict(self, nodeid: str) -> dict[str, Any]:
        """The table in the JSON report (``gpuperf.ncu[]``; docs/report-format.md)."""
        return {
            "nodeid": nodeid,
            "step": self.step,
            "bound": self.verdict.bound,
            "rule": self.verdict.rule,
            "sm_pct": round(self.verdict.sm_pct, 2),
            "memory_pct": round(self.verdict.memory_pct, 2),
            "dram_pct": round(self.verdict.dram_pct, 2),
            "kernels": self.kernels,
            "kernel_seconds": self.kernel_seconds,
            "step_seconds": self.step_seconds,
            "covered_share": None if self.covered_share is None else round(self.covered_share, 4),
            "selection": dict(self.selection),
            "analytic_bound": self.analytic or None,
            "difference": [r.name for r in self.difference()],
            "difference_text": self.difference_text(),
            "coverage": self.coverage(),
            "rows": [r.as_dict() for r in self.rows[:JSON_ROWS]],
        }


def step_table(
    step: str,
    kernels: Sequence[KernelRecord],
    step_seconds: float | None = None,
    selection: Mapping[str, Any] | None = None,
    analytic: str = "",
) -> StepTable:
    """The table of one captured window (``kernels`` non-empty)."""
    verdict = classify_kernels(kernels)
    seconds = sum(k.duration_s for k in kernels)
    return StepTable(
        step, verdict, kernel_rows(kernels), len(kernels), seconds, step_seconds, selection or {}, analytic
    )


def markdown_of(table: Mapping[str, Any]) -> str:
    """One step's table (:meth:`StepTable.as_dict`, as the call report carried it) in the Markdown summary."""
    coverage = table.get("coverage") or "coverage unknown"
    head = f"**`{table.get('nodeid')}`** step `{table.get('step')}`: ncu **{table.get('bound')}** ({coverage})"
    lines = [
        "| kernel | calls | time (us) | share | SM % | memory % | DRAM % | class |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in list(table.get("rows", []))[:SHOWN_ROWS]:
        name = str(row.get("name", "")).replace("|", "\\|")
        lines.append(
            f"| `{name}` | {row.get('calls', 0)} | {float(row.get('duration_s', 0)) * 1e6:.1f} | "
            f"{float(row.get('share', 0)):.0%} | {float(row.get('sm_pct', 0)):.0f} | "
            f"{float(row.get('memory_pct', 0)):.0f} | {float(row.get('dram_pct', 0)):.0f} | {row.get('bound', '')} |"
        )
    difference = table.get("difference_text") or ""
    return "\n".join([head, "", *lines, *(["", str(difference)] if difference else [])])
