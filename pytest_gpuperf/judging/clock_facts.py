"""The clock rule's two facts, for every module that reads them without judging (evidence, A/B, the field table).

Kept apart from :mod:`pytest_gpuperf.judging.clock_rule`, which judges through :mod:`.compare`, so that the
evidence rules can read them without an import cycle.
"""

from __future__ import annotations

from typing import Any

#: An SM clock this much off the baseline's (relative) is another machine state: time and cycles both decide.
CLOCK_CHANGE = 0.03
#: The doubt of a timing verdict whose clock band straddles its tolerance: the work changed by between two readings,
#: one past it and one not. A fresh process reads its own band, and two that agree past the tolerance decide
#: (:mod:`pytest_gpuperf.judging.agreement`); alone it stays inconclusive.
CLOCK = "clock"
#: Bound classes whose time does not follow the SM clock.
NOT_SM_CLOCKED = ("memory-bound",)


def follows_sm_clock(bound: Any) -> bool:
    """True unless the step is memory-bound (its time follows the memory clock, not the SM clock)."""
    return bound not in NOT_SM_CLOCKED
