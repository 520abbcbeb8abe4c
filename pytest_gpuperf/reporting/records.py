"""What the reporting feature keeps of each perf test: its outcome, the ``report.gpuperf`` payload, its properties.

Filled from test reports (also those that xdist workers send back to the controller),
so the JSON, Markdown and plot writers see every worker's results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.results import worst_status


@dataclass
class TestRecord:
    """One perf test's call-phase outcome, the payload the session attached to its report, its user properties."""

    __test__ = False  # not a pytest test class

    nodeid: str
    outcome: str
    duration: float
    data: dict[str, Any] = field(default_factory=dict)
    properties: list[tuple[str, str]] = field(default_factory=list)
    #: A failed test's message, first line (what pytest's short summary shows); ``""`` when it passed.
    failure: str = ""

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        """The verdict dicts of this test (see ``results.verdict_to_dict``)."""
        return list(self.data.get("verdicts", []))

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The hardware fingerprint the test ran on."""
        return dict(self.data.get("fingerprint", {}))

    @property
    def status(self) -> str:
        """The test's overall status: its worst verdict (:func:`~pytest_gpuperf.results.worst_status`)."""
        return worst_status(v["status"] for v in self.verdicts)


def device_key(fingerprint: dict[str, Any]) -> str:
    """A file-name-safe key of a fingerprint's identity (the baseline file's stem)."""
    from pytest_gpuperf.backends.fingerprint import baseline_filename

    return baseline_filename(fingerprint).removesuffix(".yaml")


def split_metric(name: str) -> tuple[str, str]:
    """``prefill.time`` -> (``prefill``, ``time``); ``latency`` -> (``""``, ``latency``)."""
    step, _, metric = name.rpartition(".")
    return step, metric
