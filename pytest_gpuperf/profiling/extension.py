"""The ``measure()`` extension of the profiling feature: bound verdicts, torch.profiler and ncu capture.

Registered as a plugin by :mod:`pytest_gpuperf.profiling.plugin` (it implements the
``pytest_gpuperf_after_measure`` hook). For every
measured step on any backend (torch devices and Vulkan) it returns ``<name>.bound``
(category, stored in the baseline: a change fails the test) with
``<name>.arithmetic_intensity`` and ``<name>.roof_share`` (info); with ncu capture also
``<name>.ncu_bound`` and the Speed-of-Light percentages, and a note when the two
verdicts disagree. ``@pytest.mark.gpuperf(bound=...)`` is checked on every backend.
What it learned is stashed on the test item for the report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_gpuperf.profiling.records import PROFILE_KEY, PROFILE_REQUESTED_KEY, StepProfile
from pytest_gpuperf.results import Metric

if TYPE_CHECKING:
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.extensions import MeasureContext
    from pytest_gpuperf.profiling.ncu_capture import PendingSession, SessionCapture
    from pytest_gpuperf.profiling.roofline import Roofline
    from pytest_gpuperf.profiling.roofs import RoofProvider


@dataclass(frozen=True)
class ProfilingSettings:
    """The feature's options, resolved once at configure time."""

    profile: bool
    ncu: bool
    artifacts_dir: Path
    latency_share: float | None
    ncu_timeout: float
    rootdir: Path
    xdist: bool
    #: True in an xdist worker: the worker captures its own ncu tests one at a time (it does not know its share).
    xdist_worker: bool = False
    #: Where pytest was started, its ini file and command line: the ncu child collects the same tests from there.
    invocation_dir: Path | None = None
    inifile: Path | None = None
    invocation_args: tuple[str, ...] = ()
    #: Classify every step, measuring missing roofs whatever the verdicts need (``GPUPERF_ROOFS=always``).
    roofs_always: bool = False
    #: Keep ncu's ``--set full`` report of the captured steps (``gpuperf_ncu_full_report``).
    ncu_full_report: bool = False


def profile_requested(item: pytest.Item, settings: ProfilingSettings) -> bool:
    """torch.profiler capture for this test: the flag, the ``gpuperf_profile`` marker or fixture."""
    return (
        settings.profile
        or item.get_closest_marker("gpuperf_profile") is not None
        or item.stash.get(PROFILE_REQUESTED_KEY, False)
    )


def ncu_requested(item: pytest.Item, settings: ProfilingSettings) -> bool:
    """Nsight Compute capture for this test: the flag or the ``gpuperf_ncu`` marker."""
    return settings.ncu or item.get_closest_marker("gpuperf_ncu") is not None


class ProfilingExtension:
    """Adds bound verdicts (analytic, and ncu's when captured) and profiler artifacts to each measured step."""

    def __init__(self, settings: ProfilingSettings, roofs: RoofProvider) -> None:
        self.settings = settings
        self.roofs = roofs
        self.current_item: pytest.Item | None = None
        self._occurrences: dict[str, int] = {}
        #: Test ids that asked for ncu capture (set at collection); captured together in one ncu child.
        self.ncu_node_ids: list[str] = []
        #: Node id -> its ncu test key (absolute file path + the rest of the id), for every test collected here.
        self.ncu_keys: dict[str, str] = {}
        self.ncu_distributed: set[str] = set()
        self._ncu_session: SessionCapture | None = None
        #: The session's ncu child, started at collection and waiting for the first ncu test (:meth:`prestart_ncu`).
        self._ncu_pending: PendingSession | None = None
        self._ncu_error: str | None = None

    def select_ncu_tests(self, keys: dict[str, str], distributed: set[str] | None = None) -> None:
        """The tests that asked for ncu capture (node id -> ncu test key), noted at collection; ``distributed``:
        those whose ranks are processes of their own (ncu must follow the child's child processes for them)."""
        self.ncu_node_ids = list(keys)
        self.ncu_keys = dict(keys)
        self.ncu_distributed = set(distributed or ())

    def _all_processes(self, node_ids: list[str]) -> bool:
        return any(node_id in self.ncu_distributed for node_id in node_ids)

    def start_item(self, item: pytest.Item | None) -> None:
        """Called around each test by the plugin so ``after_measure`` knows whose step it is."""
        self.current_item = item
        self._occurrences = {}

    def pytest_gpuperf_after_measure(self, context: MeasureContext) -> list[Metric]:
        """The hook: see :meth:`after_measure`."""
        return self.after_measure(context)

    def after_measure(self, context: MeasureContext) -> list[Metric]:
        """Classify the step; capture a trace and ncu numbers when asked; stash the record on the item."""
        from pytest_gpuperf.profiling.analytic import analytic_verdict, step_seconds

        item = self.current_item
        record = StepProfile(context.name)
        occurrence = self._occurrences.get(context.name, 0)
        self._occurrences[context.name] = occurrence + 1
        backend = context.test.backend
        baseline_bound = self._baseline_value(context, f"{context.name}.bound")
        result = analytic_verdict(
            context,
            self.roofs,
            context.judging.fingerprint(context.test),
            self.settings.latency_share,
            baseline_bound,
            self._needs_roofs(context, item, baseline_bound),
        )
        metrics = list(result.metrics)
        if result.note:
            record.notes.append(result.note)
        if result.skipped:
            record.verdicts.append(f"analytic: {result.skipped}")
        if result.line is not None and result.count is not None:
            count = result.count
            record.verdicts.append(f"analytic {result.line.explain()} [{count.flops_source}; {count.bytes_source}]")
            if result.line.over_roof:
                record.notes.append(result.line.counting_error())
        if item is not None and backend.runs_torch and profile_requested(item, self.settings):
            self._trace(context, record, occurrence)
        if item is not None and ncu_requested(item, self.settings):
            seconds = step_seconds(context.timing) if context.timing is not None else None
            metrics += self._ncu(context.test, context.name, record, occurrence, seconds, result.line)
        self._check_expected_bound(context, record, metrics)
        if item is not None:
            item.stash.setdefault(PROFILE_KEY, []).append(record)
        return metrics

    def _needs_roofs(self, context: MeasureContext, item: pytest.Item | None, baseline_bound: str | None) -> bool:
        """True when a verdict of this run needs the step's bound class, so missing roofs must be measured.

        It does when the class is recorded (``--gpuperf-update``), judged (the baseline holds one), asserted
        (``bound=``), compared with ncu's or shown with a trace, or when the roofs were asked to be measured
        (``gpuperf_recalibrate``), or when the process is told to (``GPUPERF_ROOFS=always``: an A/B worker,
        whose class the controller compares with the other side's). Otherwise cached roofs are used when there
        are some, and none are measured.
        """
        settings = getattr(context.judging, "settings", None)
        return (
            self.settings.roofs_always
            or bool(getattr(settings, "update", False))
            or baseline_bound is not None
            or context.test.options.get("bound") is not None
            or self.roofs.recalibrate
            or (item is not None and (ncu_requested(item, self.settings) or profile_requested(item, self.settings)))
        )

    def _baseline_value(self, context: MeasureContext, metric: str) -> str | None:
        """The class the baseline file holds for ``metric`` (also when re-recording; see ``recorded_value``)."""
        value = context.recorded_value(metric)
        return value if isinstance(value, str) else None

    # -- torch.profiler -------------------------------------------------------------
    def _artifact(self, node_id: str, name: str, occurrence: int, suffix: str) -> Path:
        from pytest_gpuperf.profiling.torch_trace import artifact_stem

        stem = artifact_stem(node_id, name)
        if occurrence:
            stem += f"-{occurrence}"
        return self.settings.artifacts_dir / f"{stem}{suffix}"

    def _trace(self, context: MeasureContext, record: StepProfile, occurrence: int) -> None:
        from pytest_gpuperf.profiling.torch_trace import capture_trace

        path = self._artifact(context.test.node_id, context.name, occurrence, ".trace.json")
        result = capture_trace(context.test.backend, context.step, path)
        record.artifacts.append(path)
        record.top_kernels.extend(result.summary().splitlines())

    # -- Nsight Compute ---------------------------------------------------------------
    def _session_capture(self, ncu: str, node_id: str) -> SessionCapture:
        """The session's one ncu child (started at the first ncu test; per test under xdist)."""
        from pytest_gpuperf.profiling.ncu_capture import NcuUnavailable, capture_session

        if self._ncu_error is not None:
            raise NcuUnavailable(self._ncu_error)
        if self._ncu_session is not None and node_id in self._ncu_session.tests:
            return self._ncu_session
        together = not self.settings.xdist_worker and node_id in self.ncu_node_ids
        node_ids = self.ncu_node_ids if together else [node_id]
        stem = "ncu-session" if together else self._artifact_stem(node_id)
        pending, self._ncu_pending = self._ncu_pending, None
        try:
            if together and pending is not None:
                self._ncu_session = pending.finish(self.settings.ncu_timeout)
                return self._ncu_session
            if pending is not None:
                pending.discard()
            self._ncu_session = capture_session(
                ncu,
                node_ids,
                "cuda",
                self.settings.rootdir,
                self.settings.artifacts_dir / f"{stem}.ncu.csv",
                self.settings.ncu_timeout,
                self.settings.xdist,
                invocation_dir=self.settings.invocation_dir,
                inifile=self.settings.inifile,
                parent_args=self.settings.invocation_args,
                keys={n: self.ncu_keys[n] for n in node_ids if n in self.ncu_keys},
                full_report=self._full_report(stem),
                all_processes=self._all_processes(node_ids),
            )
        except NcuUnavailable as exc:
            if together:
                self._ncu_error = str(exc)  # the same reason holds for every test of the session
            raise
        return self._ncu_session

    def prestart_ncu(self, ncu: str) -> None:
        """Start the session's ncu child now, gated: its start-up (ncu, Python, imports, collection, CUDA context)
        overlaps the measuring of the tests before the first ncu test, which releases it (:meth:`_session_capture`).
        Not under xdist: a worker captures its own tests one by one."""
        from pytest_gpuperf.profiling.ncu_capture import NcuUnavailable, start_session

        if self.settings.xdist_worker or not self.ncu_node_ids or self._ncu_pending is not None:
            return
        try:
            self._ncu_pending = start_session(
                ncu,
                self.ncu_node_ids,
                "cuda",
                self.settings.rootdir,
                self.settings.artifacts_dir / "ncu-session.ncu.csv",
                self.settings.xdist,
                invocation_dir=self.settings.invocation_dir,
                inifile=self.settings.inifile,
                parent_args=self.settings.invocation_args,
                keys={n: self.ncu_keys[n] for n in self.ncu_node_ids if n in self.ncu_keys},
                gated=True,
                full_report=self._full_report("ncu-session"),
                budget=self.settings.ncu_timeout,
                all_processes=self._all_processes(self.ncu_node_ids),
            )
        except NcuUnavailable as exc:
            self._ncu_error = str(exc)

    def discard_ncu(self) -> None:
        """Stop a prestarted ncu child that no test released (the session stopped early, or nothing measured)."""
        pending, self._ncu_pending = self._ncu_pending, None
        if pending is not None:
            pending.discard()

    def _full_report(self, stem: str) -> Path | None:
        """Where ncu keeps its ``--set full`` report of a child's windows (None unless asked for)."""
        return self.settings.artifacts_dir / f"{stem}.ncu-rep" if self.settings.ncu_full_report else None

    @staticmethod
    def _artifact_stem(node_id: str) -> str:
        from pytest_gpuperf.profiling.torch_trace import artifact_stem

        return artifact_stem(node_id, "ncu")

    def pytest_gpuperf_after_world(
        self, item: pytest.Item, context: TestContext, steps: dict[str, float]
    ) -> list[Metric]:
        """The hook: ncu's class and table of each step a distributed test measured on its ranks, from the window
        rank 0 opened in the ncu child (``ncu_child.RankWindow``). No analytic class: counting needs the step,
        which ran on the ranks only."""
        if not ncu_requested(item, self.settings):
            return []
        metrics: list[Metric] = []
        for name, seconds in steps.items():
            record = StepProfile(name)
            item.stash.setdefault(PROFILE_KEY, []).append(record)
            metrics += self._ncu(context, name, record, 0, seconds, None)
        return metrics

    def _ncu(
        self,
        test: TestContext,
        name: str,
        record: StepProfile,
        occurrence: int,
        seconds: float | None,
        line: Roofline | None,
    ) -> list[Metric]:
        """ncu's class, table and metrics of one step (``seconds``: its measured time per call, for coverage)."""
        from pytest_gpuperf.profiling.ncu_capture import NcuUnavailable, find_ncu
        from pytest_gpuperf.profiling.ncu_table import step_table
        from pytest_gpuperf.profiling.ncu_verdict import disagreement, ncu_metrics

        ncu = find_ncu()
        if ncu is None:
            pytest.skip(f"{test.node_id}: {NCU_MISSING}")
        if test.backend.name != "cuda":
            record.notes.append(f"ncu: backend {test.backend.name} runs no CUDA kernels; nothing to capture")
            return []
        try:
            capture = self._session_capture(ncu, test.node_id).capture(test.node_id, name, occurrence)
        except NcuUnavailable as exc:
            pytest.skip(f"{test.node_id}: Nsight Compute capture unavailable: {exc}")
        if not capture.kernels:
            record.notes.append(f"ncu: no kernel ran in the window of step {name!r}")
            return []
        analytic = line.bound if line is not None else ""
        table = step_table(name, capture.kernels, seconds, capture.selection, analytic)
        sol = table.verdict
        record.artifacts.append(capture.csv_path)
        if capture.report is not None:
            record.artifacts.append(self._report_link(test.node_id, name, occurrence, capture.report))
            record.verdicts.append(f"ncu --set full report: kernels {_id_range(capture)} of {capture.report.name}")
        record.verdicts.append(
            f"ncu {sol.describe()} over {len(capture.kernels)} kernel(s), {capture.wall_s:.1f} s of ncu per test"
        )
        record.verdicts += ["  " + text for text in table.lines()]
        record.ncu_tables.append(table.as_dict(test.node_id))
        conflict = disagreement(line, sol, capture)
        if conflict:
            record.notes.append(conflict + (f"; {table.difference_text()}" if table.difference_text() else ""))
        return ncu_metrics(name, sol, capture, conflict, table.covered_share)

    def _report_link(self, node_id: str, name: str, occurrence: int, report: Path) -> Path:
        """The session's ``--set full`` report under this test's own name (a hard link, else a copy)."""
        import shutil

        named = self._artifact(node_id, name, occurrence, ".ncu-rep")
        if named != report:
            named.unlink(missing_ok=True)
            try:
                os.link(report, named)
            except OSError:
                shutil.copyfile(report, named)
        return named

    # -- @pytest.mark.gpuperf(bound=...) ------------------------------------------------
    def _check_expected_bound(self, context: MeasureContext, record: StepProfile, metrics: list[Metric]) -> None:
        from pytest_gpuperf.profiling.roofline import normalize_bound

        expected = context.test.options.get("bound")
        if expected is None:
            return
        node_id = context.test.node_id
        try:
            wanted = normalize_bound(expected, f"{node_id}: @pytest.mark.gpuperf(bound=...)")
        except ValueError as exc:
            record.mismatches.append(str(exc))
            return
        verdicts = [m for m in metrics if m.name.endswith((".bound", ".ncu_bound"))]
        if not verdicts:
            record.mismatches.append(
                f"{node_id}: @pytest.mark.gpuperf(bound={expected!r}) cannot be checked for step "
                f"{context.name!r}: no verdict ({'; '.join(record.notes) or 'nothing counted'})"
            )
        for metric in verdicts:
            if metric.value != wanted:
                why = metric.extra.get("explain") or _describe_ncu(metric)
                record.mismatches.append(
                    f"{node_id}: {metric.name} is {metric.value} but @pytest.mark.gpuperf(bound={expected!r}) "
                    f"expects {wanted}: {why}"
                )


NCU_MISSING = (
    "Nsight Compute capture was asked for (--gpuperf-ncu or @pytest.mark.gpuperf_ncu) but `ncu` is not on PATH "
    "(nor $GPUPERF_NCU); install Nsight Compute or drop the flag/marker"
)


def _describe_ncu(metric: Metric) -> str:
    extra = metric.extra
    return (
        f"SM {extra.get('sm_pct', 0):.0f}%, memory {extra.get('memory_pct', 0):.0f}%, "
        f"DRAM {extra.get('dram_pct', 0):.0f}% ({extra.get('rule', '')})"
    )


def _id_range(capture: object) -> str:
    """``12-40``: the ncu result IDs of a window's kernels (how the report's GUI lists them)."""
    ids = [k.id for k in capture.kernels]  # type: ignore[attr-defined]
    return f"{min(ids)}-{max(ids)}" if ids else "none"
