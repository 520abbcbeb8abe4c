"""``gpuperf_plot = DIR``: one roofline PNG per run and device (matplotlib, the optional extra ``plot``).

Each timed step with known FLOPs and bytes is a point at (arithmetic intensity,
achieved FLOP/s), drawn under the device's *measured* roofs. Where the numbers come from,
first found wins:

* intensity: the step's ``<step>.arithmetic_intensity`` metric (profiling feature), else
  ``arithmetic_intensity`` in its metrics' extras, else ``flop_rate / bandwidth`` (the
  core's info metrics from ``measure(flops=, bytes_moved=)``);
* achieved FLOP/s: ``<step>.flop_rate``, else ``flops / seconds`` from the extras, else
  intensity x ``<step>.bandwidth``;
* roofs: ``peak_flops``, ``dram_bandwidth`` (else ``peak_bandwidth``) and the cache's
  ``cache_bandwidth`` in the extras (the roofline verdict carries them), else the roofs in
  pytest's cache (``.pytest_cache/v/gpuperf/roofs/``); without either the points are drawn
  without roofs.

The DRAM roof is solid, the last-level cache's roof dashed. Regressed steps are red
crosses, improved ones green, the rest blue. Every point gets a number next to it and a
line in the list beside the plot (name, bound class, host-bound included), so labels never
overlap however crowded the plot; a point whose share of the roof is over 100% is marked
and listed as a counting error, never as a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.reporting.plot_labels import legend_lines, place_numbers
from pytest_gpuperf.reporting.records import TestRecord, device_key, split_metric
from pytest_gpuperf.results import worst_status

INSTALL_HINT = "the roofline plot needs matplotlib: pip install 'pytest-gpuperf[plot]' (or pip install matplotlib)"


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


@dataclass(frozen=True)
class RooflinePoint:
    """One step of one test under the roofs."""

    nodeid: str
    step: str
    intensity: float
    flop_rate: float
    status: str
    bound: str | None = None
    flag: str = ""

    @property
    def label(self) -> str:
        """Short label: the test name (without the file) and the step unless it is ``step``."""
        name = self.nodeid.rpartition("::")[2].removeprefix("test_")
        return name if self.step in ("", "step") else f"{name}:{self.step}"


@dataclass
class DeviceRoofs:
    """Measured peaks of one device: compute per dtype class, and bandwidth."""

    compute: dict[str, float] = field(default_factory=dict)
    bandwidth: float | None = None
    cache_bandwidth: float | None = None
    cache_name: str = "cache"

    def add(self, extra: dict[str, Any]) -> None:
        """Take the compute, DRAM and cache roofs (and ``dtype_class``) from a metric's extras."""
        if _number(extra.get("peak_flops")):
            cls = str(extra.get("dtype_class") or extra.get("dtype") or "compute")
            self.compute[cls] = max(self.compute.get(cls, 0.0), float(extra["peak_flops"]))
        dram = _number(extra.get("dram_bandwidth"))
        if dram is None and extra.get("roof_level", "DRAM") == "DRAM":
            dram = _number(extra.get("peak_bandwidth"))
        if dram:
            self.bandwidth = max(self.bandwidth or 0.0, dram)
        cache = _number(extra.get("cache_bandwidth"))
        if cache:
            self.cache_bandwidth = max(self.cache_bandwidth or 0.0, cache)
            self.cache_name = str(extra.get("cache_name") or self.cache_name)


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def step_points(record: TestRecord, roofs: DeviceRoofs, unplaced: list[str] | None = None) -> list[RooflinePoint]:
    """The roofline points of one test's steps (and the roofs their extras carry, added to ``roofs``).

    Steps with bytes but no counted FLOPs cannot sit on a log-log roofline; they are
    described in ``unplaced`` (with their bandwidth) instead.
    """
    steps: dict[str, dict[str, dict[str, Any]]] = {}
    for verdict in record.verdicts:
        step, metric = split_metric(verdict["metric"])
        steps.setdefault(step, {})[metric] = verdict
    points = []
    for step, metrics in steps.items():
        extras: dict[str, Any] = {}
        for verdict in metrics.values():
            extra = verdict.get("extra") or {}
            roofs.add(extra)
            extras.update({k: v for k, v in extra.items() if k not in extras})
        value = {name: _number(v.get("value")) for name, v in metrics.items()}
        flop_rate, bandwidth = value.get("flop_rate"), value.get("bandwidth")
        intensity = value.get("arithmetic_intensity") or _number(extras.get("arithmetic_intensity"))
        if intensity is None and flop_rate and bandwidth:
            intensity = flop_rate / bandwidth
        if flop_rate is None and _number(extras.get("flops")) and _number(extras.get("seconds")):
            flop_rate = float(extras["flops"]) / float(extras["seconds"])
        if flop_rate is None and intensity and bandwidth:
            flop_rate = intensity * bandwidth
        if not intensity or not flop_rate:
            achieved = bandwidth or (
                float(extras["bytes"]) / float(extras["seconds"])
                if _number(extras.get("bytes")) and _number(extras.get("seconds"))
                else None
            )
            if unplaced is not None and achieved:
                name = RooflinePoint(record.nodeid, step, 0.0, 0.0, "info").label
                unplaced.append(f"{name}: 0 FLOPs counted, {_si(achieved, 'B/s')}")
            continue
        status = worst_status(v["status"] for v in metrics.values())
        bound = metrics.get("bound", {}).get("value")
        flag = ""
        if extras.get("over_roof") is True:  # the analytic rule's own word for it
            low = str(extras.get("counting_error", "")).startswith("above the measured roof")
            flag = "above the measured roof" if low else "counting error"
        points.append(RooflinePoint(record.nodeid, step, intensity, flop_rate, status, bound, flag))
    return points


def cached_roofs(root: Path, fingerprint: dict[str, Any], roofs: DeviceRoofs) -> None:
    """Add the measured roofs for ``fingerprint`` from pytest's cache under ``root`` (``.pytest_cache``)."""
    import json

    from pytest_gpuperf.profiling.roof_store import CACHE_PREFIX, cache_key

    path = root / ".pytest_cache" / "v" / (CACHE_PREFIX + cache_key(fingerprint))
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(entry, dict):
        return
    bandwidth = _number((entry.get("dram") or {}).get("bandwidth"))
    if roofs.bandwidth is None and bandwidth:
        roofs.bandwidth = bandwidth
    cache = entry.get("cache") or {}
    if roofs.cache_bandwidth is None and _number(cache.get("bandwidth")):
        roofs.cache_bandwidth = float(cache["bandwidth"])
        roofs.cache_name = str(cache.get("cache_name") or roofs.cache_name)
    for cls, measured in (entry.get("compute") or {}).items():
        peak = _number((measured or {}).get("peak_flops"))
        if peak and cls not in roofs.compute:
            roofs.compute[cls] = peak


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


STYLE = {
    "regression": {"color": "#d62728", "marker": "X", "s": 170, "label": "regression"},
    "changed": {"color": "#d62728", "marker": "X", "s": 170, "label": "bound changed"},
    "improvement": {"color": "#2ca02c", "marker": "^", "s": 110, "label": "improved"},
    "new": {"color": "#7f7f7f", "marker": "o", "s": 80, "label": "no baseline"},
}
DEFAULT_STYLE = {"color": "#1f77b4", "marker": "o", "s": 80, "label": "unchanged"}


def _slope_label(ax: Any, x: float, bandwidth: float, text: str) -> None:
    """Write ``text`` just above the bandwidth roof at ``x``, rotated along its slope on screen."""
    (x0, y0), (x1, y1) = ax.transData.transform([(x, x * bandwidth), (x * 10, x * 10 * bandwidth)])
    angle = math.degrees(math.atan2(y1 - y0, x1 - x0))
    ax.annotate(
        text,
        (x, x * bandwidth),
        xytext=(0, 6),
        textcoords="offset points",
        rotation=angle,
        rotation_mode="anchor",
        fontsize=9,
        color="#444444",
    )


def _draw_roofs(ax: Any, roofs: DeviceRoofs, grid: list[float], y_lo: float) -> None:
    """The compute roofs under the DRAM slope (solid) and the cache's slope (dashed), with their ridges."""
    palette = ["#444444", "#8c564b", "#9467bd", "#17becf"]
    if roofs.bandwidth:
        ax.plot(grid, [x * roofs.bandwidth for x in grid], color="#444444", lw=1, ls=":", alpha=0.6)
    for i, (cls, peak) in enumerate(sorted(roofs.compute.items(), key=lambda kv: -kv[1])):
        color = palette[i % len(palette)]
        roof = [min(peak, x * roofs.bandwidth) if roofs.bandwidth else peak for x in grid]
        ax.plot(grid, roof, color=color, lw=2.2, label=f"measured roof {cls}: {_si(peak, 'FLOP/s')}")
        if roofs.cache_bandwidth:
            cached = [min(peak, x * roofs.cache_bandwidth) for x in grid]
            label = f"{roofs.cache_name} roof: {_si(roofs.cache_bandwidth, 'B/s')}" if i == 0 else None
            ax.plot(grid, cached, color=color, lw=1.3, ls="--", alpha=0.8, label=label)
        if roofs.bandwidth:
            ridge = peak / roofs.bandwidth
            ax.axvline(ridge, color=color, lw=0.8, ls="--", alpha=0.5)
            ax.text(ridge * 1.08, y_lo * 1.6, f"ridge {ridge:.3g} FLOP/B", fontsize=8, color=color, rotation=90)


def _draw_points(ax: Any, points: list[RooflinePoint]) -> None:
    """The steps as markers by verdict (regressions on top), ringed red where the count exceeds its roof."""
    seen_labels: set[str] = set()
    for point in sorted(points, key=lambda p: p.status == "regression"):
        style = STYLE.get(point.status, DEFAULT_STYLE)
        label = style["label"] if style["label"] not in seen_labels else None
        seen_labels.add(style["label"])
        ax.scatter(
            [point.intensity],
            [point.flop_rate],
            c=style["color"],
            marker=style["marker"],
            s=style["s"],
            edgecolors="#b00000" if point.flag else "black",
            linewidths=2.0 if point.flag else 0.6,
            zorder=5,
            label=label,
        )
    if any(point.flag for point in points):
        ax.scatter(
            [], [], s=80, facecolors="none", edgecolors="#b00000", linewidths=2.0, label="over its roof: counting error"
        )


def draw_roofline(
    path: Path,
    title: str,
    points: list[RooflinePoint],
    roofs: DeviceRoofs,
    subtitle: str = "",
    unplaced: list[str] | None = None,
) -> Path:
    """Draw one device's roofline PNG at ``path``; raises :class:`PlotUnavailable` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(INSTALL_HINT) from exc

    ridges = [p / roofs.bandwidth for p in roofs.compute.values()] if roofs.bandwidth else []
    xs = [p.intensity for p in points] + ridges
    ys = [p.flop_rate for p in points] + list(roofs.compute.values())
    x_lo, x_hi = min(xs) / 8, max(xs) * 8
    y_lo, y_hi = min(ys) / 8, max(ys) * 3
    listing = legend_lines(points)
    fig = plt.figure(figsize=(14, max(7.5, 1.6 + 0.15 * len(listing))), dpi=110)
    ax = fig.add_axes((0.07, 0.1 if unplaced else 0.08, 0.6, 0.8))
    ax.set_xscale("log")
    ax.set_yscale("log")
    grid = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    _draw_roofs(ax, roofs, grid, y_lo)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    _draw_points(ax, points)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)", fontsize=11)
    ax.set_ylabel("achieved throughput (FLOP/s)", fontsize=11)
    ax.set_title(title + (f"\n{subtitle}" if subtitle else ""), fontsize=12)
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.08)
    ax.legend(loc="upper left", fontsize=9, framealpha=0.9)
    fig.text(0.69, 0.9, "steps (number on the plot)", fontsize=10, fontweight="bold", va="top")
    fig.text(0.69, 0.86, "\n".join(listing), fontsize=8.5, va="top", family="monospace")
    if unplaced:
        fig.text(0.01, 0.005, "not on the plot: " + "; ".join(unplaced), fontsize=8, color="#555555", wrap=True)
    fig.canvas.draw()
    place_numbers(fig, ax, points)
    if roofs.bandwidth:  # after the layout: the label's angle follows the slope on screen
        _slope_label(ax, x_lo * 1.6, roofs.bandwidth, f"DRAM roof {_si(roofs.bandwidth, 'B/s')}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_rooflines(
    records: list[TestRecord], directory: Path, root: Path, run_label: str
) -> tuple[list[Path], list[str]]:
    """One PNG per device under ``directory``; returns the files and notes (devices with nothing to plot)."""
    from pytest_gpuperf.backends.fingerprint import describe

    by_device: dict[str, list[TestRecord]] = {}
    for record in records:
        if record.fingerprint:
            by_device.setdefault(device_key(record.fingerprint), []).append(record)
    written: list[Path] = []
    notes: list[str] = []
    for key, group in sorted(by_device.items()):
        roofs = DeviceRoofs()
        unplaced: list[str] = []
        points = [p for r in group for p in step_points(r, roofs, unplaced)]
        fingerprint = group[0].fingerprint
        cached_roofs(root, fingerprint, roofs)
        if not points:
            notes.append(
                f"roofline {key}: no step reports both FLOPs and bytes; pass measure(flops=..., bytes_moved=...) "
                "or enable the profiling feature"
            )
            continue
        subtitle = run_label
        if not roofs.compute:
            subtitle += " - roofs not measured yet (the profiling feature measures them)"
        title = f"Roofline: {describe(fingerprint)} ({fingerprint.get('backend', '?')})"
        path = directory / f"roofline-{key}.png"
        written.append(draw_roofline(path, title, points, roofs, subtitle, unplaced))
    return written, notes
