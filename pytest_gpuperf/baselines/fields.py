"""The fields of a baseline entry that a verdict reads: one declarative table.

Each row of :data:`ENTRY_FIELDS` says, for one field of a metric entry, what a valid
value is (type, finite, range; checked when a file is read and before one is written)
and when an edit of it loosens the gate (listed ``[LOOSENS THE GATE]`` by
``--gpuperf-baseline-ref``). A field that judging, the evidence rules, the stop rule or
the timing plan reads from an entry belongs here; adding one is adding a row (for
example a per-sample clock list: ``EntryField("sm_clock_samples", number_list(positive_number),
loosens=changed)``). The reader and the writer check every row (:func:`entry_problem`),
and :func:`loosened_fields` names the rows an edit loosens.

Checks raise ``ValueError`` (:class:`~pytest_gpuperf.validate.NumberError`) with a
message that starts with the field's name; ``loosens(before, after)`` gets the two
entries (a missing field reads as absent) and says whether the new one accepts worse
results or switches a check off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.baselines.samples_rule import samples_agree, samples_loosen, worse
from pytest_gpuperf.results import NUMBER_KINDS
from pytest_gpuperf.timing.kernel_signature import KIND_SIGNATURE, SIGNATURE_SOURCES, digest_problem, rows_problem
from pytest_gpuperf.validate import (
    MAX_CATEGORY,
    MAX_WORD,
    NumberError,
    finite_number,
    name_problem,
    non_negative_number,
    number_or_none,
    positive_int,
    positive_number,
)

#: Kinds whose value is checked as a positive / non-negative number (a custom metric may hold a word).
KINDS_POSITIVE = ("time", "throughput", "cycles")
#: Kinds whose value is checked as a number >= 0 (a peak memory, a host overhead).
KINDS_NON_NEGATIVE = ("memory", "host")
BETTER = ("lower", "higher", "equal")
#: Most samples read per metric: a baseline keeps about 30; more is a broken or hostile file.
MAX_SAMPLES = 1000
Check = Callable[[Any, dict[str, Any]], None]
Loosens = Callable[[dict[str, Any], dict[str, Any]], bool]


def _never(before: dict[str, Any], after: dict[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class EntryField:
    """One field of a metric entry: how it is checked and when an edit of it loosens the gate."""

    name: str
    check: Check
    loosens: Loosens = _never
    #: Who reads it, for the docs and error messages.
    read_by: str = ""
    required: bool = False
    #: What it means, in one line (``gpuperf show`` prints it).
    meaning: str = ""


# -- checks ----------------------------------------------------------------------------------------------------


def word(value: Any, entry: dict[str, Any], name: str = "") -> None:
    """A short printable string (unit, kind, method)."""
    if not isinstance(value, str):
        raise NumberError(f"{name} must be a string, got {value!r}")
    if len(value) > MAX_WORD or not value.isprintable():
        raise NumberError(f"{name} must be a short printable word, got {value[:MAX_WORD]!r}")


def _word(name: str) -> Check:
    return lambda value, entry: word(value, entry, name)


def _flag(name: str) -> Check:
    def run(value: Any, entry: dict[str, Any]) -> None:
        if not isinstance(value, bool):
            raise NumberError(f"{name} must be true or false, got {value!r}")

    return run


def _better(value: Any, entry: dict[str, Any]) -> None:
    if value not in BETTER:
        raise NumberError(f"better must be one of {', '.join(BETTER)}, got {value!r}")


def _value(value: Any, entry: dict[str, Any]) -> None:
    kind = entry.get("kind")
    if kind == KIND_SIGNATURE:
        _raise(digest_problem(value))
        return
    if kind == "category" or (kind not in NUMBER_KINDS and isinstance(value, str)):
        if not isinstance(value, str) or not value:
            raise NumberError(f"value of a category must be a non-empty word, got {value!r}")
        problem = name_problem(value, "value of a category", MAX_CATEGORY)
        if problem:
            raise NumberError(problem)
        return
    check = (
        positive_number
        if kind in KINDS_POSITIVE
        else (non_negative_number if kind in KINDS_NON_NEGATIVE else finite_number)
    )
    try:
        check(value, "value")
    except NumberError as exc:
        raise NumberError(f"{exc} (kind {kind})" if kind else str(exc)) from None


def _source(value: Any, entry: dict[str, Any]) -> None:
    if value not in SIGNATURE_SOURCES:
        raise NumberError(f"source must be one of {', '.join(SIGNATURE_SOURCES)}, got {value!r:.40}")


def _raise(problem: str | None) -> None:
    if problem:
        raise NumberError(problem)


def _samples(value: Any, entry: dict[str, Any]) -> None:
    if not isinstance(value, list):
        raise NumberError(f"samples must be a list of numbers, got {type(value).__name__}")
    if len(value) > MAX_SAMPLES:
        raise NumberError(
            f"holds {len(value)} samples, more than the {MAX_SAMPLES} read per metric (a baseline keeps ~30)"
        )
    check = positive_number if entry.get("kind") in KINDS_POSITIVE else finite_number
    for index, sample in enumerate(value):
        try:
            check(sample, f"samples[{index}]")
        except NumberError as exc:
            raise NumberError(f"samples must be a list of numbers: {exc}") from None
    samples_agree(value, entry)


#: Upper bound of a stored noise figure (a fraction): far above any real one, and above what a huge tolerance
#: gives (``min_detectable_change`` is at least the tolerance: ``gpuperf_cpu_time_tolerance = 100`` stores 100+).
NOISE_FIGURE_LIMIT = 1e6
#: Most a stored ``process_spread`` (``max / min - 1`` of one statistic over the recording's processes) may be: a
#: spread past the tolerance makes every verdict of the entry inconclusive, so a large one switches the gate off
#: (10 let a 9.7x slowdown pass as inconclusive). Recordings whose processes differ by more than 2x are refused.
PROCESS_SPREAD_LIMIT = 1.0


def bounded(check: Callable[[Any, str], int | float], name: str, high: float) -> Check:
    """``check`` (a :mod:`~pytest_gpuperf.validate` helper) plus an upper bound ``high``."""

    def run(value: Any, entry: dict[str, Any]) -> None:
        number = check(value, name)
        if number > high:
            raise NumberError(f"{name} must be <= {high:g}, got {number!r}")

    return run


def _process_spread(value: Any, entry: dict[str, Any]) -> None:
    spread = non_negative_number(value, "process_spread")
    if entry.get("kind") == "host" and spread <= NOISE_FIGURE_LIMIT:
        return  # a host overhead's spread only narrows its gains (judging.gains): it excuses no slowdown
    if spread > PROCESS_SPREAD_LIMIT:
        raise NumberError(
            f"process_spread must be <= {PROCESS_SPREAD_LIMIT:g}, got {spread!r}: the recording's processes differ "
            f"more than {1 + PROCESS_SPREAD_LIMIT:g}x, and a spread that wide would excuse any slowdown within it; "
            "record on a quieter machine, or mark the test informational"
        )


# -- when an edit loosens the gate -----------------------------------------------------------------------------


def changed(name: str) -> Loosens:
    """Any change of ``name`` (added, removed or another value) loosens the gate."""
    return lambda before, after: before.get(name) != after.get(name)


def larger(name: str, absent: float = 0.0) -> Loosens:
    """A larger ``name`` loosens the gate (a missing field reads as ``absent``)."""

    def run(before: dict[str, Any], after: dict[str, Any]) -> bool:
        old = number_or_none(before.get(name, absent))
        new = number_or_none(after.get(name, absent))
        return old is not None and new is not None and new > old

    return run


def clock_moved(name: str, threshold: str) -> Loosens:
    """A clock ``name`` added, or moved past the evidence rule's ``threshold`` (a constant of
    :mod:`~pytest_gpuperf.judging.evidence`): later runs read as "another machine state", inconclusive."""

    def run(before: dict[str, Any], after: dict[str, Any]) -> bool:
        from pytest_gpuperf.judging import evidence

        old, new = number_or_none(before.get(name)), number_or_none(after.get(name))
        if new is None:
            return False  # removed: the machine check no longer excuses anything
        return old is None or old <= 0 or abs(new / old - 1.0) > getattr(evidence, threshold)

    return run


def moved(name: str, relative: float) -> Loosens:
    """``name`` added, or moved by more than ``relative``: a later run reads as another machine (inconclusive)."""

    def run(before: dict[str, Any], after: dict[str, Any]) -> bool:
        old, new = number_or_none(before.get(name)), number_or_none(after.get(name))
        if new is None:
            return False
        return old is None or old <= 0 or abs(new / old - 1.0) > relative

    return run


def _value_loosens(before: dict[str, Any], after: dict[str, Any]) -> bool:
    better = str(after.get("better", "lower"))
    old, new = number_or_none(before.get("value")), number_or_none(after.get("value"))
    return old is not None and new is not None and better != "equal" and worse(old, new, better)


#: Every field of a metric entry that a verdict reads, in the order they are checked.
ENTRY_FIELDS: list[EntryField] = [
    EntryField(
        "kind",
        _word("kind"),
        changed("kind"),
        "judging (which comparison)",
        meaning="what is measured, which decides how it is judged (time, throughput, memory, work, custom ...)",
    ),
    EntryField(
        "unit",
        _word("unit"),
        read_by="reports",
        meaning="the unit of value and samples (s = seconds per step, B = bytes)",
    ),
    EntryField(
        "better",
        _better,
        changed("better"),
        "judging (direction)",
        meaning="the direction that is an improvement (equal: any change past the tolerance fails, e.g. counted work)",
    ),
    EntryField(
        "method",
        _word("method"),
        changed("method"),  # another clock: the stored calibration and samples were taken under the old one
        "the timing plan (how a run is timed), the machine rule (which clock's calibration)",
        meaning="how it was timed (thread_cpu, wall, cuda_graph, cupti, events ...)",
    ),
    EntryField(
        "value",
        _value,
        _value_loosens,
        "judging",
        required=True,
        meaning="the baseline: the judged quantile of the recorded samples, or the recorded number",
    ),
    EntryField(
        "samples",
        _samples,
        samples_loosen,
        "judging (bootstrap), the stop rule",
        meaning="the recording's per-step measurements; a run's are compared with them by a bootstrap",
    ),
    EntryField(
        "sm_clock_mhz",
        bounded(positive_number, "sm_clock_mhz", 100_000),
        clock_moved("sm_clock_mhz", "CLOCK_CHANGE"),
        "evidence (another SM clock makes a verdict inconclusive unless the cycles decide)",
        meaning="the GPU's SM clock while recording; at another clock the cycles decide, or it is inconclusive",
    ),
    EntryField(
        "mem_clock_mhz",
        bounded(positive_number, "mem_clock_mhz", 100_000),
        clock_moved("mem_clock_mhz", "MEM_CLOCK_CHANGE"),
        "evidence (another memory clock makes a memory-bound step's verdict inconclusive)",
        meaning="the GPU's memory clock while recording; another one makes a memory-bound verdict inconclusive",
    ),
    EntryField(
        "power_capped",
        _flag("power_capped"),
        changed("power_capped"),  # capped on both sides: time alone decides, not the clock band
        "the clock rule (at the power cap on both sides the time decides, not the SM clock)",
        meaning="the GPU ran the step at its power cap while recording (NVML's power-cap clock event)",
    ),
    EntryField(
        "clock_exponent",
        bounded(non_negative_number, "clock_exponent", 10.0),
        read_by="the clock rule (how far the step's time follows the SM clock)",
        meaning="how far the step's time follows the SM clock (time ~ clock^-exponent; 1: fully)",
    ),
    EntryField(
        "clock_exponent_se",
        bounded(non_negative_number, "clock_exponent_se", 10.0),
        larger("clock_exponent_se"),
        "the clock rule (a wider exponent band excuses more of a moved clock)",
        meaning="the standard error of clock_exponent",
    ),
    EntryField(
        "process_spread",
        _process_spread,
        larger("process_spread"),
        "evidence (a spread past the tolerance makes a verdict inconclusive)",
        meaning="max/min - 1 of the value over the recording's processes; past the tolerance: inconclusive",
    ),
    EntryField(
        "processes",
        bounded(positive_int, "processes", 10_000),
        read_by="reports",
        meaning="how many fresh processes the baseline was recorded from",
    ),
    EntryField(
        "min_detectable_change",
        bounded(non_negative_number, "min_detectable_change", NOISE_FIGURE_LIMIT),
        read_by="judging (the failure message)",
        meaning="the smallest slowdown the gate catches with 95% power at this tolerance and noise",
    ),
    EntryField(
        "noise_bound",
        bounded(non_negative_number, "noise_bound", NOISE_FIGURE_LIMIT),
        read_by="reports",
        meaning="the slowdown unchanged code reaches in 5% of runs: a tolerance below it fails by chance",
    ),
    EntryField(
        "eager_time",
        bounded(non_negative_number, "eager_time", 1e6),
        read_by="reports (host overhead)",
        meaning="a CUDA step's eager time per step; its host overhead is eager time minus device time",
    ),
    EntryField(
        "calibration",
        bounded(positive_number, "calibration", 10.0),
        moved("calibration", 0.01),
        "the machine rule (another host-CPU speed makes a verdict inconclusive)",
        meaning="seconds per call of a fixed CPU kernel in the recording process: the host CPU's speed",
    ),
    EntryField(
        "calibration_spread",
        bounded(non_negative_number, "calibration_spread", 10.0),
        larger("calibration_spread"),
        "the machine rule (a wider band excuses a slower machine)",
        meaning="how sure calibration is (a higher quantile over it, minus 1)",
    ),
    EntryField(
        "kernels",
        lambda value, entry: _raise(rows_problem(value)),
        read_by="the failure message (which kernels appeared, disappeared or moved)",
        meaning="a kernel signature's heaviest kernels: name, launches per step, share of the step, grid, block",
    ),
    EntryField(
        "launches",
        bounded(positive_int, "launches", 10_000_000),
        read_by="the failure message",
        meaning="a kernel signature's kernel launches (CPU: op calls) per step",
    ),
    EntryField(
        "distinct",
        bounded(positive_int, "distinct", 10_000_000),
        read_by="the failure message (whether the stored kernels are all of them)",
        meaning="how many different kernels (CPU: ops) the step launched; more than listed: only the heaviest kept",
    ),
    EntryField("source", _source, read_by="reports", meaning="what a kernel signature lists: cuda kernels, cpu ops"),
]


def entry_problem(entry: Any) -> str | None:
    """What is wrong with one metric entry (None when it is valid): every row of :data:`ENTRY_FIELDS`."""
    if not isinstance(entry, dict):
        return f"must be a mapping with a 'value', found {type(entry).__name__}"
    for row in ENTRY_FIELDS:
        if row.name not in entry:
            if row.required:
                return f"needs a '{row.name}'"
            continue
        try:
            row.check(entry[row.name], entry)
        except NumberError as exc:
            return str(exc)
    return None


def loosened_fields(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The fields whose edit from ``before`` to ``after`` loosens the gate (empty when none does)."""
    return [row.name for row in ENTRY_FIELDS if row.loosens(before, after)]
