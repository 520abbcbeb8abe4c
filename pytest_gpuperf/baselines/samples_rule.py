"""A time or throughput entry's samples against its value: the rule the reader, the writer and
``--gpuperf-baseline-ref`` apply (rows of :data:`~pytest_gpuperf.baselines.fields.ENTRY_FIELDS`).

The judge compares a run with the samples by a bootstrap interval around their judged quantile, so the samples
must agree with the value and must not be so spread that the interval includes any slowdown; and an edit of them
loosens the gate when their judged quantile gets worse or the interval wider.
"""

from __future__ import annotations

from typing import Any

from pytest_gpuperf.validate import NumberError, number_or_none

#: A time or throughput entry's samples must agree with its value: their judged quantile within this fraction of
#: it (the writer stores order statistics of the samples the value was taken from, so they agree within rounding).
SAMPLES_VALUE_LIMIT = 0.25
#: Most the order statistics that bound the judged quantile at 95% (the ranks the bootstrap interval reaches, see
#: :func:`samples_width`) may differ, as a ratio. A wider list makes the judge's interval so wide that a 20x
#: slowdown reads "includes no change"; a recording that noisy is no baseline.
SAMPLES_WIDTH_LIMIT = 3.0


def samples_width(samples: list[float], better: str) -> float | None:
    """Ratio of the order statistics that bound the judged quantile at 95% (ranks ``n q -+ 1.96 sqrt(n q (1-q))``,
    as :func:`~pytest_gpuperf.stats.quantile_precision`): how far the judge's bootstrap interval reaches, >= 1.
    None for fewer than 3 samples (the judge then compares the value alone) or a non-positive sample."""
    import math

    from pytest_gpuperf.stats import judged_quantile

    n, q = len(samples), judged_quantile(better)
    if n < 3 or min(samples) <= 0:
        return None
    ordered = sorted(samples)
    half = 1.96 * math.sqrt(n * q * (1.0 - q))
    low, high = ordered[max(0, math.floor(n * q - half))], ordered[min(n - 1, math.ceil(n * q + half))]
    return high / low


def samples_agree(value: list[Any], entry: dict[str, Any]) -> None:
    """A time or throughput entry's samples against its value: the judged quantile near it, a bounded width."""
    from pytest_gpuperf.stats import judged_quantile, quantile

    stored = number_or_none(entry.get("value"))
    if entry.get("kind") not in ("time", "throughput") or len(value) < 3 or not stored or stored <= 0:
        return
    better = str(entry.get("better", "lower"))
    center = quantile([float(v) for v in value], judged_quantile(better))
    if abs(center / stored - 1.0) > SAMPLES_VALUE_LIMIT:
        raise NumberError(
            f"samples disagree with the value: their judged quantile {center:.6g} is more than "
            f"{SAMPLES_VALUE_LIMIT:.0%} off the value {stored:.6g} (edited by hand? re-record with --gpuperf-update)"
        )
    width = samples_width([float(v) for v in value], better)
    if width is not None and width > SAMPLES_WIDTH_LIMIT:
        raise NumberError(
            f"samples are too spread to judge against: the order statistics around the judged quantile differ "
            f"{width:.3g}x (at most {SAMPLES_WIDTH_LIMIT:g}x), which would let the confidence interval include "
            "any slowdown; re-record on a quieter machine with --gpuperf-update"
        )



def worse(before: float, after: float, better: str) -> bool:
    """True when ``after`` is worse than ``before`` in the direction ``better`` (any change for ``equal``)."""
    return after > before if better == "lower" else (after < before if better == "higher" else after != before)


def _judged_quantile(samples: Any, better: str) -> float | None:
    from pytest_gpuperf.stats import judged_quantile, quantile

    numbers = [number_or_none(s) for s in samples] if isinstance(samples, list) else []
    if not numbers or any(n is None or n != n or n in (float("inf"), float("-inf")) for n in numbers):
        return None
    return quantile([n for n in numbers if n is not None], judged_quantile(better))


def _width(samples: Any, better: str) -> float | None:
    numbers = [number_or_none(s) for s in samples] if isinstance(samples, list) else []
    if any(n is None for n in numbers):
        return None
    return samples_width([float(n) for n in numbers if n is not None], better)


def samples_loosen(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Samples loosen the gate when their judged quantile is worse, or when they widen the judge's interval: added
    where the entry had none of its own (the judge compared the value alone, or a throughput its time sibling's
    samples), or a list whose bounding order statistics (:func:`samples_width`) lie further apart (fewer samples
    or a wider spread)."""
    better = str(after.get("better", "lower"))
    old_list, new_list = before.get("samples") or [], after.get("samples") or []
    if old_list == new_list or better == "equal":
        return False
    old = _judged_quantile(old_list, better)
    new = _judged_quantile(new_list, better)
    if old is not None and new is not None and worse(old, new, better):
        return True
    new_width = _width(new_list, better)
    if new_width is None:
        return False  # removed or under 3 samples: the judge compares the value alone, the strictest rule
    old_width = _width(old_list, better)
    return old_width is None or new_width > old_width * (1.0 + 1e-9)
