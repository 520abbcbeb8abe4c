"""What travels between the pytest process and the ranks: a test to run, and each rank's result.

Plain dataclasses of picklable values; a test function travels by reference
(module name, file and qualified name) and is imported in the rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.results import Metric
    from pytest_gpuperf.settings import Settings

#: Fixtures the rank provides itself; any other argument is shipped from the pytest process.
RANK_FIXTURES = ("gpuperf", "gpuperf_rank", "gpuperf_backend", "gpuperf_device")


class ThisDevice:
    """Stands, in a task's arguments, for the test's device object (a fixture returning ``gpuperf.device``): the
    process that runs the body puts its own there (a Vulkan device does not pickle; a rank has its own GPU)."""

    def __repr__(self) -> str:
        return "<the running process's gpuperf.device>"


STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_OOM = "oom"
STATUS_SKIP = "skip"


@dataclass
class RankTask:
    """One test body to run on every rank."""

    node_id: str
    module_name: str
    module_file: str
    qualname: str
    backend: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    wants: tuple[str, ...] = ()
    gpuperf_options: dict[str, Any] = field(default_factory=dict)
    settings: Settings | None = None
    #: The test's baseline entries and fingerprint as the pytest process's judging service sees them
    #: (under ``--gpuperf-baseline-ref`` the ref's), so the ranks plan against what will judge them.
    baseline_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    baseline_fingerprint: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    sys_path: list[str] = field(default_factory=list)
    #: The ``gpuperf`` handle measures in lockstep across ranks (False: as in the pytest process).
    lockstep: bool = True
    #: The test is a method of a test class (``qualname`` is ``Class.method``): a fresh instance runs it.
    in_class: bool = False
    #: A feature's picklable stand-in for measuring a step on the ranks (``pytest_gpuperf_rank_measure_instead``:
    #: the ncu child's capture window); None: the ranks measure.
    measure_instead: Any = None


@dataclass(frozen=True)
class RankInfo:
    """Where a test body runs: the ``gpuperf_rank`` fixture inside a distributed test."""

    rank: int
    local_rank: int
    world_size: int
    backend: str
    dist_backend: str

    @property
    def device(self) -> Any:
        """This rank's torch device (``cuda:<local_rank>`` or ``cpu``)."""
        import torch

        return torch.device("cuda", self.local_rank) if self.backend == "cuda" else torch.device("cpu")


@dataclass(kw_only=True)
class BodyRun:
    """What running a test body in a worker process left: its metrics, its output and its wall seconds."""

    metrics: list[Metric] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


@dataclass
class RankResult(BodyRun):
    """What one rank sends back after a test body."""

    rank: int
    status: str
    traceback: str = ""
    memory: dict[str, float] = field(default_factory=dict)
    dirty: str = ""
