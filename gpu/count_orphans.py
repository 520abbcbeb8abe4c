"""Print how many rank, launcher or pytest processes carrying ``$GPUPERF_TEST_TAG`` are still alive.

Used by gpu/distributed.sh and gpu/multigpu.sh after their fault tests: ``orphans: 0`` is the pass line.
"""

import os
import pathlib

tag, left = os.environ["GPUPERF_TEST_TAG"].encode(), []
for proc in pathlib.Path("/proc").glob("[0-9]*"):
    try:
        if tag in (proc / "environ").read_bytes():
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "torch.distributed" in cmd or "distributed.worker" in cmd or "pytest" in cmd:
                left.append(f"{proc.name}: {cmd[:120]}")
    except OSError:
        pass
print(f"orphans: {len(left)} (rank, launcher or pytest processes still alive)", *left, sep="\n")
