"""One process's watch for a runner that moved: its timed tests' points, and the tests whose report waits.

A test's pass or fail is decided in its ``makereport``, but a common mode (:mod:`.common_mode`) is a fact about the
whole session, known only once its tests have run. So a test that the common mode could change (a timing
regression, or one only the machine rule made inconclusive) is **held**: its reports are kept, not logged, until
the common mode is decided, then judged against it and logged (:meth:`RunnerWatch.releasable`). It is decided when
no perf test of this process is left to run, or earlier when the tests left could no longer make a common mode
(:func:`.common_mode.possible`: most tests judged so far did not move), which is how a lone regression in a
session whose runner did not move is reported long before the end.

Where reports cannot wait (a pytest-xdist worker logs each report during its own test: one GPU per worker, so a
worker's tests are exactly one runner's), the watch judges **progressively**: a test is judged against the common
mode of the tests this process has already judged, itself included, and a test judged before a common mode exists
is judged as usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.judging.common_mode import CommonMode, Point, candidate, estimate, point, possible, rejudge

if TYPE_CHECKING:
    from pytest_gpuperf.results import Verdict


class RunnerWatch:
    """The timed tests of one process by group (backend), the held ones, and the common mode each was judged by.

    ``holds``: reports may wait for the common mode (False under xdist: progressive judging); ``enabled``: False
    where both sides of a comparison ran on one runner (A/B), so a common move is the code's.
    """

    def __init__(self, holds: bool, enabled: bool = True) -> None:
        self.holds = holds
        self.enabled = enabled
        self.points: dict[str, dict[str, Point]] = {}
        #: Held tests: node id -> (group, the verdicts they had when held).
        self.held: dict[str, tuple[str, list[Verdict]]] = {}
        #: The common mode a test was judged by (its JSON form), for its report.
        self.modes: dict[str, dict[str, Any]] = {}
        self._left: set[str] = set()

    def expect(self, node_ids: Iterable[str]) -> None:
        """The perf tests this process may still run (an upper bound: under xdist other workers run some)."""
        self._left = set(node_ids)

    def ran(self, node_id: str) -> None:
        """``node_id`` has run: one test fewer that could still move the common mode."""
        self._left.discard(node_id)

    def judge(self, node_id: str, group: str, verdicts: list[Verdict], hold: bool) -> tuple[list[Verdict], bool]:
        """Note the test's point; its verdicts now and whether its report waits (``hold``: it may wait here)."""
        found = point(node_id, group, verdicts) if self.enabled else None
        if found is None:
            return verdicts, False
        self.points.setdefault(group, {})[node_id] = found
        if not candidate(verdicts):
            return verdicts, False
        if hold and self.holds and possible(self._group(group), len(self._left - {node_id})):
            self.held[node_id] = (group, list(verdicts))
            return verdicts, True
        return self._judged(node_id, verdicts, estimate(self._group(group))), False

    def releasable(self) -> list[tuple[str, list[Verdict]]]:
        """The held tests whose group is decided now, judged against its common mode (each released once)."""
        left = len(self._left)
        decided = {group for group, _ in self.held.values() if not left or not possible(self._group(group), left)}
        out = []
        for node_id, (group, verdicts) in list(self.held.items()):
            if group in decided:
                del self.held[node_id]
                out.append((node_id, self._judged(node_id, verdicts, estimate(self._group(group)))))
        return out

    def release_all(self) -> list[tuple[str, list[Verdict]]]:
        """Every held test, judged against the common mode known now (the session ends early: ``-x``, Ctrl-C)."""
        self._left.clear()
        return self.releasable()

    def _group(self, group: str) -> list[Point]:
        return list(self.points.get(group, {}).values())

    def _judged(self, node_id: str, verdicts: list[Verdict], mode: CommonMode | None) -> list[Verdict]:
        if mode is None:
            return verdicts
        self.modes[node_id] = mode.to_dict()
        return rejudge(verdicts, mode)
