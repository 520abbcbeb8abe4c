"""The ncu child's command line: where ncu is, ncu's options, and the short ``--gpuperf`` pytest run it profiles.

The parent (:mod:`.ncu_capture`) starts ``ncu <ncu_prefix> -- python -m pytest <child_pytest_args>`` once per
session; the child's tests are named by :func:`ncu_test_key` on both sides.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_gpuperf.profiling.ncu_parse import SOL_METRICS


def find_ncu() -> str | None:
    """Path of the ``ncu`` executable (``$GPUPERF_NCU`` first, then ``PATH``), or None."""
    explicit = os.environ.get("GPUPERF_NCU")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return shutil.which("ncu")


def ncu_prefix(ncu: str, log_file: Path, full_report: Path | None = None, all_processes: bool = False) -> list[str]:
    """The ncu command line that profiles only the profiler-start/stop windows, with real clocks.

    ``full_report``: also collect ``--set full`` (every section the Nsight Compute GUI shows; many more replay
    passes per kernel) and keep the report there, as ``ncu --set full -o <report>`` does. ``all_processes``: ncu
    follows the processes the child starts (a distributed test's ranks); otherwise only the child itself
    (``--target-processes application-only``), so that nothing else it starts is instrumented."""
    full = ["--set", "full", "--export", str(full_report), "--force-overwrite"] if full_report is not None else []
    return [
        ncu,
        *full,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--target-processes",
        "all" if all_processes else "application-only",
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


#: Seconds ``ncu --import`` may take to print a kept report's raw page (no GPU work: reading a file).
IMPORT_TIMEOUT = 60.0


def import_report(ncu: str, report: Path) -> str:
    """The raw-page CSV of a kept report (``ncu --import R --csv --page raw --print-units base``), or a line
    saying why there is none: with ``--export`` ncu may print no rows to its log file."""
    import subprocess

    command = [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=IMPORT_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"==ERROR== cannot read the kept report {report}: {exc}"
    return done.stdout + done.stderr


def ncu_test_key(path: Path | str, node_id: str) -> str:
    """A test's name that does not depend on the rootdir: its file's absolute path, then the rest of its node id.

    The parent selects the child's tests by it and both sides name capture windows by it. A node id alone does
    not do: a file outside the rootdir has an empty path part (``::test_x[name-cuda]`` under pytest 9), which
    selects nothing in the child, and a child that found another rootdir names the same test differently.
    """
    _, sep, rest = node_id.partition("::")
    return os.path.normpath(str(path)) + sep + rest


#: Options of the parent's command line that decide what the child collects and how (value-taking ones).
FORWARDED_WITH_VALUE = ("-p", "-c", "--config-file", "-o", "--override-ini", "--import-mode", "--confcutdir")
#: Flags of the parent's command line that the child needs too.
FORWARDED_FLAGS = ("--noconftest",)


def forwarded_options(args: Sequence[str]) -> list[str]:
    """The parent's plugin, ini, import-mode and conftest options (``-p X``, ``-o k=v``, ``--import-mode=...``)."""
    kept: list[str] = []
    index = 0
    while index < len(args):
        arg = str(args[index])
        name, eq, _ = arg.partition("=")
        if arg in FORWARDED_FLAGS:
            kept.append(arg)
        elif arg in FORWARDED_WITH_VALUE and index + 1 < len(args):
            kept += [arg, str(args[index + 1])]
            index += 1
        elif eq and name in FORWARDED_WITH_VALUE and name.startswith("--"):
            kept.append(arg)
        elif arg[:2] in ("-p", "-o", "-c") and len(arg) > 2 and not arg.startswith("--"):
            kept.append(arg)
        index += 1
    return kept


def child_pytest_args(
    selection: Sequence[str],
    backend: str,
    baselines_dir: Path,
    xdist: bool,
    rootdir: Path | None = None,
    inifile: Path | None = None,
    parent_args: Sequence[str] = (),
) -> list[str]:
    """A short ``--gpuperf`` run of the tests: just enough warm-up for each window to be representative.

    ``selection``: the tests as :func:`ncu_test_key` (absolute file path + the rest of the id), so the child
    collects them from any working directory (a file outside the rootdir, a parametrized id, a run the parent
    selected with ``-k``); ``rootdir``/``inifile``: the parent's, so the child's ids, conftests and ini options
    are the parent's too; ``parent_args``' plugin, ini and import options come along (:func:`forwarded_options`).
    """
    args = [sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider", "--gpuperf"]
    if rootdir is not None:
        args += ["--rootdir", str(rootdir)]
    if inifile is not None and not any(a in ("-c", "--config-file") or a.startswith("-c") for a in parent_args):
        args += ["-c", str(inifile)]
    args += forwarded_options(parent_args)
    args += ["--gpuperf-backend", backend, "-o", "gpuperf_max_time=0.05", "-o", "gpuperf_min_samples=1"]
    args += ["-o", "gpuperf_no_confirm=true", "-o", f"gpuperf_baselines={baselines_dir}"]
    if xdist:
        args += ["-n", "0"]
    return args
