"""The import path of an A-side worker: REF's source roots first, so ``import pkg`` finds REF's code.

Flat and ``src/`` layouts are covered by putting the worktree's root and ``src/`` first on
``PYTHONPATH``; every ``sys.path`` entry of this process that lies inside the working tree
is mapped to the same place in the worktree. A package installed in editable mode from the
working tree (setuptools' ``__editable__`` finder, a ``.pth`` path entry) comes after
``PYTHONPATH`` on the import path, so REF's copy wins; the worker still checks where each
module came from (:mod:`.worker_plugin`) and the report says when it was the working tree.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def editable_mappings(meta_path: Iterable[object] | None = None) -> dict[str, Path]:
    """Packages installed in editable mode through setuptools' finder: name -> source folder."""
    found: dict[str, Path] = {}
    for finder in sys.meta_path if meta_path is None else meta_path:
        module = sys.modules.get(getattr(finder, "__module__", "") or "")
        mapping = getattr(module, "MAPPING", None)
        if isinstance(mapping, dict) and str(getattr(module, "__name__", "")).startswith("__editable__"):
            found.update({str(k): Path(str(v)) for k, v in mapping.items()})
    return found


def map_into(path: Path, tree: Path, worktree: Path) -> Path | None:
    """``path`` (inside the working tree ``tree``) at the same place in ``worktree``; None when outside."""
    resolved = path.resolve()
    if not _inside(resolved, tree):
        return None
    return worktree / resolved.relative_to(tree)


def a_side_paths(tree: Path, worktree: Path, sys_path: list[str], editable: dict[str, Path]) -> list[str]:
    """Folders to put first on the A worker's import path, most specific first, existing ones only."""
    wanted: list[Path] = [worktree / "src", worktree]
    for entry in sys_path:
        mapped = map_into(Path(entry or "."), tree, worktree)
        if mapped is not None:
            wanted.append(mapped)
    for source in editable.values():
        mapped = map_into(source.parent, tree, worktree)
        if mapped is not None:
            wanted.append(mapped)
    result: list[str] = []
    for path in wanted:
        if path.is_dir() and str(path) not in result:
            result.append(str(path))
    return result


def pythonpath(first: list[str], existing: str, tree: Path | None = None) -> str:
    """``first`` then the ``existing`` PYTHONPATH's entries (those inside ``tree`` dropped)."""
    rest = [e for e in existing.split(os.pathsep) if e]
    if tree is not None:
        rest = [e for e in rest if not _inside(Path(e).resolve(), tree)]
    ordered: list[str] = []
    for entry in [*first, *rest]:
        if entry not in ordered:
            ordered.append(entry)
    return os.pathsep.join(ordered)


def package_dirs(tree: Path, roots: Iterable[Path], editable: dict[str, Path]) -> list[Path]:
    """Top-level package folders of the working tree (under its source roots, or installed editable from it)."""
    found: list[Path] = []
    for root in roots:
        if not root.is_dir():
            continue
        for child in sorted(root.iterdir()):
            if child.is_dir() and not child.name.startswith(".") and (child / "__init__.py").is_file():
                if child.name not in ("tests", "test", "docs", "benchmarks") and child not in found:
                    found.append(child)
    for source in editable.values():
        resolved = source.resolve()
        if resolved.is_dir() and _inside(resolved, tree) and resolved not in found:
            found.append(resolved)
    return found


def editable_warnings(tree: Path, worktree: Path, editable: dict[str, Path]) -> list[str]:
    """Packages installed editable from the working tree that REF does not have at the same place."""
    lines = []
    for name, source in sorted(editable.items()):
        mapped = map_into(source, tree, worktree)
        if mapped is not None and not mapped.exists():
            lines.append(
                f"package {name!r} is installed in editable mode from {source}, but REF has no "
                f"{mapped.relative_to(worktree)}: the A side would import the working tree's copy"
            )
    return lines
