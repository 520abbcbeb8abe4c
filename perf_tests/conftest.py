"""Perf-suite settings.

CPU work runs on one torch thread (``GPUPERF_CPU_THREADS`` overrides): on a shared 2-core CI runner two threads
wait on each other whenever a neighbour takes a core, which made the same CPU step read up to 2x slower from one
run to the next; one thread keeps the CPU baselines comparable between runs. GPU work is unaffected.
"""

from __future__ import annotations

import os

import torch

torch.set_num_threads(int(os.environ.get("GPUPERF_CPU_THREADS", "1")))
