"""The sink inside a rank: it plans against the entries the pytest process sent and collects the metrics.

The world is judged once, in the pytest process (:mod:`pytest_gpuperf.distributed`): a rank gives no verdicts,
asks for no confirmation and writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_gpuperf.judging.service import Judging
from pytest_gpuperf.judging.sink import Lookup, Sink
from pytest_gpuperf.results import Metric, Verdict

if TYPE_CHECKING:
    from pytest_gpuperf.judging.sources import BaselineSource
    from pytest_gpuperf.settings import Settings


class Collector(Sink):
    """Collects a rank's metrics for the pytest process; ``plans`` False while the pytest process records."""

    def __init__(self, plans: bool = True) -> None:
        self.plans = plans
        self.metrics: list[Metric] = []

    def verdicts(self, lookup: Lookup, metrics: list[Metric]) -> list[Verdict]:
        """No verdicts on a rank: every metric is handed back as information."""
        return [Verdict(metric, "info") for metric in metrics]

    def store(self, lookup: Lookup, verdicts: list[Verdict]) -> None:
        """Collect the metrics for the pytest process; the service keeps no verdicts."""
        self.metrics.extend(v.metric for v in verdicts)


class CollectingJudging(Judging):
    """The service inside a rank: the sent entries, a :class:`Collector` as its sink (the rank's one choice)."""

    def __init__(self, settings: Settings, baselines: BaselineSource) -> None:
        self.collector = Collector(plans=not settings.update)  # plan as the pytest process's sink does
        super().__init__(settings, baselines, self.collector)

    @property
    def metrics(self) -> list[Metric]:
        """The metrics the rank measured, for the pytest process."""
        return self.collector.metrics
