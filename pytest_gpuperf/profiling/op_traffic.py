"""What each aten op reads and writes: :class:`OpTraffic`, the dispatch mode that adds it up.

Imports torch: only :func:`pytest_gpuperf.profiling.counting.count_step` loads it, under ``--gpuperf``.
Per op, :class:`OpTraffic` counts the bytes it reads and writes:

* **allocation-only ops move nothing** (``empty``, ``empty_like``, ``new_empty``,
  ``empty_strided``, ``resize_`` ...): a buffer that is allocated but never touched
  costs no bandwidth;
* **views and aliases move nothing** (``view``, ``t``, ``expand``, ``_unsafe_view``, a
  reshape that is a view; a reshape that has to copy is a real ``clone``);
* **gathers count the rows taken** (``embedding``, ``index_select``, ``gather``,
  ``index``): the output's bytes are read from the table and written, plus the indices,
  never the whole table;
* **scatters into a tensor in place** (``index_put_``, ``index_add_``, ``scatter_`` ...)
  count the rows written (and read back when they accumulate), never the whole target;
* **in-place ops count the mutated tensor once per direction**: once read when the op
  reads it (``add_``, ``mul_``), once written, never again as the op's output; ops
  that only overwrite (``copy_``, ``fill_``, ``zero_``, ``out=`` arguments, random
  fills) count it as written only;
* every other op reads its distinct input tensors and writes its outputs, each at
  most its storage's size (a broadcast operand counts its storage once);
* **attention with a causal mask counts the FLOPs it does**: the score and value
  matmuls of ``is_causal=True`` attention cover only the unmasked
  ``sum(min(i + 1, S_k))`` of the ``S_q x S_k`` pairs (about half). CPU attention,
  which FlopCounterMode does not know, is counted with the same formula.

It also keeps the largest bytes touched per storage (the step's working set) and the
dtypes that moved the most bytes (matmul operands first).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

#: Ops that allocate (or re-point) storage without touching its bytes.
ALLOCATION_ONLY = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "empty_permuted",
        "new_empty",
        "new_empty_strided",
        "resize_",
        "resize_as_",
        "set_",
        "lift_fresh",
        "detach",
        "alias",
        "_efficientzerotensor",
    }
)
#: Gathers: (op name, name of the index argument). The output's rows are read from the source.
GATHERS = {"embedding": "indices", "index_select": "index", "gather": "index", "index": "indices", "take": "index"}
#: In-place scatters: op name -> (argument holding the written values or None for a fill, accumulates?).
SCATTERS = {
    "index_put_": ("values", True),
    "_index_put_impl_": ("values", True),
    "index_add_": ("source", True),
    "index_copy_": ("source", False),
    "index_fill_": (None, False),
    "scatter_": ("src", False),
    "scatter_add_": ("src", True),
    "scatter_reduce_": ("src", True),
}
#: In-place ops that overwrite their target without reading it.
WRITE_ONLY = frozenset(
    {"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_", "geometric_"}
)
#: Attention ops whose ``is_causal`` argument means only the lower triangle of scores is computed.
ATTENTION = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward",
    "_efficient_attention_forward",
    "_scaled_dot_product_flash_attention_for_cpu",
)
#: Names that mark an op as a matmul-like op, whose operands' dtype picks the compute roof.
MATMUL_WORDS = ("mm", "matmul", "conv", "attention", "linear", "baddbmm")


def tensor_bytes(tensor: Any) -> int:
    """Bytes of ``tensor``'s elements, at most its storage's size (an expanded tensor counts its storage once)."""
    size = tensor.numel() * tensor.element_size()
    try:
        return min(size, tensor.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # tensors without storage (sparse, meta)
        return size


def storage_key(tensor: Any) -> int | None:
    """The address of ``tensor``'s storage (None for tensors without one)."""
    try:
        ptr = int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return None
    return ptr or None


def causal_pairs(s_q: int, s_k: int) -> int:
    """Unmasked (query, key) pairs of top-left causal attention: ``sum(min(i + 1, s_k) for i < s_q)``."""
    full_rows = min(s_q, s_k)
    pairs = full_rows * (full_rows + 1) // 2
    return pairs + max(0, s_q - s_k) * s_k


def attention_flops(query: Any, key: Any, value: Any, causal: bool, backward: bool = False) -> float:
    """FLOPs of the attention matmuls, causal when asked: two forward, five backward (FlopCounterMode's formulas:
    the backward recomputes the scores, then the gradients of scores, V, Q and K)."""
    *batch, s_q, d_q = query.shape
    s_k, d_v = key.shape[-2], value.shape[-1]
    heads = 1
    for dim in batch:
        heads *= int(dim)
    pairs = causal_pairs(int(s_q), int(s_k)) if causal else int(s_q) * int(s_k)
    if backward:
        return 2.0 * heads * pairs * (3 * int(d_q) + 2 * int(d_v))
    return 2.0 * heads * pairs * (int(d_q) + int(d_v))


def _named_args(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by schema name."""
    schema = getattr(func, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    return bound


def _written_args(func: Any, bound: dict[str, Any]) -> list[Any]:
    """Tensors the op writes in place (schema arguments marked ``(a!)``)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return []
    written: list[Any] = []
    for argument in schema.arguments:
        info = argument.alias_info
        if info is not None and info.is_write and argument.name in bound:
            value = bound[argument.name]
            written += list(value) if isinstance(value, (list, tuple)) else [value]  # foreach ops mutate lists
    return written


def _tensors(tree: Any) -> list[Any]:
    """The tensors anywhere in ``tree`` (arguments, outputs)."""
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class OpTraffic(TorchDispatchMode):
    """Adds up the bytes each aten op reads and writes (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0.0
        self.ops = 0
        self.by_op: dict[str, float] = {}
        self.storages: dict[int, int] = {}
        self.extra_flops = 0.0
        self.causal_removed = 0.0
        self.matmul_dtypes: dict[str, float] = {}
        self.tensor_dtypes: dict[str, float] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._overloadpacket.__name__ if hasattr(func, "_overloadpacket") else str(func)
        if name in ALLOCATION_ONLY or getattr(func, "is_view", False):
            return out
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        sources = {storage_key(t) for t in inputs} - {None}
        if outputs and not func._schema.is_mutable and all(storage_key(t) in sources for t in outputs):
            return out  # returns its input's storage (_unsafe_view, a no-op contiguous): no traffic
        bound = _named_args(func, tuple(args), kwargs)
        accesses = self._accesses(name, func, bound, inputs, outputs)
        moved = float(sum(nbytes * times for _, nbytes, times in accesses))
        self.ops += 1
        self.bytes += moved
        self.by_op[name] = self.by_op.get(name, 0.0) + moved
        for tensor, nbytes, _ in accesses:
            key = storage_key(tensor)
            if key is not None:
                self.storages[key] = max(self.storages.get(key, 0), int(nbytes))
        self._attention(name, bound)
        self._dtypes(name, inputs, moved)
        return out

    def _accesses(
        self, name: str, func: Any, bound: dict[str, Any], inputs: list[Any], outputs: list[Any]
    ) -> list[tuple[Any, float, float]]:
        """(tensor, bytes of it touched, times) per tensor one op reads or writes."""
        if name in GATHERS:
            index = _tensors(bound.get(GATHERS[name]))
            source = next((t for t in inputs if all(t is not i for i in index)), None)
            taken = float(sum(tensor_bytes(t) for t in outputs))
            found = [(t, float(tensor_bytes(t)), 1.0) for t in index + outputs]
            return found + ([(source, taken, 1.0)] if source is not None else [])
        written = [t for t in _written_args(func, bound) if isinstance(t, torch.Tensor)]
        if name in SCATTERS and written:
            return self._scatter(name, bound, inputs, written[0])
        seen: set[int] = set()
        found = []
        written_ids = {id(t) for t in written}
        for tensor in inputs:
            if id(tensor) in seen:
                continue
            seen.add(id(tensor))
            times = 1.0
            if id(tensor) in written_ids and not (name in WRITE_ONLY or bound.get("out") is tensor):
                times = 2.0  # read and written back in place
            found.append((tensor, float(tensor_bytes(tensor)), times))
        for tensor in outputs:
            if id(tensor) not in seen:
                seen.add(id(tensor))
                found.append((tensor, float(tensor_bytes(tensor)), 1.0))
        return found

    def _scatter(
        self, name: str, bound: dict[str, Any], inputs: list[Any], target: Any
    ) -> list[tuple[Any, float, float]]:
        """An in-place scatter touches the rows it writes (read back too when it accumulates) and its index."""
        values_arg, accumulates = SCATTERS[name]
        values = _tensors(bound.get(values_arg)) if values_arg else []
        index = [t for t in inputs if t is not target and t.dtype in (torch.int64, torch.int32, torch.bool)]
        rows = float(sum(tensor_bytes(t) for t in values))
        if values_arg is None:  # index_fill_: the filled rows of the target
            dim = int(bound.get("dim", 0))
            row = target.numel() // max(1, target.shape[dim]) if target.dim() else 1
            rows = float(sum(t.numel() for t in index) * row * target.element_size())
        found = [(t, float(tensor_bytes(t)), 1.0) for t in values + index]
        return [*found, (target, rows, 2.0 if accumulates else 1.0)]

    def _attention(self, name: str, bound: dict[str, Any]) -> None:
        """Causal attention does about half the FLOPs FlopCounterMode counts; CPU attention is not counted."""
        base = name.removesuffix("_backward")
        if base not in ATTENTION:
            return
        query, key, value = bound.get("query"), bound.get("key"), bound.get("value")
        if not all(isinstance(t, torch.Tensor) for t in (query, key, value)):
            return
        backward = name.endswith("_backward")
        causal = bool(bound.get("is_causal", False))
        full = attention_flops(query, key, value, False, backward)
        done = attention_flops(query, key, value, causal, backward)
        if base == "_scaled_dot_product_flash_attention_for_cpu":
            self.extra_flops += done  # FlopCounterMode has no formula for it
        else:
            self.causal_removed += full - done

    def _dtypes(self, name: str, inputs: list[Any], moved: float) -> None:
        if inputs and any(word in name for word in MATMUL_WORDS):
            key = str(inputs[-1].dtype).replace("torch.", "")
            self.matmul_dtypes[key] = self.matmul_dtypes.get(key, 0.0) + moved
        for tensor in inputs:
            if tensor.is_floating_point():
                key = str(tensor.dtype).replace("torch.", "")
                self.tensor_dtypes[key] = self.tensor_dtypes.get(key, 0.0) + tensor_bytes(tensor)
