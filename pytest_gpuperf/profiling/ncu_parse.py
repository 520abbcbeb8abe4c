"""Parse Nsight Compute's CSV output (``--csv --page raw`` and ``--page details``) into per-kernel records.

Real ncu CSV has a few quirks this module handles (see ``tests/data/ncu/``):

* lines that are not CSV rows: ``==PROF==``, ``==WARNING==``, ``==ERROR==`` and whatever the
  profiled program printed; only lines starting with a double quote are CSV rows;
* numbers with thousands separators (``"1,366,048"``);
* on the raw page, the row after the header holds the units (its ``ID`` cell is empty);
  without ``--print-units base`` the units are scaled (``us``, ``Gbyte/s``), so values
  are converted to base units (seconds, bytes, bytes/s, percent);
* on the details page, one row per (kernel, section, metric), pivoted here per kernel.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

#: Speed-of-Light metrics captured per kernel (the names ncu 2025.3 uses).
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
DURATION = "gpu__time_duration.sum"
#: Same number as DRAM_PCT in captures made with ``--section SpeedOfLight`` rather than ``--metrics``.
DRAM_PCT_FALLBACK = "dram__cycles_active.avg.pct_of_peak_sustained_elapsed"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
SOL_METRICS: tuple[str, ...] = (
    DURATION,
    SM_PCT,
    MEMORY_PCT,
    DRAM_PCT,
    DRAM_READ,
    DRAM_WRITE,
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
)
_READ = (*SOL_METRICS, DRAM_PCT_FALLBACK)

#: Details-page (section, metric) names of the Speed-of-Light section.
_DETAILS = {
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): SM_PCT,
    ("GPU Speed Of Light Throughput", "Memory Throughput"): MEMORY_PCT,
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): DRAM_PCT,
    ("GPU Speed Of Light Throughput", "Duration"): DURATION,
}

_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME = {"ns": 1e-9, "us": 1e-6, "usecond": 1e-6, "msecond": 1e-3, "ms": 1e-3, "s": 1.0, "second": 1.0, "nsecond": 1e-9}
_BYTES = re.compile(r"^([KMGTP]?)(?:byte|B)(/s|/second)?$", re.IGNORECASE)
_HERTZ = re.compile(r"^([KMGTP]?)hz$", re.IGNORECASE)

#: Lines of ncu output that mean it cannot read counters here (the test is then skipped, never failed).
UNAVAILABLE_MARKERS = (
    "ERR_NVGPUCTRPERM",
    "ERR_NVGPUCTRBUSY",
    "LibraryNotLoaded",
    "Failed to access the GPU performance counters",
    "not supported on this device",
)


@dataclass
class KernelRecord:
    """One profiled kernel launch with its Speed-of-Light numbers in base units."""

    id: int
    name: str
    #: ``gpu__time_duration.sum`` in seconds.
    duration_s: float
    #: Percent of peak: SM throughput, the busiest memory level (L1 to DRAM), DRAM alone.
    sm_pct: float
    memory_pct: float
    dram_pct: float
    dram_bytes: float | None = None
    block: str = ""
    grid: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    #: ncu's ``Process ID`` of the launch ("" when the capture does not say).
    process: str = ""

    def short_name(self, width: int = 60) -> str:
        """The kernel name without its argument list, cut to ``width`` characters."""
        name = self.name.split("(", 1)[0].strip() or self.name
        return name if len(name) <= width else name[: width - 3] + "..."


class NcuParseError(ValueError):
    """The text is not the CSV ncu prints; the message says what was missing."""


def parse_number(text: str) -> float | None:
    """``"1,366,048"`` -> 1366048.0; ``""`` / ``"n/a"`` / ``"no data"`` -> None."""
    cleaned = text.strip().replace(",", "")
    if not cleaned:
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def to_base(value: float, unit: str) -> float:
    """Convert a value in an ncu unit to base units: seconds, bytes, bytes/s, Hz; ``%`` stays percent."""
    unit = unit.strip()
    if unit in _TIME:
        return value * _TIME[unit]
    match = _BYTES.match(unit)
    if match:
        return value * _SCALE[match.group(1).upper()]
    match = _HERTZ.match(unit)
    if match:
        return value * _SCALE[match.group(1).upper()]
    return value


def csv_rows(text: str) -> list[list[str]]:
    """The CSV rows of ncu output, skipping ``==PROF==``/``==WARNING==`` lines and program output."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    return list(csv.reader(lines))


def unavailable_reason(text: str, any_error: bool = False) -> str | None:
    """The first line of ncu output saying it cannot profile here (permissions, missing library), or None.

    With ``any_error``, any ``==ERROR==`` line counts too (used when no kernel was captured).
    """
    for line in text.splitlines():
        if any(marker in line for marker in UNAVAILABLE_MARKERS) or (any_error and line.startswith("==ERROR==")):
            return line.strip()
    return None


def _header_index(rows: list[list[str]], source: str) -> int:
    for index, row in enumerate(rows):
        if row and row[0] == "ID":
            return index
    raise NcuParseError(f'{source}: no CSV header row starting with "ID"; was ncu run with --csv?')


def _table(text: str, source: str) -> tuple[list[str], list[list[str]], dict[str, int]]:
    """The header row, the rows below it and each column's index of ncu's CSV (empty when there is no CSV)."""
    rows = csv_rows(text)
    if not rows:
        return [], [], {}
    start = _header_index(rows, source)
    header = rows[start]
    return header, rows[start + 1 :], {name: i for i, name in enumerate(header)}


def parse_raw(text: str, source: str = "ncu output") -> list[KernelRecord]:
    """Kernels of a ``--csv --page raw`` capture; needs the Speed-of-Light metrics in :data:`SOL_METRICS`."""
    header, body, column = _table(text, source)
    if not header:
        return []
    units: list[str] = [""] * len(header)
    if body and body[0] and body[0][0] == "":
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    missing = [m for m in (SM_PCT, MEMORY_PCT, DURATION) if m not in column]
    if missing:
        raise NcuParseError(f"{source}: raw page lacks metric column(s) {missing}; capture with --metrics {SM_PCT},...")
    kernels = []
    for row in body:
        if len(row) < len(header):
            continue
        metrics: dict[str, float] = {}
        for name in _READ:
            if name in column:
                value = parse_number(row[column[name]])
                if value is not None:
                    metrics[name] = to_base(value, units[column[name]])
        kernels.append(_record(row, column, metrics))
    return kernels


def parse_details(text: str, source: str = "ncu output") -> list[KernelRecord]:
    """Kernels of a ``--csv --page details`` capture with the SpeedOfLight section."""
    header, body, column = _table(text, source)
    if not header:
        return []
    for needed in ("Section Name", "Metric Name", "Metric Unit", "Metric Value"):
        if needed not in column:
            raise NcuParseError(f"{source}: details page lacks column {needed!r}; capture with --page details")
    by_id: dict[str, tuple[list[str], dict[str, float]]] = {}
    width = column["Metric Value"] + 1  # rows without rule results stop after the metric value
    for row in body:
        if len(row) < width:
            continue
        key = (row[column["Section Name"]], row[column["Metric Name"]])
        entry = by_id.setdefault(row[column["ID"]], (row, {}))
        if key in _DETAILS:
            value = parse_number(row[column["Metric Value"]])
            if value is not None:
                entry[1][_DETAILS[key]] = to_base(value, row[column["Metric Unit"]])
    return [_record(row, column, metrics) for row, metrics in by_id.values()]


def _record(row: list[str], column: dict[str, int], metrics: dict[str, float]) -> KernelRecord:
    def cell(name: str) -> str:
        return row[column[name]] if name in column else ""

    dram = None
    if DRAM_READ in metrics or DRAM_WRITE in metrics:
        dram = metrics.get(DRAM_READ, 0.0) + metrics.get(DRAM_WRITE, 0.0)
    return KernelRecord(
        id=int(parse_number(cell("ID")) or 0),
        name=cell("Kernel Name"),
        duration_s=metrics.get(DURATION, 0.0),
        sm_pct=metrics.get(SM_PCT, 0.0),
        memory_pct=metrics.get(MEMORY_PCT, 0.0),
        dram_pct=metrics.get(DRAM_PCT, metrics.get(DRAM_PCT_FALLBACK, 0.0)),
        dram_bytes=dram,
        block=cell("Block Size"),
        grid=cell("Grid Size"),
        metrics=metrics,
        process="".join(ch for ch in cell("Process ID") if ch.isdigit()),  # "1,222" or "1222": the pid
    )
