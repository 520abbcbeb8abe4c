"""The roofline PNG: points from the core's and the profiling feature's metrics, measured roofs, regressions marked."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuperf.reporting.plot import DeviceRoofs, RooflinePoint, cached_roofs, draw_roofline, step_points
from pytest_gpuperf.reporting.plot_labels import legend_lines, number_ranges, numbered
from pytest_gpuperf.reporting.records import TestRecord

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FINGERPRINT = {"backend": "cuda", "device_name": "NVIDIA H200", "arch": "sm_90", "memory_gib": 140, "world_size": 1}


def _verdict(metric: str, value: float | str, status: str = "info", **extra: float | str) -> dict:
    return {"metric": metric, "value": value, "unit": "", "status": status, "kind": "custom", "extra": extra}


def test_points_come_from_flop_rate_and_bandwidth_when_the_profiling_metrics_are_absent() -> None:
    record = TestRecord(
        "perf/test_k.py::test_gemm[cuda]",
        "failed",
        1.0,
        {
            "fingerprint": FINGERPRINT,
            "verdicts": [
                _verdict("step.time", 0.001, "regression"),
                _verdict("step.flop_rate", 4e14),
                _verdict("step.bandwidth", 2e12),
                _verdict("prefill.time", 0.002, "unchanged"),  # a step without FLOPs or bytes: no point
                _verdict("norm.bandwidth", 1e12),  # bytes but no FLOPs: listed under the plot instead
            ],
        },
    )
    roofs = DeviceRoofs()
    unplaced: list[str] = []
    [point] = step_points(record, roofs, unplaced)
    assert unplaced == ["gemm[cuda]:norm: 0 FLOPs counted, 1 TB/s"]
    assert point.intensity == pytest.approx(200.0) and point.flop_rate == 4e14
    assert point.status == "regression" and point.label == "gemm[cuda]"
    assert roofs.compute == {} and roofs.bandwidth is None


def test_points_and_roofs_come_from_the_profiling_features_extras() -> None:
    extras = {"flops": 2e9, "seconds": 1e-3, "peak_flops": 9e14, "peak_bandwidth": 4.5e12, "dtype_class": "bfloat16"}
    record = TestRecord(
        "t.py::test_norm[cuda]",
        "passed",
        1.0,
        {
            "fingerprint": FINGERPRINT,
            "verdicts": [
                _verdict("fwd.time", 0.001, "improvement"),
                _verdict("fwd.arithmetic_intensity", 0.5),
                _verdict("fwd.bound", "memory-bound", "unchanged", **extras),
            ],
        },
    )
    roofs = DeviceRoofs()
    [point] = step_points(record, roofs)
    assert (point.intensity, point.flop_rate, point.bound) == (0.5, 2e12, "memory-bound")
    assert point.status == "improvement" and point.label == "norm[cuda]:fwd"
    assert roofs.compute == {"bfloat16": 9e14} and roofs.bandwidth == 4.5e12


def test_cached_roofs_are_read_from_pytest_cache(tmp_path: Path) -> None:
    import json

    from pytest_gpuperf.profiling.roof_store import CACHE_PREFIX, cache_key

    entry = {
        "compute": {"float32-tf32": {"peak_flops": 4e14}},
        "dram": {"bandwidth": 4e12},
        "cache": {"bandwidth": 1e13, "cache_bytes": 5e7, "cache_name": "L2"},
    }
    path = tmp_path / ".pytest_cache" / "v" / (CACHE_PREFIX + cache_key(FINGERPRINT))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(entry))
    roofs = DeviceRoofs()
    cached_roofs(tmp_path, FINGERPRINT, roofs)
    assert roofs.compute == {"float32-tf32": 4e14} and roofs.bandwidth == 4e12
    assert (roofs.cache_bandwidth, roofs.cache_name) == (1e13, "L2")
    cached_roofs(tmp_path / "elsewhere", FINGERPRINT, roofs)  # no cache there: nothing changes, no error


def test_a_cache_roof_step_keeps_dram_as_the_dram_roof_and_an_over_roof_point_is_flagged() -> None:
    extras = {
        "flops": 1e6,
        "seconds": 1e-6,
        "peak_flops": 9e14,
        "peak_bandwidth": 1.2e13,
        "roof_level": "L2",
        "dram_bandwidth": 4.5e12,
        "cache_bandwidth": 1.2e13,
        "cache_name": "L2",
        "over_roof": True,
    }
    record = TestRecord(
        "t.py::test_add[cuda]",
        "passed",
        1.0,
        {
            "fingerprint": FINGERPRINT,
            "verdicts": [
                _verdict("step.arithmetic_intensity", 0.1),
                _verdict("step.bound", "memory-bound", "unchanged", **extras),
            ],
        },
    )
    roofs = DeviceRoofs()
    [point] = step_points(record, roofs)
    assert roofs.bandwidth == 4.5e12 and roofs.cache_bandwidth == 1.2e13 and roofs.cache_name == "L2"
    assert point.flag == "counting error"
    assert legend_lines([point]) == [
        " 1  add[cuda] - memory-bound",
        "    ^ counting error: over its roof, not a measurement",
    ]


def test_points_are_numbered_regressions_first_and_listed_beside_the_plot() -> None:
    points = [
        RooflinePoint("t.py::test_a[cuda]", "step", 300.0, 6e14, "unchanged", "compute-bound"),
        RooflinePoint("t.py::test_b[cuda]", "step", 0.4, 1.2e12, "regression", "memory-bound"),
        RooflinePoint("t.py::test_c[cuda]", "fwd", 2.0, 1e10, "new", "host-bound"),
    ]
    assert [n for n, _ in numbered(points)] == [1, 2, 3]
    assert legend_lines(points) == [
        " 1  b[cuda] - memory-bound",
        " 2  c[cuda]:fwd - host-bound",
        " 3  a[cuda] - compute-bound",
    ]


def test_draw_roofline_writes_a_png(tmp_path: Path) -> None:
    points = [
        RooflinePoint("t.py::test_gemm[cuda]", "step", 300.0, 6e14, "unchanged", "compute-bound"),
        RooflinePoint("t.py::test_norm[cuda]", "step", 0.4, 1.2e12, "regression", "memory-bound"),
        RooflinePoint("t.py::test_tiny[cuda]", "step", 2.0, 1e10, "new", "latency-bound"),
    ]
    roofs = DeviceRoofs(compute={"bfloat16": 9e14, "float32-tf32": 4e14}, bandwidth=4.5e12, cache_bandwidth=1.2e13)
    path = draw_roofline(tmp_path / "r.png", "Roofline: NVIDIA H200 sm_90 (cuda)", points, roofs, "3 perf tests")
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000


def crowded_points() -> list[RooflinePoint]:
    """Forty steps, many of them on top of each other (the same kernel in several tests)."""
    points = []
    for i in range(40):
        intensity = 0.25 * (1.5 ** (i % 10)) if i < 30 else 0.5
        rate = intensity * 2e12 * (0.3 + 0.05 * (i % 7)) if i < 30 else 1e12
        status = ("unchanged", "regression", "new", "improvement")[i % 4]
        bound = ("memory-bound", "latency-bound", "host-bound", "compute-bound")[i % 4]
        points.append(RooflinePoint(f"perf/test_m.py::test_case_{i}[cuda]", "step", intensity, rate, status, bound))
    points.append(
        RooflinePoint("t.py::test_over[cuda]", "step", 0.1, 1e12, "unchanged", "memory-bound", "counting error")
    )
    return points


def _expand(part: str) -> list[int]:
    low, _, high = part.partition("-")
    return list(range(int(low), int(high or low) + 1))


def test_number_ranges_compress_runs() -> None:
    assert number_ranges([18, 3, 4, 16, 17]) == "3,4,16-18"
    assert number_ranges([5]) == "5" and number_ranges([1, 2]) == "1,2"


def test_a_crowded_plot_numbers_every_point_and_no_two_numbers_overlap(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib import pyplot as plt

    points = crowded_points()
    roofs = DeviceRoofs(compute={"bfloat16": 9e14}, bandwidth=4.5e12, cache_bandwidth=1.2e13, cache_name="L2")
    drawn: list[object] = []
    original = plt.close
    plt.close = lambda fig: drawn.append(fig)  # type: ignore[assignment] # keep the figure to inspect it
    try:
        path = draw_roofline(tmp_path / "crowded.png", "Roofline: crowded", points, roofs, "41 steps")
    finally:
        plt.close = original  # type: ignore[assignment]
    [fig] = drawn
    ax = fig.axes[0]  # type: ignore[attr-defined]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    numbers = [t for t in ax.texts if t.get_text().replace(",", "").replace("-", "").isdigit()]
    boxes = [t.get_window_extent(renderer) for t in numbers]
    shown = [n for t in numbers for part in t.get_text().split(",") for n in _expand(part)]
    assert sorted(shown) == list(range(1, 42))
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    listing = "\n".join(t.get_text() for t in fig.texts)  # type: ignore[attr-defined]
    assert "over[cuda] - memory-bound\n    ^ counting error: over its roof, not a measurement" in listing
    assert path.read_bytes().startswith(PNG_MAGIC)
    original(fig)


PERF = """
import torch

def test_matmul(gpuperf):
    a = torch.randn(128, 128)
    gpuperf.measure(lambda: a @ a, flops=2 * 128**3, bytes_moved=3 * 128 * 128 * 4)

def test_no_counts(gpuperf):
    a = torch.randn(64)
    gpuperf.measure(lambda: a + 1, memory=False)
"""


def test_plot_option_writes_one_png_per_device(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(test_perf=PERF)
    result = pytester.runpytest("--gpuperf", *fast_args, "-o", "gpuperf_plot=plots", "--gpuperf-markdown", "pr.md")
    result.assert_outcomes(passed=2)
    [png] = list((pytester.path / "plots").glob("roofline-cpu-*.png"))
    assert png.read_bytes().startswith(PNG_MAGIC)
    result.stdout.fnmatch_lines(["*roofline plot: plots/roofline-cpu-*.png*"])
    assert f"- `plots/{png.name}`" in (pytester.path / "pr.md").read_text()


def test_without_matplotlib_the_plot_is_skipped_with_the_install_hint(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_perf=PERF)
    # A package that fails to import the way a missing matplotlib does, first on sys.path.
    pytester.mkpydir("matplotlib").joinpath("__init__.py").write_text(
        "raise ImportError('No module named matplotlib')\n"
    )
    result = pytester.runpytest("--gpuperf", *fast_args, "-o", "gpuperf_plot=plots", "-k", "matmul")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*gpuperf_plot plots: the roofline plot needs matplotlib: pip install*[plot]*"])
    assert not (pytester.path / "plots").exists()
