"""Whether this run's host CPU is the one that recorded a baseline: its calibration against the stored one.

A recorded timing entry stores its process's calibration (:mod:`pytest_gpuperf.timing.calibration`:
``calibration``, ``calibration_spread``). A run whose calibration differs from the entry's by more than both
spreads plus :data:`MACHINE_FLOOR` is on another machine (or the same one in another speed state): its time
and throughput verdicts are inconclusive (:func:`machine_change`, read by :mod:`.evidence`), never failed and
never rescaled. Memory, class and counted-work verdicts still judge. An entry without a calibration (an older
file) is judged as before, and a failure says to re-record (:func:`missing_note`).
"""

from __future__ import annotations

from typing import Any

from pytest_gpuperf.timing.calibration import KERNEL, PIN_ENV, THREAD_METHODS
from pytest_gpuperf.validate import number_or_none

#: Least relative difference that means another machine, on top of the recorded and measured spreads.
MACHINE_FLOOR = 0.10
#: Most a spread may widen the band (a calibration that moved more than this is no better than this).
SPREAD_CAP = 0.15
#: How far one host's calibration may move between its own fresh processes (a virtual machine's speed states; the
#: figures are in docs/PERFORMANCE.md). A run off by less than this may be the recording machine in another speed
#: state, which a fresh process can clear (:func:`speed_state`); two machines of one kind can differ far more.
HOST_STATES = 0.35


def band(base_spread: float, run_spread: float, tolerance: float | None = None) -> float:
    """The relative difference two calibrations may show on the same machine.

    :data:`MACHINE_FLOOR` plus both spreads (each capped at :data:`SPREAD_CAP`), and never more than the metric's
    ``tolerance``: a machine slower by less than the band is judged, and a time that followed it stays within
    the tolerance, so no machine is failed for its own speed.
    """
    allowed = MACHINE_FLOOR + min(SPREAD_CAP, max(0.0, base_spread)) + min(SPREAD_CAP, max(0.0, run_spread))
    return min(allowed, tolerance) if tolerance is not None and tolerance > 0 else allowed


def machine_change(extra: dict[str, Any], entry: dict[str, Any] | None, tolerance: float | None = None) -> str | None:
    """Why this run's machine is not the one that recorded ``entry`` (their calibrations differ), or None.

    None also when either side carries no calibration (a GPU timing, a baseline recorded before
    calibrations were stored: see :func:`missing_note`). ``tolerance`` (the metric's) caps the band (:func:`band`).
    A wall-clock calibration that is off while the thread clock's (``calibration_other``) matches the entry is a
    busy machine or an entry whose ``method`` names another clock than its calibration was taken with (an edit):
    never "another machine", and still not judged. A pinned calibration (``calibration_pinned``) is named.
    """
    ratio = calibration_ratio(extra, entry)
    if ratio is None:
        return None
    base = float((entry or {})["calibration"])
    run = ratio * base
    allowed = band(
        number_or_none((entry or {}).get("calibration_spread")) or 0.0,
        number_or_none(extra.get("calibration_spread")) or 0.0,
        tolerance,
    )
    if 1.0 / (1.0 + allowed) <= ratio <= 1.0 + allowed:
        return None
    speed = f"{ratio:.2f}x slower" if ratio > 1 else f"{1 / ratio:.2f}x faster"
    numbers = f"{run * 1e6:.3g} vs {base * 1e6:.3g} us per call; the same machine stays within {allowed:.0%}"
    pinned = extra.get("calibration_pinned")
    if pinned:
        return (
            f"this run's calibration is pinned by {pinned}, {speed} than the one stored with the baseline "
            f"({numbers}), so its times are not judged: unset {PIN_ENV} to judge host-CPU times"
        )
    other = number_or_none(extra.get("calibration_other"))
    if (
        str(extra.get("method", "")) not in THREAD_METHODS
        and other
        and 1.0 / (1.0 + allowed) <= other / base <= 1.0 + allowed
    ):
        method = (entry or {}).get("method", "?")
        return (
            f"this run's wall-clock calibration ({KERNEL}) ran {speed} than the baseline's ({numbers}) while its "
            f"thread-CPU calibration matches it: the same machine, but the entry (method {method!r}) is timed by "
            "the wall clock, which counts other jobs' time on a busy machine, or its method was edited after it "
            "was recorded (--gpuperf-baseline-ref lists that); its times are not judged: run it on a quiet "
            "machine, or re-record with --gpuperf-update"
        )
    return (
        f"this machine's calibration ({KERNEL}) ran {speed} than on the machine that recorded the baseline "
        f"({numbers}): another "
        "machine, or this one in another speed state, so its times are not judged against this baseline (never "
        "rescaled); compare on this runner with --gpuperf-ab REF, or re-record here with --gpuperf-update"
    )


def missing_note(extra: dict[str, Any], entry: dict[str, Any] | None) -> str | None:
    """A note for a host-CPU timing judged against an entry that stores no calibration, else None."""
    if (
        number_or_none(extra.get("calibration")) is None
        or entry is None
        or number_or_none(entry.get("calibration")) is not None
    ):
        return None
    return (
        "its baseline stores no machine calibration (recorded by an older pytest-gpuperf), so a run on another "
        "machine of the same model cannot be told apart: re-record with --gpuperf-update"
    )


def _run_calibration(extra: dict[str, Any], entry: dict[str, Any] | None) -> float | None:
    """This run's calibration under the clock the entry's ``method`` names: a run timed by another clock than the
    entry (a step that blocks now) compares its other clock's calibration, never a wall one with a thread one."""
    own, other = number_or_none(extra.get("calibration")), number_or_none(extra.get("calibration_other"))
    stored = (entry or {}).get("method")
    if other and isinstance(stored, str) and "method" in extra:
        if (stored in THREAD_METHODS) != (str(extra["method"]) in THREAD_METHODS):
            return other
    return own


def calibration_ratio(extra: dict[str, Any], entry: dict[str, Any] | None) -> float | None:
    """This run's calibration over the entry's, or None when either side carries none (a GPU timing, an old file)."""
    run, base = _run_calibration(extra, entry), number_or_none((entry or {}).get("calibration"))
    if not run or not base or run <= 0 or base <= 0:
        return None
    return run / base


def speed_state(extra: dict[str, Any], entry: dict[str, Any] | None) -> bool:
    """True when this run's calibration is off the entry's by less than one host's speed states span
    (:data:`HOST_STATES`): a fresh process of the same machine may read it within the band and judge."""
    ratio = calibration_ratio(extra, entry)
    return ratio is not None and 1.0 / (1.0 + HOST_STATES) <= ratio <= 1.0 + HOST_STATES
