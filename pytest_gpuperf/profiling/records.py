"""What the profiling feature learned about each measured step, kept on the test item until its report.

No heavy imports: the plugin module reads these records in its report hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

USER_PROPERTY = "gpuperf.profile"
ARTIFACT_PROPERTY = "gpuperf.artifact"
#: The call report's payload key holding each step's ncu table (a list of ``StepTable.as_dict``).
NCU_PAYLOAD = "ncu"


@dataclass
class StepProfile:
    """Verdict lines, top kernels, artifacts and bound-assertion failures of one ``measure()`` call."""

    step: str
    verdicts: list[str] = field(default_factory=list)
    top_kernels: list[str] = field(default_factory=list)
    artifacts: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    #: ncu's per-kernel table of the step (``ncu_table.StepTable.as_dict``), for the JSON and Markdown reports.
    ncu_tables: list[dict[str, Any]] = field(default_factory=list)

    def text(self) -> str:
        """The lines shown in the test's report section and in the terminal summary."""
        lines = [f"[{self.step}]"]
        lines += ["  " + v for v in self.verdicts]
        lines += ["  " + line for line in self.top_kernels]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


#: Records of the current test, appended by the profiling extension during its call phase.
PROFILE_KEY = pytest.StashKey[list[StepProfile]]()
#: True on items whose test requested the ``gpuperf_profile`` fixture.
PROFILE_REQUESTED_KEY = pytest.StashKey[bool]()
