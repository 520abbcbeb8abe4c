"""Turn a :class:`PoolOutcome` (or in-place results) into the failing test's message, with the evidence."""

from __future__ import annotations

from pytest_gpuperf.distributed.tasks import STATUS_ERROR, STATUS_OOM, STATUS_SKIP, RankResult
from pytest_gpuperf.units import format_value

#: How many of a dead rank's last output lines the failure message quotes (all of it is in the report sections).
LAST_LINES = 40


def _memory_lines(result: RankResult) -> list[str]:
    names = {
        "max_memory_allocated": "peak allocated (torch.cuda.max_memory_allocated)",
        "max_memory_reserved": "peak reserved (torch.cuda.max_memory_reserved)",
        "memory_allocated": "allocated at failure",
        "total_memory": "device total",
        "peak_rss": "peak RSS of the rank process",
    }
    return [f"    {names.get(k, k)}: {format_value(v, 'B')}" for k, v in result.memory.items()]


def describe_failure(
    node_id: str,
    world_size: int,
    results: dict[int, RankResult],
    hung: list[int] | None = None,
    died: list[int] | None = None,
    stacks: dict[int, str] | None = None,
    timeout: float | None = None,
    launcher_log: str = "",
    grace: float | None = None,
    output: dict[int, tuple[str, str]] | None = None,
) -> str | None:
    """The failure text of a distributed test, or None when every rank passed.

    ``timeout``: the test's limit ran out; ``grace``: the other ranks' wait after one failed ran out;
    ``output``: each rank's (stdout, stderr) during the test: a dead rank's last lines are quoted.
    """
    hung, died, stacks, output = hung or [], died or [], stacks or {}, output or {}
    parts: list[str] = []
    for rank in sorted(results):
        result = results[rank]
        if result.status == STATUS_OOM:
            parts.append(f"rank {rank} of {world_size} ran out of memory; its peak numbers:")
            parts.extend(_memory_lines(result))
            parts.append(_indent(result.traceback))
        elif result.status == STATUS_ERROR:
            parts.append(f"rank {rank} of {world_size} raised:")
            parts.append(_indent(result.traceback))
    if hung:
        ranks = ", ".join(map(str, hung))
        if timeout is not None:
            parts.append(
                f"rank(s) {ranks} of {world_size} did not finish within {timeout:g} s (a hung collective?); "
                "raise the limit with @pytest.mark.gpuperf_distributed(timeout=...) or gpuperf_dist_timeout. "
                "Their stacks:"
            )
        else:
            waited = f"within {grace:g} s " if grace is not None else ""
            parts.append(
                f"rank(s) {ranks} of {world_size} did not finish {waited}after a rank failed (waiting in a "
                "collective for it?). Their stacks:"
            )
        for rank in hung:
            parts.append(f"  --- rank {rank} ---")
            parts.append(_indent(stacks.get(rank, "(no stack)")))
    if died:
        parts.append(
            f"rank(s) {', '.join(map(str, sorted(died)))} of {world_size} died without reporting "
            "(killed by a signal such as the kernel's OOM killer, os._exit, or a crash)."
        )
        for rank in sorted(died):
            out, err = output.get(rank, ("", ""))
            last = "\n".join((out + err).rstrip().splitlines()[-LAST_LINES:])
            parts.append(f"  --- rank {rank}'s last output ---")
            parts.append(_indent(last or "(it printed nothing)"))
        parts.append("  --- the launcher's output ---")
        parts.append(_indent(launcher_log or "(empty)"))
    if not parts:
        return None
    return f"{node_id}: distributed test failed on {world_size} rank(s)\n" + "\n".join(parts)


def skip_reason(results: dict[int, RankResult]) -> str | None:
    """A rank's ``pytest.skip`` message when every rank that answered skipped, else None."""
    if results and all(r.status == STATUS_SKIP for r in results.values()):
        return next(iter(results.values())).traceback
    return None


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.rstrip().splitlines())
