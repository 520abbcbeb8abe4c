"""Re-judge a roofline calibration run offline: the agreement with ncu at other latency lines (no GPU, no torch).

Reads the ``roofline_calib.json`` that ``gpu/roofline_calib.py`` wrote (each op's counted FLOPs and
bytes, time, roofs, and ncu's verdict), classifies every op again with the plugin's
``classify`` at each latency line, and prints the per-op table (analytic next to ncu) at one
line plus the sweep::

    python3 gpu/roofline_sweep.py /work/notes/gpu1/roofline_calib.json --line 0.66 --line 0.3

``--dram-roof best-streaming`` raises each op's DRAM roof to the best bandwidth a large
streaming op (no FLOPs, far larger than the cache) reached in the run: what the best-of-patterns
DRAM calibration measures (its add and sum patterns are those ops), for runs made before it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_gpuperf.profiling.roofline import DEFAULT_LATENCY_SHARE, DRAM, Roofs, classify

Row = dict[str, Any]
#: The latency lines of the sweep: 30% to 90% in steps of 5%, plus the default.
SWEEP = tuple(sorted({round(0.3 + 0.05 * i, 2) for i in range(13)} | {DEFAULT_LATENCY_SHARE}))


def best_streaming(analytic: dict[str, Row]) -> float:
    """The best bandwidth a DRAM-streaming op (no FLOPs, over 100 MB) reached in the run (0 without one)."""
    rates = [
        float(r["bytes"]) / float(r["seconds"])
        for r in analytic.values()
        if float(r["flops"]) == 0 and float(r["working_set"]) > 1e8 and r["roof_level"] == DRAM
    ]
    return max(rates, default=0.0)


def rejudge(row: Row, line: float, dram_floor: float = 0.0) -> Row:
    """One op classified again at latency line ``line`` with its DRAM roof raised to at least ``dram_floor``."""
    bandwidth = float(row["peak_bandwidth"])
    if row["roof_level"] == DRAM:
        bandwidth = max(bandwidth, dram_floor)
    roofs = Roofs(float(row["peak_flops"]), bandwidth)
    verdict = classify(float(row["flops"]), float(row["bytes"]), float(row["seconds"]), roofs, line)
    return {**row, **verdict.as_extra(), "roof_level": row["roof_level"], "bound": verdict.bound}


def judged(data: dict[str, Any], line: float, dram_floor: float = 0.0) -> dict[str, Row]:
    """Every op of the run classified again at ``line``."""
    return {name: rejudge(row, line, dram_floor) for name, row in data["analytic"].items()}


def agreement(rows: dict[str, Row], ncu: dict[str, Row]) -> tuple[int, int, list[str]]:
    """(ops agreeing with ncu, ops ncu judged, the names that disagree)."""
    both = [name for name in rows if name in ncu]
    off = [name for name in both if rows[name]["bound"] != ncu[name]["bound"]]
    return len(both) - len(off), len(both), off


def roof_used(row: Row) -> str:
    """The roof the share is taken against: ``compute`` when the FLOPs decide, else the memory level (DRAM, L2)."""
    if float(row["compute_share"]) >= float(row["bandwidth_share"]) and float(row["flops"]) > 0:
        return "compute"
    return str(row["roof_level"])


def table(rows: dict[str, Row], ncu: dict[str, Row]) -> list[str]:
    """The Markdown table: analytic next to ncu per op, and the agreement count."""
    lines = [
        "| op | time (us) | ncu kernels (us) | AI (FLOP/B) | roof used | roof share | analytic | SM % | memory % "
        "| DRAM % | ncu | agree |",
        "| --- | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for name, row in rows.items():
        got = ncu.get(name)
        share = "over 100% (counting error)" if row["over_roof"] else f"{float(row['roof_share']):.0%}"
        head = (
            f"| {name} | {float(row['seconds']) * 1e6:.1f} | "
            f"{float(got['kernel_seconds']) * 1e6:.1f} | "
            * bool(got)
            + "- | " * (not got)
            + f"{float(row['arithmetic_intensity']):.3g} | {roof_used(row)} | {share} | {row['bound']} | "
        )
        if got:
            same = got["bound"] == row["bound"]
            lines.append(
                head + f"{float(got['sm_pct']):.1f} | {float(got['memory_pct']):.1f} | {float(got['dram_pct']):.1f} | "
                f"{got['bound']} ({got['rule']}) | {'yes' if same else '**no**'} |"
            )
        else:
            lines.append(head + "- | - | - | - | - |")
    agree, total, _ = agreement(rows, ncu)
    line = float(next(iter(rows.values()))["latency_share"]) if rows else DEFAULT_LATENCY_SHARE
    lines.append(f"\nAgreement: **{agree} of {total}** ops (latency line {line:.0%}).")
    return lines


def sweep_lines(data: dict[str, Any], dram_floor: float = 0.0, lines: tuple[float, ...] = SWEEP) -> list[str]:
    """The sweep as Markdown: agreement and the disagreeing ops at each latency line."""
    out = ["| latency line | agree | disagree |", "| ---: | ---: | --- |"]
    for line in lines:
        agree, total, off = agreement(judged(data, line, dram_floor), data["ncu"])
        out.append(f"| {line:.0%} | {agree} of {total} | {', '.join(off)} |")
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the per-op table at each ``--line`` and the sweep over 30..90%."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="roofline_calib.json of a calibration run")
    parser.add_argument(
        "--line", type=float, action="append", help=f"table at this line (default {DEFAULT_LATENCY_SHARE})"
    )
    parser.add_argument("--dram-roof", choices=("measured", "best-streaming"), default="measured")
    args = parser.parse_args(argv)
    try:
        data = json.loads(args.json.read_text())
        if not isinstance(data.get("analytic"), dict) or not isinstance(data.get("ncu"), dict):
            raise KeyError("analytic and ncu")
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        print(f"error: {args.json} is not a roofline_calib.json ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    floor = best_streaming(data["analytic"]) if args.dram_roof == "best-streaming" else 0.0
    if floor:
        print(f"DRAM roof raised to the best streaming op of the run: {floor / 1e12:.3g} TB/s\n")
    for line in args.line or [DEFAULT_LATENCY_SHARE]:
        print("\n".join(table(judged(data, line, floor), data["ncu"])) + "\n")
    print("\n".join(sweep_lines(data, floor)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
