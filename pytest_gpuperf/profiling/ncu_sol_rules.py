"""Nsight Compute's Speed-of-Light rules: ncu's SM / memory / DRAM percentages -> a bound class.

The classes are the roofline's (:mod:`pytest_gpuperf.profiling.roofline`); ncu never says host-bound
(it replays each kernel alone, so the gaps between kernels are invisible to it).

Rules, applied to a kernel's (or a step's duration-weighted) Speed-of-Light numbers:

1. **latency-bound** when compute (SM) and memory throughput are both below 60% of peak:
   Nsight Compute's own rule (its SOL section then points to latency, not to a bound);
2. **memory-bound** when SM < 25% and DRAM (HBM) > 75%: the "seed table" (docs/roofline.md);
3. **compute-bound** when SM > 75% and DRAM < 50%: the "seed table";
4. otherwise (the grey zone between the table's rows, where many real kernels land), the
   unit nearer its peak names the bound: SM% against memory% (memory% is the busiest memory
   level, L1 to DRAM).

The rule that decided is kept with the verdict so a report can show why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_gpuperf.profiling.roofline import COMPUTE_BOUND, LATENCY_BOUND, MEMORY_BOUND

if TYPE_CHECKING:
    from pytest_gpuperf.profiling.ncu_parse import KernelRecord

#: ncu: both compute and memory below this percentage of peak -> latency issues.
NCU_LATENCY_PCT = 60.0
#: The seed table's memory row: memory-bound kernels show SM below / HBM above these.
TABLE_MEMORY_SM_BELOW = 25.0
TABLE_MEMORY_DRAM_ABOVE = 75.0
#: The seed table's compute row: compute-bound kernels show SM above / HBM below these.
TABLE_COMPUTE_SM_ABOVE = 75.0
TABLE_COMPUTE_DRAM_BELOW = 50.0


@dataclass(frozen=True)
class SolVerdict:
    """A bound class from Speed-of-Light percentages, with the numbers and the rule that decided."""

    bound: str
    sm_pct: float
    memory_pct: float
    dram_pct: float
    rule: str

    def describe(self) -> str:
        """``compute-bound (SM 93%, memory 95%, DRAM 21%; seed table: SM > 75% and DRAM < 50%)``."""
        return (
            f"{self.bound} (SM {self.sm_pct:.0f}%, memory {self.memory_pct:.0f}%, DRAM {self.dram_pct:.0f}%; "
            f"{self.rule})"
        )


def classify_sol(sm_pct: float, memory_pct: float, dram_pct: float) -> SolVerdict:
    """Apply the rules of this module's docstring to one set of Speed-of-Light percentages."""
    if sm_pct < NCU_LATENCY_PCT and memory_pct < NCU_LATENCY_PCT:
        rule = f"ncu rule: SM and memory both < {NCU_LATENCY_PCT:.0f}% of peak"
        return SolVerdict(LATENCY_BOUND, sm_pct, memory_pct, dram_pct, rule)
    if sm_pct < TABLE_MEMORY_SM_BELOW and dram_pct > TABLE_MEMORY_DRAM_ABOVE:
        rule = f"seed table: SM < {TABLE_MEMORY_SM_BELOW:.0f}% and DRAM > {TABLE_MEMORY_DRAM_ABOVE:.0f}%"
        return SolVerdict(MEMORY_BOUND, sm_pct, memory_pct, dram_pct, rule)
    if sm_pct > TABLE_COMPUTE_SM_ABOVE and dram_pct < TABLE_COMPUTE_DRAM_BELOW:
        rule = f"seed table: SM > {TABLE_COMPUTE_SM_ABOVE:.0f}% and DRAM < {TABLE_COMPUTE_DRAM_BELOW:.0f}%"
        return SolVerdict(COMPUTE_BOUND, sm_pct, memory_pct, dram_pct, rule)
    if sm_pct >= memory_pct:
        return SolVerdict(COMPUTE_BOUND, sm_pct, memory_pct, dram_pct, "grey zone: SM% >= memory%")
    return SolVerdict(MEMORY_BOUND, sm_pct, memory_pct, dram_pct, "grey zone: memory% > SM%")


def classify_kernels(kernels: Sequence[KernelRecord]) -> SolVerdict:
    """The verdict of a region of kernels: their percentages weighted by each kernel's duration.

    A weighted mean is the share of the region's device time each unit was busy, so a
    step of many short, idle kernels reads as latency-bound even if one kernel saturates.
    """
    if not kernels:
        raise ValueError("no kernels to classify")
    total = sum(k.duration_s for k in kernels)
    if total <= 0:
        weights = [1.0 / len(kernels)] * len(kernels)
    else:
        weights = [k.duration_s / total for k in kernels]
    sm = sum(w * k.sm_pct for w, k in zip(weights, kernels, strict=True))
    memory = sum(w * k.memory_pct for w, k in zip(weights, kernels, strict=True))
    dram = sum(w * k.dram_pct for w, k in zip(weights, kernels, strict=True))
    return classify_sol(sm, memory, dram)
