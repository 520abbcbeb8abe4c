"""Parsing what a script under ``gpuperf_torchrun`` prints: ``GPUPERF {...}`` lines and training-log lines.

Each rank prints one machine-readable line (anything may precede ``GPUPERF``, for
example torchrun's ``[rank0]:`` prefix)::

    GPUPERF {"rank": 0, "peak_memory": 123456789, "tokens_per_s": 5321.4, "step_times": [0.41, 0.40]}

``rank`` is required; ``peak_memory`` is bytes, ``tokens_per_s`` tokens per second,
``step_times`` seconds per step (optional samples for noise-aware judging); other
keys are kept in :attr:`RankReport.extra`. A training log's human-readable line
is understood too (printed by rank 0 only)::

    Step 4 | Loss: 10.3721 | Peak VRAM/GPU: 1.52 GB
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

PREFIX = "GPUPERF "
_SEED_LINE = re.compile(
    r"Step\s+(?P<step>\d+)\s*\|\s*Loss:\s*(?P<loss>[-+0-9.eEnaif]+)\s*\|\s*Peak VRAM/GPU:\s*(?P<gb>[0-9.eE+-]+)\s*GB"
)


class ScriptLineError(ValueError):
    """A ``GPUPERF`` line that is not valid JSON or lacks a field."""


@dataclass
class RankReport:
    """What one rank reported on its ``GPUPERF`` line."""

    rank: int
    peak_memory: float | None = None
    tokens_per_s: float | None = None
    step_times: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SeedLine:
    """One ``Step i | Loss: x | Peak VRAM/GPU: y GB`` line of a training log."""

    step: int
    loss: float
    peak_bytes: float


@dataclass
class ScriptReport:
    """Everything parsed from a script's output."""

    ranks: dict[int, RankReport] = field(default_factory=dict)
    seed_lines: list[SeedLine] = field(default_factory=list)

    @property
    def seed_peak_bytes(self) -> float | None:
        """The largest peak the training-log lines printed (rank 0's GPU), or None."""
        return max((line.peak_bytes for line in self.seed_lines), default=None)


def format_line(**fields: Any) -> str:
    """The ``GPUPERF {...}`` line for ``fields`` (what a script prints)."""
    if "rank" not in fields:
        raise ValueError("a GPUPERF line needs a 'rank' field")
    return PREFIX + json.dumps(fields, sort_keys=True)


def parse_line(line: str) -> RankReport | None:
    """The report on ``line`` if it carries ``GPUPERF {...}``, else None; bad JSON raises ScriptLineError."""
    index = line.find(PREFIX)
    if index < 0:
        return None
    payload = line[index + len(PREFIX) :].strip()
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} at column {exc.pos}"
        raise ScriptLineError(f"GPUPERF line is not valid JSON ({where}): {payload[:200]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rank"), int):
        raise ScriptLineError(f"GPUPERF line needs a JSON object with an integer 'rank': {payload[:200]}")
    report = RankReport(rank=data.pop("rank"))
    for key in ("peak_memory", "tokens_per_s"):
        if data.get(key) is not None:
            setattr(report, key, float(data.pop(key)))
    times = data.pop("step_times", None) or []
    report.step_times = [float(t) for t in times]
    report.extra = data
    return report


def parse_seed_line(line: str) -> SeedLine | None:
    """A ``Step | Loss | Peak VRAM/GPU`` line (GB = 1e9 bytes, as the script divides), or None."""
    match = _SEED_LINE.search(line)
    if match is None:
        return None
    return SeedLine(int(match["step"]), float(match["loss"]), float(match["gb"]) * 1e9)


def split_glued(line: str) -> list[str]:
    """Each ``GPUPERF {...}`` report on ``line``: ranks writing to one pipe at once can glue two onto one line."""
    first = line.find(PREFIX)
    if first < 0:
        return []
    return [PREFIX + chunk for chunk in line[first + len(PREFIX) :].split(PREFIX)]


def parse_output(text: str) -> ScriptReport:
    """Parse a script's whole output; a rank reporting twice keeps its last line."""
    report = ScriptReport()
    for line in text.splitlines():
        rank_reports = [parse_line(chunk) for chunk in split_glued(line)]
        if rank_reports:
            for rank_report in rank_reports:
                if rank_report is not None:
                    report.ranks[rank_report.rank] = rank_report
            continue
        seed = parse_seed_line(line)
        if seed is not None:
            report.seed_lines.append(seed)
    return report
