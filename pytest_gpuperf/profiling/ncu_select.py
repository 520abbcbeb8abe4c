"""Which of a step's operations the ncu child profiles: the longest by device time, up to a cap.

ncu replays every kernel of a capture window once per group of counters, saving and restoring the memory the kernel
writes before each replay; a training step of hundreds of kernels, with an optimizer that writes every parameter,
then takes minutes. So the ncu child ranks the step's operations first and profiles only the top ones:

* **ranking call** (:func:`rank_step`): one call of the step outside any capture window (ncu does not replay
  there) with a pair of clock marks (CUDA events) around each ATen operation, seen through a dispatch mode, and
  one pair around the whole call;
* **choice** (:func:`decide`): the longest operations, longest first, at most ``top_ops`` of them (ini key
  ``gpuperf_ncu_top_ops``) and no more than ``max_kernels`` kernels in all (ini key ``gpuperf_ncu_max_kernels``;
  each operation's kernels are counted in the ranking call, :mod:`.ncu_kernels`), stopping once they cover
  :data:`COVERAGE` of the operations' device time;
* **capture call** (:func:`windowed_call`): the profiler is started just before each chosen operation and stopped
  just after it, so ncu profiles only their kernels.

The whole step is captured instead (as a step of a few kernels always was) when its operations and their kernels are
within both caps, when ``top_ops`` is 0, when the ranking call fails, or when its operations' marks cover less than
:data:`SEEN_SHARE` of the call's own pair: then most kernels run outside ATen operations (a CUDA graph replay,
torch.compile's Triton kernels, an extension's own launches) and a choice among the operations would miss them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.profiling.ncu_kernels import kernels_of, pick_within_cap

#: Default of ``gpuperf_ncu_top_ops``: at most this many operations of a step are profiled. One operation can launch
#: dozens of kernels (an optimizer's foreach ops), and ncu replays each kernel for about half a second.
DEFAULT_TOP_OPS = 8
#: The chosen operations stop growing once they cover this share of the operations' device time.
COVERAGE = 0.9
#: Below this share of the step's own device time seen inside ATen operations, the whole step is captured.
SEEN_SHARE = 0.5

#: A clock of the ranking call: ``mark()`` returns an opaque mark, ``seconds(a, b)`` the device seconds between two.
Mark = Callable[[], Any]
Seconds = Callable[[Any, Any], float]


@dataclass(frozen=True)
class Selection:
    """The operations of one step whose kernels a capture window profiles (none chosen: the whole step)."""

    #: Indexes of the chosen operations in the step's call order; empty for the whole step.
    chosen: frozenset[int]
    #: Every operation's name in call order (the capture call is checked against it).
    names: tuple[str, ...] = ()
    #: The chosen operations' share of the operations' device time in the ranking call (1.0: the whole step).
    share: float = 1.0
    #: Why the whole step is captured, or why nothing is (:data:`NO_OPERATION`); "" when operations were chosen.
    reason: str = ""
    #: Collectives left out of the window (a step on several ranks, :func:`around`).
    left_out: int = 0
    #: The kernels the window replays, as counted in the ranking call (0: not counted).
    kernels: int = 0
    #: The cap on them (``gpuperf_ncu_max_kernels``; 0: none).
    max_kernels: int = 0

    @property
    def whole_step(self) -> bool:
        """True when the window holds every kernel of the step."""
        return not self.chosen

    def facts(self) -> dict[str, object]:
        """What the manifest keeps of the choice (the parent's report shows it)."""
        counted = {"expected_kernels": self.kernels, "max_kernels": self.max_kernels} if self.max_kernels else {}
        if self.whole_step:
            return {"ops": len(self.names), "whole_step": self.reason, **counted}
        facts: dict[str, object] = {"ops": len(self.names), "profiled_ops": len(self.chosen & _indexes(self.names))}
        facts["op_share"] = round(self.share, 4)
        facts.update(counted)
        if self.left_out:
            facts["collectives_left_out"] = self.left_out
        if self.reason:
            facts["nothing_profiled"] = self.reason
        return facts


#: Words in the name of an operation that is a collective (``c10d._allgather_base_``, ``_c10d_functional.*``).
COLLECTIVE_WORDS = ("c10d", "nccl")


#: A choice that profiles no operation (no call has index -1); an empty choice is the whole step.
NO_OPERATION = frozenset({-1})


def collectives(names: Sequence[str]) -> frozenset[int]:
    """The indexes of the operations that are collectives (by :data:`COLLECTIVE_WORDS` in their names)."""
    return frozenset(i for i, name in enumerate(names) if any(word in name for word in COLLECTIVE_WORDS))


def _indexes(names: Sequence[str]) -> frozenset[int]:
    return frozenset(range(len(names)))


def choose(durations: Sequence[float], top_ops: int, coverage: float = COVERAGE) -> tuple[list[int], float]:
    """The indexes (in call order) of the longest operations, at most ``top_ops``, stopping once they cover
    ``coverage`` of the total; and the share they cover (no kernel cap: :func:`.ncu_kernels.pick_within_cap`)."""
    chosen, share, _ = pick_within_cap(durations, [1] * len(durations), 0, max(top_ops, 0) or -1, coverage)
    return chosen, share


@dataclass(frozen=True)
class Caps:
    """The bounds of one window: operations (``gpuperf_ncu_top_ops``) and kernels (``gpuperf_ncu_max_kernels``;
    0: none), with each operation's kernels as the ranking call counted them (empty: one each)."""

    top_ops: int
    max_kernels: int = 0
    kernels: tuple[int, ...] = ()

    def of(self, count: int) -> list[int]:
        """Kernels per operation for ``count`` operations."""
        return list(self.kernels) if len(self.kernels) == count else [1] * count


def decide(
    names: Sequence[str],
    durations: Sequence[float],
    whole: float,
    top_ops: int | Caps,
    skip: frozenset[int] = frozenset(),
) -> Selection:
    """The :class:`Selection` of a ranked call: ``durations`` per operation, ``whole`` the call's own seconds;
    ``top_ops``: the caps (an int: operations only); ``skip``: operations never profiled (:func:`around`)."""
    caps = top_ops if isinstance(top_ops, Caps) else Caps(top_ops)
    if skip:
        return around(durations, names, caps, skip)
    seen = sum(max(d, 0.0) for d in durations)
    kernels = caps.of(len(names))
    if caps.top_ops <= 0:
        return Selection(frozenset(), tuple(names), reason="gpuperf_ncu_top_ops = 0: every kernel")
    if len(names) <= caps.top_ops and (not caps.max_kernels or sum(kernels) <= caps.max_kernels):
        reason = f"{len(names)} operation(s), within the cap of {caps.top_ops}"
        return Selection(frozenset(), tuple(names), reason=reason, kernels=sum(kernels), max_kernels=caps.max_kernels)
    if whole > 0 and seen < SEEN_SHARE * whole:
        return Selection(
            frozenset(),
            tuple(names),
            reason=f"its ATen operations ran {seen / whole:.0%} of its device time (graph replays or kernels "
            "launched outside ATen); every kernel is profiled",
        )
    chosen, share, count = pick_within_cap(durations, kernels, caps.max_kernels, caps.top_ops, COVERAGE)
    none_fit = "" if chosen else f"no operation's kernels fit the cap of {caps.max_kernels} kernels"
    return Selection(
        frozenset(chosen) or NO_OPERATION, tuple(names), share, none_fit, kernels=count, max_kernels=caps.max_kernels
    )


def around(durations: Sequence[float], names: Sequence[str], caps: Caps, skip: frozenset[int]) -> Selection:
    """The longest operations but those in ``skip`` (a step on several ranks skips its collectives: ncu replays a
    profiled kernel alone, and a collective's kernel would wait for peers that do not join its replays).

    Every other operation when they are within the cap (or it is 0); none left: the window profiles nothing
    (:data:`NO_OPERATION`). ``share`` is over all operations' time, the skipped too."""
    keep = [i for i in range(len(names)) if i not in skip]
    kernels = caps.of(len(names))
    fits = not caps.max_kernels or sum(kernels[i] for i in keep) <= caps.max_kernels
    if caps.top_ops <= 0 or (len(keep) <= caps.top_ops and fits):
        picked = list(range(len(keep)))
    else:
        kept = [kernels[i] for i in keep]
        picked, _, _ = pick_within_cap([durations[i] for i in keep], kept, caps.max_kernels, caps.top_ops, COVERAGE)
    chosen = [keep[j] for j in picked]
    total = sum(max(d, 0.0) for d in durations)
    share = sum(max(durations[i], 0.0) for i in chosen) / total if total > 0 else 1.0
    count = sum(kernels[i] for i in chosen)
    return Selection(
        frozenset(chosen) or NO_OPERATION,
        tuple(names),
        share,
        left_out=len(skip),
        kernels=count,
        max_kernels=caps.max_kernels,
    )


def rank_step(
    step: Callable[[], object],
    top_ops: int | Caps,
    mark: Mark,
    seconds: Seconds,
    sync: Callable[[], None],
    peers: bool = False,
) -> Selection:
    """Call ``step`` once with a clock pair around each ATen operation and decide what the window profiles;
    ``peers``: the step runs on several ranks, its collectives are never profiled (:func:`around`).

    A failing ranking call (an operation the dispatch mode cannot pass through) captures the whole step.
    """
    mode = _timed_mode(mark)
    try:
        before = mark()
        with mode:
            step()
        after = mark()
        sync()
        durations = [seconds(a, b) for a, b in mode.pairs]
        whole = seconds(before, after)
    except Exception as exc:  # noqa: BLE001 - any failure: fall back to the whole step, saying why
        failed = f"ranking its operations failed ({type(exc).__name__}: {exc})"
        if peers:  # the whole step holds its collectives: profile nothing rather than hang in their replays
            return Selection(NO_OPERATION, share=0.0, reason=failed)
        return Selection(frozenset(), reason=failed)
    caps = top_ops if isinstance(top_ops, Caps) else Caps(top_ops)
    caps = Caps(caps.top_ops, caps.max_kernels, tuple(mode.kernels))
    return decide(mode.names, durations, whole, caps, collectives(mode.names) if peers else frozenset())


def windowed_call(
    step: Callable[[], object], selection: Selection, start: Callable[[], None], stop: Callable[[], None]
) -> int:
    """Call ``step`` with ``start()`` / ``stop()`` around each chosen operation; the number of operations whose
    name differs from the ranking call's at the same place (0: the same calls in the same order)."""
    mode = _windowed_mode(selection, start, stop)
    with mode:
        step()
    return mode.differing


def _timed_mode(mark: Mark) -> Any:
    """A dispatch mode that keeps a clock pair around every ATen operation it sees, and the operation's name."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Timed(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.pairs: list[tuple[Any, Any]] = []
            self.names: list[str] = []
            self.kernels: list[int] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            begin = mark()
            out = func(*args, **(kwargs or {}))
            self.pairs.append((begin, mark()))
            self.names.append(str(func))
            self.kernels.append(kernels_of(str(func), args))
            return out

    return Timed()


def _windowed_mode(selection: Selection, start: Callable[[], None], stop: Callable[[], None]) -> Any:
    """A dispatch mode that starts the profiler before each chosen operation and stops it after."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Windowed(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.index = 0
            self.differing = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            index, self.index = self.index, self.index + 1
            if index < len(selection.names) and selection.names[index] != str(func):
                self.differing += 1
            if index not in selection.chosen:
                return func(*args, **(kwargs or {}))
            start()
            try:
                return func(*args, **(kwargs or {}))
            finally:
                stop()

    return Windowed()
