"""pytest hooks of the baseline store; imported at start-up, so nothing heavy at module level.

* ``gpuperf_update_all`` (``-o gpuperf_update_all=true``): like ``--gpuperf-update``, but every entry of the
  tests that ran is rewritten (by default an entry within its tolerance is kept byte for byte);
* ``--gpuperf-baseline-ref REF``: every baseline file is read from a git ref (through
  ``pytest_gpuperf_baseline_loader``), and :func:`.diff.ref_changes` lists the entries the working tree
  changes against it for the reports;
* a ``gpuperf_baselines`` path that is a file is one usage error, not a failure per test;
* under ``--gpuperf-update`` the session's sink is the :class:`~pytest_gpuperf.baselines.recording.Recorder`:
  its :class:`~pytest_gpuperf.baselines.update.BaselineUpdater` holds each test's entries and writes those of
  passed tests at the end;
* the terminal summary says what was written and kept (merged from pytest-xdist workers),
  what was not recorded and why, and warns loudly when tests found no entry in a file that
  holds entries for this hardware (with the rootdir and the closest keys), listing stale entries.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.keys import SESSION_KEY
from pytest_gpuperf.settings import add_options, get_option

if TYPE_CHECKING:
    from pytest_gpuperf.baselines.update import BaselineUpdater

BASELINE_OPTIONS: list[tuple[Any, ...]] = [
    (
        "gpuperf_update_all",
        "bool",
        False,
        "implies --gpuperf-update, and rewrites every entry of the tests that ran "
        "(by default an entry within its tolerance is kept unchanged, so the diff shows only what moved)",
        {"section": "baselines"},
    ),
    (
        "--gpuperf-baseline-ref",
        "str",
        "",
        "read baselines from this git ref (e.g. origin/main) instead of the "
        "working tree, and report the baseline entries the working tree changes against it",
        {"metavar": "REF"},
    ),
    (
        "--gpuperf-accept-slower",
        "bool",
        False,
        "like --gpuperf-update, and also write time/throughput entries that measured slower than their baseline past "
        "the tolerance (an intended slowdown); without it such an entry keeps its stored value and is listed, so a "
        "re-record never loosens the gate silently",
    ),
]
TRACKER_NAME = "gpuperf-baseline-tracker"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the baseline flags (``--gpuperf-baseline-ref``, ``-accept-slower``) and ``gpuperf_update_all``."""
    add_options(parser, BASELINE_OPTIONS, "baselines")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``gpuperf_update_all`` and ``--gpuperf-accept-slower`` imply ``--gpuperf-update`` (set before the core
    reads its options)."""
    if get_option(config, "gpuperf_update_all") or get_option(config, "--gpuperf-accept-slower"):
        config.option.gpuperf_update = True


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under ``--gpuperf``: check the baselines path, resolve the git ref, start the key tracker.

    The recorder of ``--gpuperf-update`` was chosen with the session (:func:`.recording.choose_sink`)."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    directory = session.settings.baselines_dir
    if directory.exists() and not directory.is_dir():
        raise pytest.UsageError(
            f"pytest-gpuperf: the baselines path {directory} is a file, not a directory; "
            "move it away or set the ini key gpuperf_baselines (-o gpuperf_baselines=DIR)"
        )
    ref_name = get_option(config, "--gpuperf-baseline-ref")
    if ref_name:
        from pytest_gpuperf.baselines.ref import REF_KEY, GitRef, GitRefError

        try:
            config.stash[REF_KEY] = GitRef.resolve(ref_name, directory)
        except GitRefError as exc:
            raise pytest.UsageError(str(exc)) from None
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(BaselineTracker(config), TRACKER_NAME)


def pytest_gpuperf_baseline_loader(config: pytest.Config) -> Any:
    """Under ``--gpuperf-baseline-ref``: read every baseline file from the git ref (the ranks get its entries)."""
    from pytest_gpuperf.baselines.ref import REF_KEY

    ref = config.stash.get(REF_KEY, None)
    return ref.loader() if ref is not None else None


class BaselineTracker:
    """On the controller: which tests ran against which file, which ids were collected; the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.collected: set[str] = set()
        self.ran: dict[str, set[str]] = {}
        self.missing: dict[str, set[str]] = {}
        self.workers: list[dict[str, Any]] = []

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        """Every collected test id (deselected ones too: their entries are not stale)."""
        self.collected.add(item.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Under pytest-xdist the controller collects nothing itself: the workers send their ids."""
        self.collected.update(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Keep what an xdist worker wrote, kept and refused."""
        summary = getattr(node, "workeroutput", {}).get("gpuperf_baselines")
        if summary:
            self.workers.append(summary)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Note the baseline file each perf test used and whether it held an entry for the test."""
        from pytest_gpuperf.results import REPORT_ATTR

        data = getattr(report, REPORT_ATTR, None)
        if report.when != "call" or not data or not data.get("baseline_file"):
            return
        file = str(data["baseline_file"])
        self.ran.setdefault(file, set()).add(report.nodeid)
        if not any(v.get("baseline") is not None for v in data.get("verdicts", [])):
            self.missing.setdefault(file, set()).add(report.nodeid)

    def _summaries(self) -> list[dict[str, Any]]:
        from pytest_gpuperf.baselines.recording import UPDATER_NAME

        updater: BaselineUpdater | None = self.config.pluginmanager.get_plugin(UPDATER_NAME)
        return ([updater.summary()] if updater is not None else []) + self.workers

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """What was written and kept, what was refused, and keys that did not match."""
        tr = terminalreporter
        summaries = self._summaries()
        for summary in summaries:
            for error in summary["errors"]:
                tr.write_line(f"pytest-gpuperf: {error}", red=True, bold=True)
            for line in summary.get("repaired", []):
                tr.write_line(f"pytest-gpuperf: {line}", yellow=True)
        _write_updates(tr, summaries)
        self._write_matching(tr)

    def _write_matching(self, tr: Any) -> None:
        from pytest_gpuperf.baselines.matching import (
            match_file,
            mismatch_lines,
            partial_modules,
            rootdir_hint,
            stale_lines,
        )
        from pytest_gpuperf.baselines.schema import BaselineError, load_baseline_file

        session = self.config.stash.get(SESSION_KEY, None)
        baselines = getattr(getattr(session, "judging", None), "baselines", None)
        loader = baselines.loader() if hasattr(baselines, "loader") else load_baseline_file
        rootdir = self.config.rootpath
        hint = rootdir_hint(self.config.invocation_params.args, self.config.inipath is not None, rootdir)
        stale = []
        partial = partial_modules(self.config.args, self.config.invocation_params.dir, rootdir)
        for file, ran in sorted(self.ran.items()):
            try:
                loaded = loader(Path(file))
            except BaselineError:
                continue  # already reported by the tests that read it
            if loaded is None or not loaded.tests:
                continue
            match = match_file(file, loaded.tests, ran, self.missing.get(file, ()), self.collected, rootdir, partial)
            if match.mismatch:
                tr.write_sep("!", "gpuperf: tests found no entry in the baseline file of this hardware", red=True)
                for line in mismatch_lines(match, rootdir, hint):
                    tr.write_line(line, red=True, bold=True)
            if match.stale:
                stale.append(match)
        if stale:
            tr.write_sep("-", "gpuperf stale baseline entries")
            for match in stale:
                for line in stale_lines(match):
                    tr.write_line(line, yellow=True)
            tr.write_line("delete them from the file, or re-record after renaming the tests back")


def _write_updates(tr: Any, summaries: list[dict[str, Any]]) -> None:
    from pytest_gpuperf.commands import ACCEPT_SLOWER

    written: dict[str, dict[str, int]] = {}
    moved: dict[str, list[str]] = {}
    looser: dict[str, list[str]] = {}
    unchanged: set[str] = set()
    not_recorded: list[str] = []
    for summary in summaries:
        for file, counts in summary["written"].items():
            total = written.setdefault(file, {"kept": 0, "rewritten": 0, "tests": 0})
            for key in total:
                total[key] += counts.get(key, 0)
        for source, target in ((summary.get("moved") or {}, moved), (summary.get("looser") or {}, looser)):
            for file, lines in source.items():
                target.setdefault(file, []).extend(lines)
        unchanged.update(summary["unchanged_files"])
        not_recorded += summary["not_recorded"]
    for file, counts in sorted(written.items()):
        if file in unchanged and counts["rewritten"] == 0:
            state = "unchanged (every entry within its tolerance was kept)"
        else:
            state = "review the diff and commit it"
        tr.write_line(
            f"baselines recorded in: {file}: {counts['tests']} test(s), {counts['rewritten']} entr(ies) written, "
            f"{counts['kept']} kept within tolerance -- {state}"
        )
        lines = sorted(moved.get(file, []))
        if lines:
            tr.write_line(f"  {len(lines)} judged entr(ies) moved (old -> new):")
            for line in lines:
                tr.write_line(f"    {line}")
    refused = sorted(line for lines in looser.values() for line in lines)
    if refused:
        tr.write_line(
            f"{len(refused)} time/throughput entr(ies) measured slower past their tolerance and were NOT written "
            f"(a slower baseline loosens the gate); pass {ACCEPT_SLOWER} if the slowdown is intended:",
            yellow=True,
        )
        for line in refused:
            tr.write_line(f"    {line}", yellow=True)
    if not_recorded:
        tr.write_line(
            f"baselines not recorded for {len(not_recorded)} test(s) that did not pass: {', '.join(not_recorded)}",
            yellow=True,
        )
