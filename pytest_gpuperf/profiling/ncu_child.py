"""The ncu child's side (the pytest process ncu runs): wait at the gate, then one capture window per ``measure()``.

A prestarted child waits at its gate file (:mod:`pytest_gpuperf.procs.gate`) after collecting; each capture window
(:func:`bracket_step`) is opened by a one-thread marker kernel (``torch.cuda._sleep``, ncu shows it as
:data:`MARKER_KERNEL`) and listed in the manifest the parent names in :data:`ENV_MANIFEST`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_gpuperf.procs.gate import wait_on_file

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

ENV_MANIFEST = "GPUPERF_NCU_MANIFEST"
#: Set for a gated child (:func:`~pytest_gpuperf.profiling.ncu_capture.start_session`): the file it waits for
#: before running its tests, and the parent's pid (a gone parent ends the wait).
GATE_ENV = "GPUPERF_NCU_GATE"
GATE_PARENT_ENV = "GPUPERF_NCU_PARENT"
#: The marker kernel that opens each capture window (``torch.cuda._sleep``).
MARKER_KERNEL = "spin_kernel"

WindowKey = tuple[str, str, int]


#: In a gated child: wait until the parent opens the gate file; True for "go", False for "stop" or a gone parent.
wait_for_gate = wait_on_file


def child_manifest() -> Path | None:
    """In the ncu child: the manifest to append windows to (the parent names it); None elsewhere."""
    path = os.environ.get(ENV_MANIFEST)
    return Path(path) if path else None


def bracket_step(
    backend: Backend, step: Callable[[], object], manifest: Path, key: WindowKey, test: str | None = None
) -> None:
    """One capture window: a marker kernel and one call of ``step`` between profiler start and stop."""
    import torch

    backend.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    try:
        torch.cuda._sleep(1)
        step()
        backend.synchronize()
    finally:
        torch.cuda.cudart().cudaProfilerStop()
    with manifest.open("a", encoding="utf-8") as handle:
        entry = {"node_id": key[0], "step": key[1], "occurrence": key[2]}
        if test is not None:
            entry["test"] = test  # the rootdir-independent name (ncu_test_key) the parent looks the window up by
        handle.write(json.dumps(entry) + "\n")
