"""The judging service inside a rank: it plans against the entries the pytest process sent and collects metrics.

The world is judged once, in the pytest process (:mod:`pytest_gpuperf.distributed`): a rank gives no verdicts,
asks for no confirmation and writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_gpuperf.judging.service import Judging
from pytest_gpuperf.results import Metric, Verdict

if TYPE_CHECKING:
    from pytest_gpuperf.baselines.sources import BaselineSource
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.settings import Settings


class CollectingJudging(Judging):
    """The service inside a rank: plans against the sent entries, collects metrics; the world is judged once."""

    def __init__(self, settings: Settings, baselines: BaselineSource) -> None:
        super().__init__(settings, baselines)
        self.metrics: list[Metric] = []

    def judge(self, context: TestContext, metrics: list[Metric]) -> list[Verdict]:
        """No verdicts on a rank: every metric is handed back as information."""
        return [Verdict(metric, "info") for metric in metrics]

    def wants_confirmation(self, verdicts: list[Verdict]) -> bool:
        """Confirmation is the pytest process's decision."""
        return False

    def store(self, context: TestContext, verdicts: list[Verdict]) -> None:
        """Collect the metrics for the pytest process."""
        self.metrics.extend(v.metric for v in verdicts)
