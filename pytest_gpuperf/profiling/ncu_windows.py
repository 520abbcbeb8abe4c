"""The windows of an ncu session: what the child listed in its manifest and what ncu wrote, per test and step.

The child appends one manifest line per ``measure()``: a window it opened (a marker kernel in ncu's CSV starts it)
or one it did not open for the budget (``not_captured``, no marker). :func:`split_windows` cuts ncu's kernel list
at the markers and gives the n-th opened window to the manifest's n-th opened entry; after an overrun
(``partial``) the windows the CSV holds in full keep their kernels and the rest are missing, with the reason the
parent gives (:class:`SessionCapture`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.profiling.ncu_child import MARKER_KERNEL, WindowKey
from pytest_gpuperf.profiling.ncu_parse import KernelRecord, NcuParseError, csv_rows, parse_raw, unavailable_reason


class NcuUnavailable(Exception):
    """ncu cannot profile here; ``str(exc)`` is the reason shown on the skipped test."""


@dataclass
class NcuCapture:
    """Kernels ncu profiled in one step's window, and where the session's CSV was kept."""

    kernels: list[KernelRecord]
    csv_path: Path
    wall_s: float
    command: list[str]
    #: What the child chose to profile in this window (``ncu_select.Selection.facts``; empty: not said).
    selection: dict[str, Any] = field(default_factory=dict)
    #: ncu's ``--set full`` report holding this window (None unless ``gpuperf_ncu_full_report``).
    report: Path | None = None


@dataclass
class SessionCapture:
    """What one ncu child process captured: kernels per window, its cost, and its command."""

    windows: dict[WindowKey, list[KernelRecord]]
    csv_path: Path
    wall_s: float
    command: list[str]
    tests: list[str] = field(default_factory=list)
    #: The parent's node id -> its :func:`ncu_test_key` (the name the child records its windows under).
    keys: dict[str, str] = field(default_factory=dict)
    #: The last lines of the child's output (its pytest summary), for the reason of a missing window.
    output_tail: str = ""
    #: Each window's manifest facts (what the child chose to profile).
    facts: dict[WindowKey, dict[str, Any]] = field(default_factory=dict)
    #: The session's ``--set full`` report (None unless asked for).
    report: Path | None = None
    #: Windows the child did not open, with why (the budget).
    skipped: dict[WindowKey, str] = field(default_factory=dict)
    #: Why a window of neither kind is missing: the child stopped for the budget, or the session overran it.
    missing_reason: str = ""

    def capture(self, node_id: str, step: str, occurrence: int) -> NcuCapture:
        """The window of one step; NcuUnavailable when the child never reached it (naming what it did record)."""
        keys = [(self.keys[node_id], step, occurrence)] if node_id in self.keys else []
        keys.append((node_id, step, occurrence))
        found = next((key for key in keys if key in self.windows), None)
        if found is None:
            skipped = next((self.skipped[key] for key in keys if key in self.skipped), "")
            raise NcuUnavailable(skipped or self._missing(node_id, step))
        facts = self.facts.get(found, {})
        return NcuCapture(self.windows[found], self.csv_path, self.cost_per_test, self.command, facts, self.report)

    def _missing(self, node_id: str, step: str) -> str:
        recorded = sorted({f"{test} step {name!r}" for test, name, _ in self.windows})
        where = f"windows recorded: {', '.join(recorded[:6]) or 'none'}"
        if self.missing_reason:
            return f"{self.missing_reason}; {where}"
        return (
            f"the ncu session ({len(self.tests)} test(s)) captured no window for {node_id} step {step!r}; "
            f"the child run of the test did not reach that measure() call (see {self.csv_path}); "
            f"{where}; child output: {self.output_tail}"
        )

    @property
    def cost_per_test(self) -> float:
        """Wall seconds of the ncu child divided by the tests it captured."""
        return self.wall_s / max(1, len(self.tests))


@dataclass
class Manifest:
    """The child's manifest read back: the windows it opened (in order, with their process) and those it did not."""

    opened: list[WindowKey] = field(default_factory=list)
    pids: list[object] = field(default_factory=list)
    facts: dict[WindowKey, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[WindowKey, str] = field(default_factory=dict)

    def stop_reason(self) -> str:
        """Why the child stopped opening windows ("" if it did not): the reason of its first budget stop."""
        return next((why for why in self.skipped.values() if "stopped opening windows" in why), "")


#: Manifest keys that name the window; the others are facts about it.
_KEY_FIELDS = ("node_id", "test", "step", "occurrence")


def manifest_entries(path: Path) -> list[tuple[WindowKey, dict[str, Any]]]:
    """Each line of the child's manifest, in order: its key and the facts the child added."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            test = entry.get("test") or entry["node_id"]
            facts = {k: v for k, v in entry.items() if k not in _KEY_FIELDS}
            entries.append(((str(test), str(entry["step"]), int(entry["occurrence"])), facts))
    return entries


def read_manifest_file(path: Path) -> Manifest:
    """The manifest's opened windows (with each one's process, not a fact to show) and its budget skips."""
    manifest = Manifest()
    for key, facts in manifest_entries(path):
        if "not_captured" in facts:
            manifest.skipped[key] = str(facts["not_captured"])
            continue
        manifest.opened.append(key)
        manifest.pids.append(facts.pop("pid", None))
        manifest.facts[key] = facts
    return manifest


def read_manifest(path: Path) -> list[WindowKey]:
    """The (test id, step, occurrence) of each window the child opened, in order."""
    return read_manifest_file(path).opened


def split_windows(
    kernels: Sequence[KernelRecord], manifest: Sequence[WindowKey], pids: Sequence[object] = (), partial: bool = False
) -> dict[WindowKey, list[KernelRecord]]:
    """Cut ncu's kernel list at the marker kernels: the n-th window belongs to the manifest's n-th entry.

    ``pids``: the process that opened each window (a distributed test's rank 0 is not the child). ncu lists each
    process's kernels in order, but not the processes in the order their windows opened, so when the windows'
    processes are the kernels' (ncu's ``Process ID``) each process is cut on its own. ``partial``: the session was
    interrupted, so the CSV may hold a window the child never listed (it was cut short) or stop inside one: only
    the windows both sides hold in full are kept. Raises :class:`NcuParseError` when the markers and the manifest
    disagree otherwise (the windows cannot be attributed then).
    """
    processes = {str(pid) for pid in pids}
    if len(processes) > 1 and len(pids) == len(manifest) and processes == {k.process for k in kernels}:
        windows_of: dict[WindowKey, list[KernelRecord]] = {}
        for process in sorted(processes):
            mine = [key for key, pid in zip(manifest, pids, strict=True) if str(pid) == process]
            windows_of.update(split_windows([k for k in kernels if k.process == process], mine, partial=partial))
        return {key: windows_of[key] for key in manifest if key in windows_of}
    windows: list[list[KernelRecord]] = []
    for kernel in kernels:
        if MARKER_KERNEL in kernel.name:
            windows.append([])
        elif windows:
            windows[-1].append(kernel)
        else:
            raise NcuParseError(f"kernel {kernel.short_name()!r} was captured before any window marker")
    if partial:
        if len(windows) < len(manifest):  # the CSV stops inside the last window it holds
            windows = windows[:-1]
        return dict(zip(manifest, windows[: len(manifest)], strict=False))
    if len(windows) != len(manifest):
        raise NcuParseError(
            f"ncu captured {len(windows)} window(s) but the child recorded {len(manifest)}; cannot attribute kernels"
        )
    return dict(zip(manifest, windows, strict=True))


def parse_session(
    csv_path: Path,
    output: str,
    manifest: list[WindowKey],
    wall: float,
    command: list[str],
    tests: list[str],
    pids: Sequence[object] = (),
    partial: bool = False,
) -> SessionCapture:
    """Parse the child's CSV (the log file, else its stdout) into windows (``pids``: each window's process;
    ``partial``: an interrupted session, see :func:`split_windows`); NcuUnavailable with ncu's reason."""
    log_text = csv_path.read_text(encoding="utf-8", errors="replace") if csv_path.exists() else ""
    everything = f"{log_text}\n{output}"
    reason = unavailable_reason(everything)
    if reason:
        raise NcuUnavailable(f"ncu cannot read GPU counters here: {reason}")
    source = log_text if any(r and r[0] == "ID" for r in csv_rows(log_text)) else output
    try:
        kernels = parse_raw(source, str(csv_path))
        windows = split_windows(kernels, manifest, pids, partial)
    except NcuParseError as exc:
        raise NcuUnavailable(f"ncu printed no usable CSV ({exc}); output tail: {tail(everything)}") from None
    if source is not log_text:
        csv_path.write_text("\n".join(line for line in source.splitlines() if line.startswith('"')), encoding="utf-8")
    if not windows:
        error = unavailable_reason(everything, any_error=True)
        raise NcuUnavailable(f"ncu profiled no kernels: {error or tail(everything)}")
    return SessionCapture(windows, csv_path, wall, command, tests)


def tail(text: str, lines: int = 6) -> str:
    """The last ``lines`` non-blank lines of ``text``, joined by `` | ``."""
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)
