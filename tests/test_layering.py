"""The package's shape, checked: imports run down the layers of ``docs/architecture.md``, close no cycle, and stay
within the size limits (root modules, module and function lengths).

The layers are read from the table between the ``layering: begin`` / ``layering: end`` markers of
``docs/architecture.md``, so the drawing and the check cannot drift apart. Every import counts: top level, inside
functions, under ``TYPE_CHECKING``, relative ones resolved. A module the table does not place fails the test: a new
package is placed by adding its folder to one row.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_gpuperf"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

MAX_ROOT_MODULES = 16  # .py files directly in pytest_gpuperf/, __init__.py included
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_MEASURE_LINES = 30  # GpuPerf.measure reads as the sequence of its stages


@dataclass(frozen=True)
class Layers:
    """The layer table: ``rank`` 1 is the top; ``names`` by rank; ``places`` maps a path to its rank."""

    names: dict[int, str]
    places: dict[str, int]  # "plugin.py" (one module) or "ab/" (a folder) -> rank
    forbidden: tuple[tuple[str, str, str], ...]  # (importer path, imported path, why) inside one layer

    def rank(self, module: str) -> int | None:
        """The rank of a dotted module name relative to the package (``""`` is the package's ``__init__``)."""
        path = module.replace(".", "/")
        candidates = [path + ".py", path + "/__init__.py"] if path else ["__init__.py"]
        if any(c in self.places for c in candidates):
            return next(self.places[c] for c in candidates if c in self.places)
        folders = [p for p in self.places if p.endswith("/") and (path + "/").startswith(p)]
        return self.places[max(folders, key=len)] if folders else None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@lru_cache(maxsize=1)
def read_layers() -> Layers:
    """Parse the marked section of ``docs/architecture.md``: the layer table, then the rules inside a layer."""
    text = ARCHITECTURE.read_text()
    match = re.search(r"<!-- layering: begin.*?-->(.*?)<!-- layering: end -->", text, re.S)
    assert match, f"{ARCHITECTURE} has no '<!-- layering: begin -->' ... '<!-- layering: end -->' section"
    names: dict[int, str] = {}
    places: dict[str, int] = {}
    forbidden: list[tuple[str, str, str]] = []
    for line in match.group(1).splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = _cells(line)
        if cells[0].isdigit():  # | rank | layer | paths |
            rank = int(cells[0])
            names[rank] = cells[1]
            for path in re.findall(r"`([^`]+)`", cells[2]):
                assert path not in places, f"{path} is placed twice in the layer table"
                places[path] = rank
        elif cells[0].startswith("`"):  # | importer | must not import | why |
            forbidden.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    assert names and places, "the layer table of docs/architecture.md is empty"
    return Layers(names, places, tuple(forbidden))


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name relative to the package (``""`` for the root)."""
    modules = {}
    for file in PACKAGE.rglob("*.py"):
        parts = list(file.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = file
    return modules


def _imported_names(module: str, file: Path, tree: ast.AST) -> set[str]:
    """The dotted names (relative to the package) one module imports, relative imports resolved."""
    names: set[str] = set()
    here = module.split(".") if module else []
    if file.name != "__init__.py":
        here = here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join([PACKAGE.name, *here[: len(here) - node.level + 1]])
                prefix = f"{base}.{node.module}" if node.module else base
            else:
                prefix = node.module or ""
            if prefix.split(".")[0] == PACKAGE.name:
                names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return {name.partition(".")[2] for name in names}


@lru_cache(maxsize=1)
def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (a name imported from a package is an edge to its submodule if it is one)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, file in modules.items():
        targets = set()
        for name in _imported_names(module, file, ast.parse(file.read_text(), str(file))):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _shown(module: str) -> str:
    return f"{PACKAGE.name}.{module}" if module else PACKAGE.name


def _matches(module: str, path: str) -> bool:
    dotted = path.removesuffix(".py").removesuffix("/").replace("/", ".")
    return module == dotted or module.startswith(dotted + ".") if path.endswith("/") else module == dotted


def layering_violations() -> list[str]:
    """Every import that runs up the layers, or breaks a rule inside one layer."""
    layers = read_layers()
    problems = []
    for module, targets in sorted(import_graph().items()):
        own = layers.rank(module)
        for target in sorted(targets):
            theirs = layers.rank(target)
            if own is None or theirs is None:
                continue  # reported by test_every_module_has_a_layer
            if theirs < own:
                problems.append(
                    f"{_shown(module)} imports {_shown(target)} "
                    f"(layer {layers.names[theirs]} above {layers.names[own]})"
                )
            for importer, imported, _why in layers.forbidden:
                if _matches(module, importer) and _matches(target, imported):
                    problems.append(f"{_shown(module)} imports {_shown(target)} ({importer} never imports {imported})")
    return problems


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    # a package's __init__ importing its own submodules (a re-export) is not a cycle
    packages = {m for m, file in _modules().items() if file.name == "__init__.py"} | {""}
    return [c for c in cycles if not all(m in packages or any(m.startswith(p + ".") for p in c) for m in c)]


def test_every_module_has_a_layer() -> None:
    """A module the layer table does not place would escape the check."""
    layers = read_layers()
    unplaced = sorted(_shown(m) for m in import_graph() if layers.rank(m) is None)
    assert not unplaced, "add these to the layer table of docs/architecture.md:\n" + "\n".join(unplaced)


def test_imports_run_down_the_layers() -> None:
    """No module imports one from a layer above it (docs/architecture.md, 'Layers')."""
    problems = layering_violations()
    assert not problems, f"{len(problems)} imports run up the layers:\n" + "\n".join(problems)


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or through others."""
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(map(_shown, c)) for c in cycles)


def test_at_most_16_root_modules() -> None:
    """The package's root holds the few modules every layer shares; features live in their folders."""
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} root modules (at most {MAX_ROOT_MODULES}): {', '.join(root)}"


def test_no_module_over_400_lines() -> None:
    """A module is read in one sitting."""
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)


def _functions() -> list[tuple[str, int]]:
    """(``path:line qualified.name``, length in lines from ``def`` to its last line) of every function."""
    found = []

    def visit(node: ast.AST, prefix: str, path: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((f"{path}:{child.lineno} {name}", child.end_lineno - child.lineno + 1))
                visit(child, name + ".", path)
            else:
                visit(child, prefix, path)

    for file in sorted(PACKAGE.rglob("*.py")):
        visit(ast.parse(file.read_text(), str(file)), "", str(file.relative_to(ROOT)))
    return found


def test_no_function_over_60_lines() -> None:
    """A function fits on a screen."""
    long = [f"{where}: {n} lines" for where, n in _functions() if n > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_measure_reads_as_its_stages() -> None:
    """``GpuPerf.measure`` is the sequence plan -> probes -> timing -> metrics -> hooks -> sink, nothing more."""
    lengths = {where.split(" ", 1)[1]: n for where, n in _functions() if where.startswith("pytest_gpuperf/fixture.py:")}
    assert "GpuPerf.measure" in lengths, "GpuPerf.measure is not in pytest_gpuperf/fixture.py"
    assert lengths["GpuPerf.measure"] <= MAX_MEASURE_LINES, f"GpuPerf.measure is {lengths['GpuPerf.measure']} lines"


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Relative, in-function and TYPE_CHECKING imports all count (a check that misses them passes anything)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import results\n"
        "from ..timing import loop\n"
        "if TYPE_CHECKING:\n    from pytest_gpuperf.fixture import GpuPerf\n"
        "def f():\n    import pytest_gpuperf.session\n"
    )
    file = tmp_path / "x.py"
    file.write_text(source)
    names = _imported_names("judging.x", file, ast.parse(source))
    assert names == {"judging.results", "timing.loop", "fixture.GpuPerf", "session"}


def test_the_cycle_check_finds_a_cycle() -> None:
    """Two modules that import each other through a third are one cycle; a package re-exporting its module is not."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "timing": {"timing.loop"}, "timing.loop": {"timing"}, "d": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]
