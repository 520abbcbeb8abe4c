"""Nsight Compute capture of one measured step, re-run in a child pytest process.

Parent side (:func:`capture_step`): run ``ncu --profile-from-start off --clock-control none
--metrics <SOL> --csv --page raw --print-units base -- python -m pytest <test id> ...``
with environment variables naming the step. Child side (:func:`bracket_step`, called by
the profiling extension in the child): after the child's own short warm-up and
measuring, bracket :data:`PROFILED_CALLS` calls of that step with
``cudaProfilerStart()`` / ``cudaProfilerStop()``, so ncu profiles only that region, with
real clocks. The CSV is kept as an artifact and parsed into per-kernel records.

ncu missing, or unable to read the GPU's counters (``ERR_NVGPUCTRPERM``,
``LibraryNotLoaded`` ...), raises :class:`NcuUnavailable`; the caller skips the test
with that reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_gpuperf.profiling.ncu_parse import (
    SOL_METRICS,
    KernelRecord,
    NcuParseError,
    csv_rows,
    parse_raw,
    unavailable_reason,
)

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

ENV_STEP = "GPUPERF_NCU_CHILD_STEP"
ENV_OCCURRENCE = "GPUPERF_NCU_CHILD_OCCURRENCE"
PROFILED_CALLS = 1
DEFAULT_TIMEOUT = 300.0


class NcuUnavailable(Exception):
    """ncu cannot profile here; ``str(exc)`` is the reason shown on the skipped test."""


@dataclass
class NcuCapture:
    """Kernels ncu profiled in one step's region, and where its CSV was kept."""

    kernels: list[KernelRecord]
    csv_path: Path
    wall_s: float
    command: list[str]


def find_ncu() -> str | None:
    """Path of the ``ncu`` executable (``$GPUPERF_NCU`` first, then ``PATH``), or None."""
    explicit = os.environ.get("GPUPERF_NCU")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return shutil.which("ncu")


def ncu_prefix(ncu: str, log_file: Path) -> list[str]:
    """The ncu command line that profiles only the profiler-start/stop region, with real clocks."""
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--metrics",
        ",".join(SOL_METRICS),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--log-file",
        str(log_file),
    ]


def child_pytest_args(node_id: str, backend: str, baselines_dir: Path, xdist: bool) -> list[str]:
    """A short ``--gpuperf`` run of one test: just enough warm-up for the region to be representative."""
    args = [sys.executable, "-m", "pytest", node_id, "-q", "-p", "no:cacheprovider", "--gpuperf"]
    args += ["--gpuperf-backend", backend, "--gpuperf-max-time", "0.05", "--gpuperf-min-samples", "1"]
    args += ["--gpuperf-no-reference", "--gpuperf-no-confirm", "--gpuperf-baselines", str(baselines_dir)]
    if xdist:
        args += ["-n", "0"]
    return args


def capture_step(
    ncu: str,
    node_id: str,
    step_name: str,
    occurrence: int,
    backend: str,
    rootdir: Path,
    csv_path: Path,
    timeout: float = DEFAULT_TIMEOUT,
    xdist: bool = False,
) -> NcuCapture:
    """Re-run ``node_id`` under ncu, profiling the ``occurrence``-th ``measure(name=step_name)`` region."""
    import time

    csv_path.parent.mkdir(parents=True, exist_ok=True)
    if csv_path.exists():
        csv_path.unlink()
    env = dict(os.environ)
    env[ENV_STEP] = step_name
    env[ENV_OCCURRENCE] = str(occurrence)
    with tempfile.TemporaryDirectory(prefix="gpuperf-ncu-") as scratch:
        command = ncu_prefix(ncu, csv_path) + child_pytest_args(node_id, backend, Path(scratch), xdist)
        started = time.perf_counter()
        try:
            done = subprocess.run(
                command, cwd=rootdir, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except FileNotFoundError as exc:
            raise NcuUnavailable(f"cannot start ncu ({ncu}): {exc}") from None
        except subprocess.TimeoutExpired:
            raise NcuUnavailable(
                f"ncu capture of {node_id} ran past {timeout:.0f} s; raise --gpuperf-ncu-timeout"
            ) from None
        wall = time.perf_counter() - started
    log_text = csv_path.read_text(encoding="utf-8", errors="replace") if csv_path.exists() else ""
    output = f"{log_text}\n{done.stdout}\n{done.stderr}"
    reason = unavailable_reason(output)
    if reason:
        raise NcuUnavailable(f"ncu cannot read GPU counters here: {reason}")
    source = log_text if any(r and r[0] == "ID" for r in csv_rows(log_text)) else done.stdout
    try:
        kernels = parse_raw(source, str(csv_path))
    except NcuParseError as exc:
        raise NcuUnavailable(f"ncu printed no usable CSV ({exc}); output tail: {_tail(output)}") from None
    if source is not log_text:
        csv_path.write_text("\n".join(line for line in source.splitlines() if line.startswith('"')), encoding="utf-8")
    if not kernels:
        error = unavailable_reason(output, any_error=True)
        raise NcuUnavailable(f"ncu profiled no kernels in the region of {node_id}: {error or _tail(output)}")
    return NcuCapture(kernels, csv_path, wall, command)


def _tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)


def child_target() -> tuple[str, int] | None:
    """In a child started by :func:`capture_step`: the (step name, occurrence) to bracket; None elsewhere."""
    name = os.environ.get(ENV_STEP)
    if not name:
        return None
    return name, int(os.environ.get(ENV_OCCURRENCE, "0") or 0)


def bracket_step(backend: Backend, step: Callable[[], object], calls: int = PROFILED_CALLS) -> None:
    """Run ``calls`` calls of ``step`` between ``cudaProfilerStart()`` and ``cudaProfilerStop()``."""
    import torch

    backend.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    try:
        for _ in range(calls):
            step()
        backend.synchronize()
    finally:
        torch.cuda.cudart().cudaProfilerStop()
