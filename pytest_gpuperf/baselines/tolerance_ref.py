"""Under ``--gpuperf-baseline-ref REF``: the run's tolerances judged by the ref's, so a PR cannot loosen its own gate.

Two sources, each compared with what REF configured:

* the ini tolerances (every float ``gpuperf_*tolerance`` key): REF's ini file (``pytest.ini``, ``pyproject.toml``,
  ``tox.ini``, ``setup.cfg`` at the rootdir, first with a pytest section, as pytest picks it), its key or its
  ``addopts`` (``--gpuperf-x-tolerance=``, ``-o gpuperf_x_tolerance=``), else the option's default. A value given
  on this run's own command line is the caller's (the CI job's) and is not compared;
* each judged metric's tolerance against the one REF implies: REF's ``gpuperf`` marker on the test (function,
  class, then module ``pytestmark``; literal keywords read from REF's test file), else REF's ini value. A test
  or file REF does not have is new, not looser. A marker value REF computes (not a literal) reads as REF's ini
  value.

A looser one is a :class:`~pytest_gpuperf.baselines.diff.BaselineChange` with ``loosens`` set, listed with the
baseline changes (``[LOOSENS THE GATE]``); ``--gpuperf-strict`` fails the run on it.
"""

from __future__ import annotations

import ast
import configparser
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.baselines.diff import BaselineChange
from pytest_gpuperf.validate import number_or_none

if TYPE_CHECKING:
    import pytest

    from pytest_gpuperf.baselines.ref import GitRef

#: pytest's ini files in the order it picks them, and the section each keeps its options in.
INI_FILES = (("pytest.ini", "pytest"), ("pyproject.toml", ""), ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest"))
#: Marker keywords that set a tolerance.
MARKER_KEYS = ("time_tolerance", "memory_tolerance", "host_tolerance", "tolerance", "tolerances")


def tolerance_keys() -> dict[str, Any]:
    """Every registered float ``gpuperf_*tolerance`` option, by ini key."""
    from pytest_gpuperf.settings import registered_options

    return {o.name: o for o in registered_options() if o.kind == "float" and o.name.endswith("tolerance")}


def ini_section(name: str, text: str) -> dict[str, str] | None:
    """The pytest options of one ini file's text (None when it has no pytest section)."""
    if name == "pyproject.toml":
        import tomllib

        try:
            table = tomllib.loads(text).get("tool", {}).get("pytest", {}).get("ini_options")
        except tomllib.TOMLDecodeError:
            return None
        if not isinstance(table, dict):
            return None
        return {str(k): " ".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in table.items()}
    section = dict(INI_FILES)[name]
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return dict(parser[section]) if parser.has_section(section) else None


def addopts_values(addopts: str, keys: dict[str, Any]) -> dict[str, str]:
    """The tolerance keys ``addopts`` sets: ``--gpuperf-x-tolerance=V`` (or ``V`` next), ``-o key=V``."""
    from pytest_gpuperf.settings import flag_name

    flags = {flag_name(k): k for k in keys} | {a: k for k, o in keys.items() for a in o.hidden_flags}
    try:
        tokens = shlex.split(addopts)
    except ValueError:
        return {}
    found: dict[str, str] = {}
    for i, token in enumerate(tokens):
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        name, eq, value = token.partition("=")
        if name in flags:
            found[flags[name]] = value if eq else following
        else:
            key, _, val = _override(token, following).partition("=")
            if key.strip() in keys:
                found[key.strip()] = val
    return found


def _override(token: str, following: str) -> str:
    """The ``key=value`` of an ``-o`` / ``--override-ini`` token ("" for any other token)."""
    if token in ("-o", "--override-ini"):
        return following
    if token.startswith("--override-ini="):
        return token.partition("=")[2]
    if token.startswith("-o") and not token.startswith("--"):
        return token[2:]
    return ""


def ref_ini(ref: GitRef, rootpath: Path) -> tuple[str, dict[str, float]]:
    """REF's ini file (as pytest would pick it at the rootdir) and the tolerance each key has there."""
    keys = tolerance_keys()
    label, options = "(no ini file)", {}
    for name, _ in INI_FILES:
        text = ref.read(rootpath / name)
        section = ini_section(name, text) if text is not None else None
        if section is not None:
            label, options = ref.relative(rootpath / name), section
            break
    values = {k: options[k] for k in keys if k in options}
    values |= addopts_values(options.get("addopts", ""), keys)
    out = {}
    for key, option in keys.items():
        number = number_or_none(_float(values.get(key, option.default)))
        out[key] = number if number is not None else float(option.default)
    return label, out


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _on_command_line(config: pytest.Config, key: str, option: Any) -> bool:
    args = [str(a) for a in config.invocation_params.args]
    from pytest_gpuperf.settings import flag_name

    spellings = (flag_name(key), *option.hidden_flags)
    return any(a.split("=", 1)[0] in spellings or key in a for a in args)


def ini_changes(config: pytest.Config, ref: GitRef) -> tuple[list[BaselineChange], dict[str, float]]:
    """This run's ini tolerances that are looser than REF's, and REF's values (for the per-test comparison; a key
    given on this run's command line keeps this run's value there)."""
    from pytest_gpuperf.settings import get_option

    label, at_ref = ref_ini(ref, config.rootpath)
    where = ref.relative(config.inipath) if config.inipath is not None else label
    changes = []
    for key, option in tolerance_keys().items():
        now = float(get_option(config, key))
        if _on_command_line(config, key, option):
            at_ref[key] = now  # the caller's choice applies to REF's tests as well
            continue
        if now > at_ref[key]:
            detail = f"{key} {at_ref[key]:g} at {ref.ref} ({label}) -> {now:g} in this run: accepts larger changes"
            changes.append(BaselineChange(where, "tolerance loosened", None, key, at_ref[key], now, True, detail))
    return changes, at_ref


def _gpuperf_keywords(nodes: list[ast.expr]) -> dict[str, Any]:
    """The literal tolerance keywords of the ``...gpuperf(...)`` calls among ``nodes`` (a computed one: absent)."""
    found: dict[str, Any] = {}
    for node in nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "gpuperf"):
            continue
        for keyword in node.keywords:
            if keyword.arg in MARKER_KEYS and keyword.arg not in found:
                try:
                    found[keyword.arg] = ast.literal_eval(keyword.value)
                except ValueError:
                    continue
    return found


def _pytestmark(tree: ast.Module | ast.ClassDef) -> list[ast.expr]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            value = node.value
            return list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value]
    return []


def marker_at_ref(text: str, node_id: str) -> dict[str, Any] | None:
    """The tolerance keywords of the test ``node_id`` in REF's file ``text`` (closest marker first), or None when
    REF has no such test."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    *classes, function = node_id.split("::")[1:] or [""]
    function = function.partition("[")[0]
    scopes: list[ast.Module | ast.ClassDef] = [tree]
    for name in classes:
        found = [n for n in scopes[-1].body if isinstance(n, ast.ClassDef) and n.name == name]
        if not found:
            return None
        scopes.append(found[0])
    defs = [n for n in scopes[-1].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if not defs:
        return None
    keywords = _gpuperf_keywords(defs[0].decorator_list)
    for scope in reversed(scopes):
        decorators = scope.decorator_list if isinstance(scope, ast.ClassDef) else []
        for key, value in _gpuperf_keywords([*decorators, *_pytestmark(scope)]).items():
            keywords.setdefault(key, value)
    return keywords


def _per_backend(value: Any, backend: str) -> float | None:
    if isinstance(value, dict):
        value = value.get(backend)
    return number_or_none(value)


def implied(marker: dict[str, Any], verdict: dict[str, Any], backend: str, ini: dict[str, float]) -> float:
    """The tolerance REF gives one judged metric (:func:`pytest_gpuperf.judging.tolerances.tolerance`'s order)."""
    per_metric = marker.get("tolerances")
    if isinstance(per_metric, dict) and number_or_none(per_metric.get(verdict.get("metric"))) is not None:
        return float(per_metric[verdict["metric"]])
    kind = verdict.get("kind")
    if kind == "memory":
        order, default = ("memory_tolerance", "tolerance"), ini.get("gpuperf_memory_tolerance", 0.05)
    elif kind == "host":
        order, default = ("host_tolerance",), ini.get("gpuperf_host_tolerance", 0.25)
    else:
        timed = kind in ("time", "throughput")
        host_cpu = timed and (backend == "cpu" or "calibration" in (verdict.get("extra") or {}))
        default = ini.get("gpuperf_cpu_time_tolerance" if host_cpu else "gpuperf_time_tolerance", 0.05)
        order = ("time_tolerance", "tolerance") if timed else ("tolerance",)
    for key in order:
        number = _per_backend(marker.get(key), backend)
        if number is not None:
            return number
    return default


#: One test of this run: its node id, its backend and its verdicts (``results.verdict_to_dict``).
TestVerdicts = tuple[str, str, list[dict[str, Any]]]


def marker_changes(
    config: pytest.Config, ref: GitRef, ini: dict[str, float], tests: list[TestVerdicts]
) -> list[BaselineChange]:
    """Judged metrics whose tolerance in this run is larger than the one REF gives the same test."""
    texts: dict[str, str | None] = {}
    changes = []
    for node_id, backend, verdicts in tests:
        file = node_id.split("::")[0]
        if file not in texts:
            texts[file] = ref.read(config.rootpath / file) if file.endswith(".py") else None
        text = texts[file]
        marker = marker_at_ref(text, node_id) if text is not None else None
        if marker is None:
            continue  # a test REF does not have: new, not looser
        for verdict in verdicts:
            now = number_or_none(verdict.get("tolerance"))
            if now is None or verdict.get("status") in ("info", "new"):
                continue
            before = implied(marker, verdict, backend, ini)
            if now > before * (1 + 1e-9):
                detail = (
                    f"tolerance {before:g} at {ref.ref} -> {now:g} in this run (marker or ini): accepts larger changes"
                )
                changes.append(
                    BaselineChange(
                        file, "tolerance loosened", node_id, verdict.get("metric"), before, now, True, detail
                    )
                )
    return changes


def tolerance_changes(config: pytest.Config, ref: GitRef, tests: list[TestVerdicts]) -> list[BaselineChange]:
    """Every tolerance of this run looser than REF's: the ini keys, then each judged metric's."""
    ini_rows, at_ref = ini_changes(config, ref)
    loosened_keys = {c.metric for c in ini_rows}
    rows = marker_changes(config, ref, at_ref, tests)
    # a metric that only follows a loosened ini key is listed once, by the key
    from pytest_gpuperf.settings import get_option

    now = {k: float(get_option(config, k)) for k in loosened_keys}
    rows = [r for r in rows if not any(r.after == v for v in now.values())]
    return ini_rows + rows


def ref_tolerance_changes(config: pytest.Config, tests: list[TestVerdicts]) -> list[dict[str, Any]]:
    """Under ``--gpuperf-baseline-ref``: this run's looser tolerances, as the dicts of ``baseline_ref.changes``."""
    from pytest_gpuperf.baselines.ref import REF_KEY

    ref = config.stash.get(REF_KEY, None)
    if ref is None:
        return []
    return [c.as_dict() for c in tolerance_changes(config, ref, tests)]
