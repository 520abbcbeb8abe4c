"""How many kernels an ncu window replays: each ATen operation's kernels, and the choice of operations under a cap.

ncu replays every kernel of a window, so its cost follows the kernels, not the operations: one ``_foreach_*`` or
``_fused_*`` operation of an optimizer launches a kernel per group of tensors. The ncu child cannot ask CUPTI (ncu
holds it), so each operation's kernels are counted from its arguments during the ranking call
(:func:`kernels_of`): a multi-tensor operation launches as PyTorch's multi-tensor apply does
(:func:`multi_tensor_launches`), any other operation one kernel. :func:`pick_within_cap` then takes the longest
operations by device time while their kernels fit the cap (ini key ``gpuperf_ncu_max_kernels``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Default of ``gpuperf_ncu_max_kernels``: at most this many kernels are replayed in one window.
DEFAULT_MAX_KERNELS = 32
#: Elements one block of a multi-tensor kernel handles.
CHUNK_ELEMENTS = 65536
#: Blocks of one multi-tensor launch.
MAX_BLOCKS = 320
#: Tensors of one multi-tensor launch, by the number of tensor lists it reads and writes (its depth).
MAX_TENSORS = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}
#: Name parts of the operations that run through multi-tensor apply.
MULTI_TENSOR_WORDS = ("_foreach_", "_fused_adam", "_fused_adamw", "_fused_sgd", "_fused_adagrad")


def multi_tensor_launches(numels: Sequence[int], depth: int) -> int:
    """Kernels one multi-tensor operation launches over tensors of ``numels`` elements, reading ``depth`` lists.

    A launch takes chunks until its blocks are full or its tensor slots are (a tensor whose last chunk is in)."""
    max_tensors = MAX_TENSORS.get(depth, MAX_TENSORS[5])
    launches = blocks = tensors = 0
    pending = False
    for numel in numels:
        chunks = max(1, -(-int(numel) // CHUNK_ELEMENTS))
        tensors += 1
        for chunk in range(chunks):
            blocks += 1
            pending = True
            last_chunk = chunk == chunks - 1
            if blocks == MAX_BLOCKS or (tensors == max_tensors and last_chunk):
                launches += 1
                blocks, pending = 0, False
                tensors = 0 if last_chunk else 1
    return launches + (1 if pending else 0)


def _tensor_lists(args: Sequence[Any]) -> list[list[Any]]:
    """The arguments that are lists of tensors (a multi-tensor operation's lists)."""
    lists = []
    for arg in args:
        if isinstance(arg, (list, tuple)) and arg and all(hasattr(t, "numel") for t in arg):
            lists.append(list(arg))
    return lists


def kernels_of(name: str, args: Sequence[Any] = ()) -> int:
    """The kernels the ATen operation ``name`` launches with ``args``: a multi-tensor operation's launches over
    its longest tensor list, else 1. An argument that cannot be read counts as one kernel."""
    if not any(word in name for word in MULTI_TENSOR_WORDS):
        return 1
    try:
        lists = _tensor_lists(args)
        if not lists:
            return 1
        longest = max(lists, key=len)
        return max(1, multi_tensor_launches([int(t.numel()) for t in longest], len(lists)))
    except Exception:  # noqa: BLE001 - an estimate: an unreadable argument counts as one kernel
        return 1


def pick_within_cap(
    durations: Sequence[float], kernels: Sequence[int], max_kernels: int, top_ops: int, coverage: float
) -> tuple[list[int], float, int]:
    """The longest operations whose kernels fit ``max_kernels`` (0: no cap), at most ``top_ops`` (0: no limit),
    stopping once they cover ``coverage`` of the operations' time; an operation that does not fit in the room left
    is passed over for shorter ones. Returns their indexes in call order, their share of the time and their kernels.
    """
    total = sum(max(d, 0.0) for d in durations)
    chosen: list[int] = []
    covered, count = 0.0, 0
    for index in sorted(range(len(durations)), key=lambda i: -durations[i]):
        if (top_ops and len(chosen) >= top_ops) or (total > 0 and covered >= coverage * total):
            break
        if max_kernels and count + kernels[index] > max_kernels:
            continue
        chosen.append(index)
        covered += max(durations[index], 0.0)
        count += kernels[index]
    return sorted(chosen), (covered / total if total > 0 else 1.0), count
