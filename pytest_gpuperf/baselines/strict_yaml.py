"""A strict safe YAML reader for baseline files: one meaning per key, no aliases, bounded input.

The safe loader alone lets a baseline say two things at once and keeps the last: a
second ``value:`` line, a repeated metric, a repeated test block or a trailing
``tests: {}`` each switched a gate off while the diff showed an innocent line. And an
alias bomb (a few KB of ``&a [*b, *b, ...]``) expands to gigabytes. So the reader here:

* refuses anchors, aliases and merge keys (``<<``) with the line they are on;
* refuses a key repeated in any mapping, at any level, naming both lines;
* refuses a mapping key that is not a plain scalar, and an integer of more than
  :data:`MAX_INT_DIGITS` digits (a 400-digit count is no measurement; a 5,000-digit one
  would fail inside Python's ``int()`` with no line);
* refuses a list of more than :data:`MAX_LIST_ITEMS` items, a mapping of more than
  :data:`MAX_MAPPING_ITEMS` keys and nesting deeper than :data:`MAX_DEPTH`, walking the events
  before any node tree is built when the text could hold many nodes (an unknown field's
  32 MiB list cost 152 s and 6 GB to compose);
* reads a file only when it is a regular file (a FIFO or ``/dev/zero`` behind a
  symlink is refused at once, never read) and at most ``cap + 1`` bytes of it, whatever
  ``stat`` says.

Errors are :class:`StrictYamlError` with a line number; the baseline reader adds the file.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_gpuperf.validate import MAX_INT_DIGITS  # the writer refuses the same (validate._scalar)

#: Most items of one list (a baseline keeps ~30 samples; more is a broken or hostile file), of one mapping
#: (the ``tests`` mapping of a large suite stays far below) and the deepest nesting read.
MAX_LIST_ITEMS = 10_000
MAX_MAPPING_ITEMS = 200_000
MAX_DEPTH = 32
#: Above this many possible nodes (commas, newlines, brackets) the text is walked event by event, with the
#: limits above, before a node tree is composed: a 32 MiB list in an unknown field cost 152 s and 6 GB to compose.
_EVENT_PASS_ABOVE = 200_000
_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"


class StrictYamlError(ValueError):
    """The text is not acceptable YAML for a baseline file; ``line`` is 1-based (None when unknown)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)


class NotARegularFile(OSError):
    """The path names a FIFO, a device, a socket or a directory: never read."""


class TooLarge(OSError):
    """The file holds more than the cap (``size`` is what was read: at most cap + 1 bytes)."""

    def __init__(self, message: str, size: int) -> None:
        self.size = size
        super().__init__(message)


def yaml_module() -> ModuleType:
    """The ``yaml`` package whose node, event and error classes the libyaml parser builds and raises.

    That is ``import yaml`` except after ``yaml`` was dropped from ``sys.modules`` and imported again in the
    same process (pytester's in-process runs drop every module the run imported first). The libyaml binding
    ``yaml._yaml`` is a C extension, loaded once per process: a second import hands back the first module,
    still bound to the first ``yaml`` package's classes. The new package's ``CSafeLoader`` would then compose
    nodes of the old classes, which its resolver does not recognise (every tag None: "could not determine a
    constructor for the tag None"), and raise old error classes a ``yaml.YAMLError`` clause does not catch.
    Reading with the package the binding belongs to keeps the parser, resolver, constructor, the node and
    event classes and the errors of one piece; without that package, the pure-Python loader of ``yaml`` is.
    """
    import yaml

    binding = sys.modules.get("yaml._yaml")
    if binding is None or getattr(binding, "ScalarNode", yaml.ScalarNode) is yaml.ScalarNode:
        return yaml  # one yaml package in this process (or no libyaml): the usual case
    bound = getattr(binding, "yaml", None)
    if isinstance(bound, ModuleType) and getattr(bound, "ScalarNode", None) is binding.ScalarNode:
        return bound
    return yaml


def _loader_class(yaml: ModuleType) -> type:
    """libyaml's safe loader of ``yaml`` when it is of one piece with ``yaml``'s classes, else the pure-Python one."""
    loader = getattr(yaml, "CSafeLoader", None)
    binding = sys.modules.get("yaml._yaml")
    if loader is None or getattr(binding, "ScalarNode", None) is not yaml.ScalarNode:
        return yaml.SafeLoader
    return loader


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_regular_file(path: Path, cap: int) -> tuple[bytes, os.stat_result]:
    """The bytes of ``path`` (a regular file, symlinks followed) and its ``fstat``; refuses more than ``cap`` bytes.

    Opened non-blocking so a FIFO cannot hang the run; the type is checked on the open
    descriptor (no race with a swapped path); at most ``cap + 1`` bytes are read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(f"is {_kind(info.st_mode)}, not a regular file")
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:
            raise TooLarge(f"holds more than the {cap // 2**20} MiB read for a baseline", total)
        return b"".join(chunks), info
    finally:
        os.close(fd)


def _refuse_anchors(text: str, loader_class: type) -> None:
    """Refuse anchors and aliases; an event pass runs only when the text holds ``&`` or ``*`` at all."""
    if "&" not in text and "*" not in text:
        return
    yaml = yaml_module()

    loader = loader_class(text)
    try:
        while loader.check_event():
            event = loader.get_event()
            line = event.start_mark.line + 1 if event.start_mark is not None else None
            if isinstance(event, yaml.AliasEvent):
                raise StrictYamlError(f"alias *{event.anchor} (aliases and anchors are not read in a baseline)", line)
            if getattr(event, "anchor", None):
                raise StrictYamlError(f"anchor &{event.anchor} (aliases and anchors are not read in a baseline)", line)
    finally:
        loader.dispose()


def _possible_nodes(text: str) -> int:
    """An upper bound of the nodes ``text`` can compose to, counted in C (each node needs one of these)."""
    return sum(text.count(c) for c in (",", "\n", "[", "{")) + 1


def _refuse_large_collections(text: str, loader_class: type) -> None:
    """Walk the events of a text that could compose to many nodes; refuse an oversized list or mapping, or
    nesting too deep, at its line, long before the rest is read."""
    yaml = yaml_module()

    loader = loader_class(text)
    stack: list[list[Any]] = []  # [start event, items so far]
    try:
        while loader.check_event():
            event = loader.get_event()
            if stack and not isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                stack[-1][1] += 1
                start, items = stack[-1]
                mapping = isinstance(start, yaml.MappingStartEvent)
                limit = MAX_MAPPING_ITEMS * 2 if mapping else MAX_LIST_ITEMS  # a mapping counts keys and values
                if items > limit:
                    what = (
                        f"a mapping of more than {MAX_MAPPING_ITEMS} keys"
                        if mapping
                        else (f"a list of more than {MAX_LIST_ITEMS} items")
                    )
                    raise StrictYamlError(f"{what} (a baseline holds no such thing)", start.start_mark.line + 1)
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                stack.append([event, 0])
                if len(stack) > MAX_DEPTH:
                    raise StrictYamlError(f"nesting deeper than {MAX_DEPTH} levels", event.start_mark.line + 1)
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                stack.pop()
    finally:
        loader.dispose()


def check_tree(root: Any) -> None:
    """Refuse repeated keys, merge keys, non-scalar keys and over-long integers anywhere under ``root``."""
    yaml = yaml_module()

    mapping, sequence, scalar = yaml.MappingNode, yaml.SequenceNode, yaml.ScalarNode
    todo = [root]
    while todo:
        node = todo.pop()
        if isinstance(node, mapping):
            seen: dict[str, int] = {}
            for key, value in node.value:
                line = key.start_mark.line + 1
                if not isinstance(key, scalar):
                    raise StrictYamlError("a mapping key must be a plain word, not a list or mapping", line)
                if key.tag == _MERGE_TAG:
                    raise StrictYamlError("merge key '<<' (each entry must spell out its own fields)", line)
                if key.tag != _STR_TAG:
                    kind = key.tag.rpartition(":")[2]
                    raise StrictYamlError(f"a mapping key must be a word, got {key.value!r} ({kind})", line)
                first = seen.get(key.value)
                if first is not None:
                    raise StrictYamlError(
                        f"duplicate key {key.value!r} (first on line {first}; a key given twice would silently "
                        "keep only the last)",
                        line,
                    )
                seen[key.value] = line
                if isinstance(value, scalar):
                    _check_scalar(value)
                else:
                    todo.append(value)
        elif isinstance(node, sequence):
            for item in node.value:
                if isinstance(item, scalar):
                    _check_scalar(item)
                else:
                    todo.append(item)
        elif isinstance(node, scalar):
            _check_scalar(node)


def _check_scalar(node: Any) -> None:
    if node.tag == _INT_TAG and len(node.value) > MAX_INT_DIGITS:
        raise StrictYamlError(
            f"an integer of {len(node.value)} digits (more than {MAX_INT_DIGITS}; no measurement is that large)",
            node.start_mark.line + 1,
        )


def compose_strict(text: str) -> tuple[Any, Any]:
    """``(node tree, loader)`` of ``text`` after the strict checks; the caller constructs and disposes the loader.

    Raises :class:`StrictYamlError` for what the strict reader refuses and ``yaml_module().YAMLError`` for
    invalid YAML (``yaml.YAMLError`` unless ``yaml`` was imported twice in this process: see :func:`yaml_module`).
    """
    loader_class = _loader_class(yaml_module())
    _refuse_anchors(text, loader_class)
    if _possible_nodes(text) > _EVENT_PASS_ABOVE:
        _refuse_large_collections(text, loader_class)
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            check_tree(node)
    except BaseException:
        loader.dispose()
        raise
    return node, loader
