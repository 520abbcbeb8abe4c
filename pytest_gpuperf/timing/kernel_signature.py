"""A step's kernel signature: the kernels one call launches, their launch counts, launch shapes and time shares.

On CUDA the rows are the GPU work CUPTI saw during one call (kernels, memcpy, memset), with each kernel's grid and
block where the profiler reports them; on the CPU they are the aten ops of one call with their self time (the
profiler's op list: a CPU step has no kernels, and the ops are what a code change adds or removes). The digest
hashes every row's full name, launch count and launch shapes, never a time: unchanged code gives the same digest
on any machine state, and a baseline stores it with the heaviest rows only (:data:`TOP_KERNELS`), so a reviewer
reads a few lines and a later run can still tell "the same kernels" from "another kernel".

The signature explains a timing verdict; it never fails a test (its metric is informational).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.results import KIND_SIGNATURE, Metric

__all__ = ["KIND_SIGNATURE", "KernelRow", "KernelSignature", "signature_of"]
#: Rows a baseline entry and a report keep: the heaviest by time.
TOP_KERNELS = 8
#: Longest kernel name kept; longer ones end in "...".
MAX_NAME = 96
#: Characters of the digest (hex).
DIGEST_CHARS = 12
DIGEST_PATTERN = re.compile(r"[0-9a-f]{12}")
#: Where the rows came from.
SOURCE_CUDA = "cuda kernels"
SOURCE_CPU = "cpu ops"
SIGNATURE_SOURCES = (SOURCE_CUDA, SOURCE_CPU)
#: Kineto activity types that are GPU work (not the GPU span of a ``record_function`` range).
DEVICE_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})

#: One profiler event: (name, device type, activity type or "", start ns, duration ns, thread, metadata json).
Event = tuple[str, str, str, int, int, int, str]
Shape = tuple[int, int, int]


@dataclass(frozen=True)
class KernelRow:
    """One kernel (or CPU op) of one call: its shortened name, launches, share of the call's time, launch shape."""

    name: str
    calls: int
    share: float
    grid: Shape | None = None
    block: Shape | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as a baseline entry and the JSON report store it."""
        row: dict[str, Any] = {"name": self.name, "calls": self.calls, "share": round(self.share, 3)}
        if self.grid is not None:
            row["grid"] = list(self.grid)
        if self.block is not None:
            row["block"] = list(self.block)
        return row


@dataclass(frozen=True)
class KernelSignature:
    """The kernels of one call of a step, heaviest first, and the digest of all of them."""

    source: str
    digest: str
    rows: tuple[KernelRow, ...]
    launches: int

    def metric(self, step: str) -> Metric:
        """``<step>.kernels``: the digest as its value, the rows in ``extra`` (informational, never judged)."""
        extra = {
            "kernels": [row.to_dict() for row in self.rows[:TOP_KERNELS]],
            "all_kernels": [row.to_dict() for row in self.rows],
            "launches": self.launches,
            "distinct": len(self.rows),
            "source": self.source,
        }
        return Metric(f"{step}.kernels", self.digest, "", "equal", KIND_SIGNATURE, judged=False, extra=extra)


def short_name(name: str, device: bool = True) -> str:
    """A kernel's name as reports show it: no return type, parameter list or namespaces; at most :data:`MAX_NAME`.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, ...>(int, ...)`` ->
    ``vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, ...>``; cuBLAS/cuDNN names (``nvjet_sm90_...``) stay
    whole. A CPU op (``aten::addmm``) keeps its namespace.
    """
    text = " ".join(name.split())
    if device:
        text = text.removeprefix("void ").replace("(anonymous namespace)::", "")
        depth = 0
        for index, char in enumerate(text):
            depth += {"<": 1, ">": -1}.get(char, 0)
            if char == "(" and depth == 0 and index > 0:
                text = text[:index].rstrip()
                break
        text = re.sub(r"\b[A-Za-z_]\w*::", "", text).replace(" >", ">")
    return text if len(text) <= MAX_NAME else text[: MAX_NAME - 3] + "..."


def _shape(metadata: str, key: str) -> Shape | None:
    """``grid`` or ``block`` of a kernel from its profiler metadata (``"grid": [66, 1, 1]``), None where absent."""
    found = re.search(rf'"{key}"\s*:\s*\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]', metadata or "")
    return (int(found.group(1)), int(found.group(2)), int(found.group(3))) if found else None


def device_work(events: Sequence[Event]) -> list[Event]:
    """The GPU work among ``events``: a CUDA event of a :data:`DEVICE_WORK` activity; where torch reports no
    activity types, a CUDA event whose name is no CPU event's (not the GPU span of a ``record_function``)."""
    cpu_names = {event[0] for event in events if event[1] == "CPU"}
    return [e for e in events if e[1] == "CUDA" and (e[2] in DEVICE_WORK if e[2] else e[0] not in cpu_names)]


def cpu_ops(events: Sequence[Event]) -> list[tuple[Event, int]]:
    """The CPU ops among ``events`` with their self time in ns (their duration less that of the ops inside them,
    on the same thread); ``record_function`` ranges and memory events are not ops."""
    ops = [e for e in events if e[1] == "CPU" and (e[2] == "cpu_op" if e[2] else "::" in e[0])]
    ops.sort(key=lambda e: (e[5], e[3], -e[4]))
    self_ns = [e[4] for e in ops]
    stack: list[int] = []
    for index, (_, _, _, start, _, thread, _) in enumerate(ops):
        while stack and (ops[stack[-1]][5] != thread or start >= ops[stack[-1]][3] + ops[stack[-1]][4]):
            stack.pop()
        if stack:
            self_ns[stack[-1]] -= ops[index][4]
        stack.append(index)
    return [(op, max(0, own)) for op, own in zip(ops, self_ns, strict=True)]


def signature_of(events: Sequence[Event], device: bool) -> KernelSignature | None:
    """The signature of one call from its profiler events (None when the call launched nothing)."""
    timed = [(e, e[4]) for e in device_work(events)] if device else cpu_ops(events)
    if not timed:
        return None
    total = sum(ns for _, ns in timed) or 1
    names: dict[str, list[tuple[Event, int]]] = {}
    for event, ns in timed:
        names.setdefault(event[0], []).append((event, ns))
    digest_lines = []
    merged: dict[str, list[Any]] = {}  # short name -> [calls, ns, grids, blocks]
    for full, launches in names.items():
        grids = {_shape(e[6], "grid") for e, _ in launches} if device else {None}
        blocks = {_shape(e[6], "block") for e, _ in launches} if device else {None}
        configs = sorted(str(c) for c in grids | blocks if c is not None)
        digest_lines.append(f"{full}|x{len(launches)}|{','.join(configs)}")
        row = merged.setdefault(short_name(full, device), [0, 0, set(), set()])
        row[0], row[1] = row[0] + len(launches), row[1] + sum(ns for _, ns in launches)
        row[2] |= grids
        row[3] |= blocks
    rows = [
        KernelRow(name, calls, ns / total, _single(grids), _single(blocks))
        for name, (calls, ns, grids, blocks) in merged.items()
    ]
    rows.sort(key=lambda r: (-r.share, r.name))
    digest = hashlib.sha256("\n".join(sorted(digest_lines)).encode()).hexdigest()[:DIGEST_CHARS]
    return KernelSignature(SOURCE_CUDA if device else SOURCE_CPU, digest, tuple(rows), len(timed))


def _single(shapes: set[Shape | None]) -> Shape | None:
    """The launch shape every launch of a kernel shared (None when they differ or none was reported)."""
    return next(iter(shapes)) if len(shapes) == 1 else None


#: Most rows a stored signature may hold, and the keys a stored row may have.
MAX_STORED_ROWS = 64
ROW_KEYS = frozenset({"name", "calls", "share", "grid", "block"})


def rows_problem(rows: Any) -> str | None:
    """What is wrong with a stored signature's ``kernels`` list (None when valid)."""
    if not isinstance(rows, list) or len(rows) > MAX_STORED_ROWS:
        return f"kernels must be a list of at most {MAX_STORED_ROWS} kernels, got {type(rows).__name__}"
    for index, row in enumerate(rows):
        where = f"kernels[{index}]"
        if not isinstance(row, dict) or not isinstance(row.get("name"), str) or not row["name"].strip():
            return f"{where} must be a mapping with a 'name' (and calls, share, grid, block)"
        if set(row) - ROW_KEYS:
            return f"{where} has unknown keys {sorted(set(row) - ROW_KEYS)} (known: {sorted(ROW_KEYS)})"
        if len(row["name"]) > MAX_NAME or not row["name"].isprintable():
            return f"{where}.name must be a printable name of at most {MAX_NAME} characters"
        calls, share = row.get("calls"), row.get("share")
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
            return f"{where}.calls must be a whole number >= 1, got {calls!r}"
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
            return f"{where}.share must be a fraction in 0..1, got {share!r}"
        for key in ("grid", "block"):
            shape = row.get(key)
            if shape is not None and not (
                isinstance(shape, list) and len(shape) == 3 and all(type(n) is int and n >= 1 for n in shape)
            ):
                return f"{where}.{key} must be three whole numbers >= 1, got {shape!r}"
    return None


def digest_problem(value: Any) -> str | None:
    """What is wrong with a stored signature's ``value`` (its digest; None when valid)."""
    if not isinstance(value, str) or not DIGEST_PATTERN.fullmatch(value):
        return f"value of a kernel signature must be its {DIGEST_CHARS}-character hex digest, got {value!r:.40}"
    return None
