"""Human-readable formatting of bytes, seconds and rates (no heavy imports)."""

from __future__ import annotations

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def format_bytes(value: float) -> str:
    """Format a byte count with binary prefixes: ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    size = float(value)
    for unit in _BYTE_UNITS:
        if abs(size) < 1024.0 or unit == _BYTE_UNITS[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024.0
    raise AssertionError("unreachable")


def three_digits(value: float) -> str:
    """Three significant digits, trailing zeros kept: ``2.0 -> '2.00'``, ``665.4 -> '665'`` (a reader sees the
    precision: ``665 us -> 2 ms`` read as a change of unknown size)."""
    text = f"{value:#.3g}"
    return text[:-1] if text.endswith(".") else text


def format_seconds(value: float) -> str:
    """Format a duration in s, ms, us or ns with three significant digits."""
    magnitude = abs(value)
    if magnitude >= 1.0:
        return f"{three_digits(value)} s"
    if magnitude >= 1e-3:
        return f"{three_digits(value * 1e3)} ms"
    if magnitude >= 1e-6:
        return f"{three_digits(value * 1e6)} us"
    return f"{three_digits(value * 1e9)} ns"


def format_rate(value: float, unit: str) -> str:
    """Format a rate such as ``tokens/s`` or ``FLOP/s`` with SI prefixes and three significant digits."""
    for scale, prefix in _SI_PREFIXES:
        if abs(value) >= scale:
            return f"{three_digits(value / scale)} {prefix}{unit}"
    return f"{three_digits(value)} {unit}"


def format_value(value: float | str, unit: str) -> str:
    """Format a metric value according to its unit (``B``, ``s``, ``*/s`` or anything else)."""
    if isinstance(value, str):
        return value
    if unit == "B":
        return format_bytes(value)
    if unit == "s":
        return format_seconds(value)
    if unit == "FLOP":
        return "0 FLOP" if value == 0 else format_rate(value, unit)
    if unit.endswith("/s"):
        return format_rate(value, unit)
    if unit == "ratio":
        return f"{value:.4g}x"
    if float(value).is_integer() and abs(value) < 1e15:  # a count: every digit (262912 -> 262913 must show)
        return f"{int(value)} {unit}".rstrip()
    return f"{value:.4g} {unit}".rstrip()


def format_change(ratio: float) -> str:
    """Format a measured/baseline ratio as a signed percentage: ``1.228 -> '+22.8%'``."""
    return f"{(ratio - 1.0) * 100.0:+.1f}%"
