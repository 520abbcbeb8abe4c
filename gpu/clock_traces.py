"""Per-sample SM clock, memory clock and power around CUDA-graph replays, one fresh process per run (issue 20).

The question: which measure of a step is steady across fresh processes on a power-capped GPU whose clock moves?
For each workload (compute-, memory-, latency-bound, mixed) and each of ``--processes`` fresh processes this
loads the GPU for ``--seconds``, timing one graph replay (``--iters`` steps) per sample between CUDA events and
reading NVML (SM clock, memory clock, power, clock-event reasons) right before and after each sample. It prints,
per workload, the spread between processes of: time per step in the first 0.5 s and after 2 s, and cycles per
step (time x mean of the SM clock read around the sample) over the same windows.

    python3 gpu/clock_traces.py --out $OUT/traces.jsonl          # parent: runs the children, prints the table
    python3 gpu/clock_traces.py --child gemm                      # one process (what the parent starts)

It also reports the cost of one NVML reading of each kind (``--child nvml_cost``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import time

WORKLOADS = ("gemm", "attention", "elementwise", "small", "minillm")


class Nvml:
    """The few NVML calls this needs, through ctypes."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        assert self.lib.nvmlInit_v2() == 0
        self.h = ctypes.c_void_p()
        assert self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.h)) == 0
        self.reasons_fn = getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
            self.lib.nvmlDeviceGetCurrentClocksThrottleReasons
        )

    def clock(self, which: int = 1) -> int:
        v = ctypes.c_uint()
        self.lib.nvmlDeviceGetClockInfo(self.h, which, ctypes.byref(v))
        return int(v.value)

    def power_mw(self) -> int:
        v = ctypes.c_uint()
        self.lib.nvmlDeviceGetPowerUsage(self.h, ctypes.byref(v))
        return int(v.value)

    def reasons(self) -> int:
        v = ctypes.c_ulonglong()
        self.reasons_fn(self.h, ctypes.byref(v))
        return int(v.value)

    def read(self) -> tuple[int, int, int, int]:
        return self.clock(1), self.clock(2), self.power_mw(), self.reasons()


def make_step(name: str, scale: float = 1.0):
    import torch

    torch.manual_seed(0)
    dev = "cuda"
    if name.startswith("gemm4k:"):  # bench_verdicts' GEMM: 4096 x K @ K x 4096 bf16, operands at K 4480, sliced
        k = int(name.partition(":")[2])
        a = torch.randn(4096, 4480, device=dev, dtype=torch.bfloat16)
        b = torch.randn(4480, 4096, device=dev, dtype=torch.bfloat16)
        a_k, b_k = a[:, :k], b[:k]
        return lambda: a_k @ b_k, 12
    if name == "gemm":
        k = int(4096 * scale)
        a = torch.randn(8192, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, 8192, device=dev, dtype=torch.bfloat16)
        return lambda: torch.mm(a, b), 12
    if name == "attention":
        import torch.nn.functional as F

        q, k, v = (torch.randn(4, 32, 4096, 128, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
        g = torch.randn(4, 32, 4096, 128, device=dev, dtype=torch.bfloat16)

        def step():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return torch.autograd.grad(out, (q, k, v), g)

        return step, 2
    if name == "elementwise":
        x = torch.randn(256 * 1024 * 1024, device=dev)
        return lambda: x * 2.0 + 1.0, 10
    if name == "small":
        x = torch.randn(64 * 1024, device=dev)
        return lambda: (x * 2.0).sum(), 200
    if name == "minillm":
        sys.path.insert(0, ".")
        from perf_tests.models import GPU_TEST_CONFIG, MiniLLM, make_batch

        cfg = GPU_TEST_CONFIG
        model = MiniLLM(cfg).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
        tokens, targets = make_batch(cfg, torch.device(dev))

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(tokens)
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)

        return step, 1
    raise SystemExit(f"unknown workload {name}")


def child(name: str, seconds: float) -> None:
    import torch

    nv = Nvml()
    step, iters = make_step(name)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            step()
    torch.cuda.synchronize()
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows = []
    t0 = time.perf_counter()
    idle = nv.read()
    while time.perf_counter() - t0 < seconds:
        before = nv.read()
        start_ev.record()
        graph.replay()
        end_ev.record()
        end_ev.synchronize()
        after = nv.read()
        dt = start_ev.elapsed_time(end_ev) * 1e-3 / iters
        rows.append([round(time.perf_counter() - t0, 4), dt, *before, *after])
    print(json.dumps({"workload": name, "iters": iters, "idle": idle, "rows": rows}))


def nvml_cost() -> None:
    nv = Nvml()
    out = {}
    for label, fn in (
        ("sm_clock", lambda: nv.clock(1)),
        ("mem_clock", lambda: nv.clock(2)),
        ("power", nv.power_mw),
        ("reasons", nv.reasons),
        ("all_four", nv.read),
    ):
        fn()
        n = 2000
        t = time.perf_counter()
        for _ in range(n):
            fn()
        out[label] = (time.perf_counter() - t) / n * 1e6
    print(json.dumps({"nvml_cost_us": out}))


def window(rows, lo, hi):
    picked = [r for r in rows if lo <= r[0] < hi]
    if not picked:
        return None, None
    times = [r[1] for r in picked]
    cycles = [r[1] * (r[2] + r[6]) / 2 * 1e6 for r in picked]
    return statistics.median(times), statistics.median(cycles)


def parent(args) -> None:
    cost = subprocess.run([sys.executable, __file__, "--child", "nvml_cost"], capture_output=True, text=True)
    print(cost.stdout.strip() or cost.stderr[-2000:])
    results = {}
    with open(args.out, "w") as fh:
        names = args.workloads.split(",")
        order = (
            [(n, p) for p in range(args.processes) for n in names]
            if args.interleave
            else [(n, p) for n in names for p in range(args.processes)]
        )
        for name, p in order:
            if args.gap:
                time.sleep(args.gap)
            run = subprocess.run(
                [sys.executable, __file__, "--child", name, "--seconds", str(args.seconds)],
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                print(name, "failed:", run.stderr[-1500:])
                continue
            rec = json.loads(run.stdout.strip().splitlines()[-1])
            rec["process"] = p
            fh.write(json.dumps(rec) + "\n")
            results.setdefault(name, []).append(rec)
    print(
        f"{'workload':12} {'proc':>4} {'t<0.5s us':>10} {'t>2s us':>9} {'cyc<0.5s k':>10} {'cyc>2s k':>9} "
        f"{'sm0':>5} {'sm>2s':>6} {'mem':>5} {'W>2s':>5} reasons"
    )
    for name, recs in results.items():
        early_t, late_t, early_c, late_c = [], [], [], []
        for rec in recs:
            rows = rec["rows"]
            et, ec = window(rows, 0, 0.5)
            lt, lc = window(rows, 2.0, 99)
            late = [r for r in rows if r[0] >= 2.0] or rows
            reasons = 0
            for r in late:
                reasons |= r[5] | r[9]
            print(
                f"{name:12} {rec['process']:>4} {et * 1e6:10.1f} {lt * 1e6:9.1f} {ec / 1e3:10.1f} {lc / 1e3:9.1f} "
                f"{rows[0][2]:5d} {statistics.median(r[2] for r in late):6.0f} {late[0][3]:5d} "
                f"{statistics.median(r[4] for r in late) / 1e3:5.0f} {hex(reasons)}"
            )
            early_t.append(et)
            late_t.append(lt)
            early_c.append(ec)
            late_c.append(lc)

        def spread(v):
            return (max(v) / min(v) - 1) * 100 if v and min(v) > 0 else float("nan")

        print(
            f"{name:12} SPREAD between processes: time early {spread(early_t):.2f}% late {spread(late_t):.2f}% "
            f"all-early-vs-late {spread(early_t + late_t):.2f}% | cycles early {spread(early_c):.2f}% "
            f"late {spread(late_c):.2f}% all {spread(early_c + late_c):.2f}%"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--seconds", type=float, default=3.5)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--gap", type=float, default=2.0)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--out", default="traces.jsonl")
    ap.add_argument("--interleave", action="store_true", help="alternate the workloads process by process")
    args = ap.parse_args()
    if args.child == "nvml_cost":
        nvml_cost()
    elif args.child:
        child(args.child, args.seconds)
    else:
        parent(args)


if __name__ == "__main__":
    main()
