"""Build both sides' worker settings: folders, import path, scope, forwarded flags; warn where A is not REF."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_gpuperf.ab.gitref import AbRefError, untracked_extensions
from pytest_gpuperf.ab.imports import a_side_paths, editable_mappings, editable_warnings, package_dirs, pythonpath
from pytest_gpuperf.ab.runner import AbRunner, Side, child_env, side_scope
from pytest_gpuperf.settings import command_line_value, get_option, registered_options

if TYPE_CHECKING:
    from pytest_gpuperf.ab.gitref import Worktree
    from pytest_gpuperf.extensions import PerfSession


#: Options a worker does not take from the controller's command line (the controller reports, records, judges).
NOT_FORWARDED = frozenset(
    {
        "gpuperf",
        "gpuperf_update",
        "gpuperf_strict",
        "gpuperf_baselines",
        "gpuperf_max_time",
        "gpuperf_no_confirm",
        "gpuperf_json",
        "gpuperf_markdown",
        "gpuperf_no_step_summary",
        "gpuperf_plot",
        "gpuperf_baseline_ref",
        "gpuperf_worker_gpus",
        "gpuperf_processes",
    }
)


def forwarded_flags(config: pytest.Config) -> list[str]:
    """The options given on this command line (a flag, or ``-o key=value``) that a worker must see too (backend,
    timing ...): flags as flags, ini keys as ``-o key=value``."""
    args: list[str] = []
    for option in sorted(registered_options(), key=lambda o: o.name):
        if option.name in NOT_FORWARDED or option.name.startswith("gpuperf_ab"):
            continue
        value = command_line_value(config, option.name)
        if value is None:
            continue
        if option.flag is None or config.getoption(option.name, default=None) is None:
            args += ["-o", f"{option.name}={value}"]  # an ini key, or a flag's ini twin given with -o
        else:
            args += [option.flag] if option.kind == "bool" else [option.flag, value]
    return args


def _relative(path: Path, tree: Path) -> Path:
    try:
        return path.resolve().relative_to(tree)
    except ValueError:
        return Path(".")


def test_args(config: pytest.Config) -> list[str]:
    """The controller's test paths (its arguments or testpaths), absolute."""
    found = []
    for arg in config.args or ["."]:
        path, sep, rest = str(arg).partition("::")
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = config.invocation_params.dir / path
            if not candidate.exists() and (config.rootpath / path).exists():
                candidate = config.rootpath / path
        found.append(str(candidate.resolve()) + sep + rest)
    return found


def worker_args(config: pytest.Config, session: PerfSession) -> list[str]:
    """Flags every worker gets: the working tree's baselines (both sides time the same way), budget, filters."""
    args = ["-o", f"gpuperf_baselines={session.settings.baselines_dir}"]
    args += ["-o", f"gpuperf_max_time={get_option(config, 'gpuperf_ab_max_time')}"]
    args += ["-o", "gpuperf_no_confirm=true"]  # the controller judges; a worker's own confirmation costs time
    if getattr(config.option, "keyword", ""):
        args += ["-k", config.option.keyword]
    if getattr(config.option, "markexpr", ""):
        args += ["-m", config.option.markexpr]
    if config.pluginmanager.hasplugin("xdist"):
        args += ["-n", "0"]
    return args + forwarded_flags(config)


def workers_cache(config: pytest.Config) -> Path | None:
    """A folder in the controller's pytest cache for both sides' workers (None when it runs without a cache).

    The workers keep their measured roofs there: each roof is measured once per machine instead of in every
    worker process, and both sides classify bounds against the same roofs.
    """
    cache = getattr(config, "cache", None)
    if cache is None:
        return None
    try:
        return Path(cache.mkdir("gpuperf-ab-workers"))
    except OSError:
        return None


def build_runner(
    config: pytest.Config, session: PerfSession, worktree: Worktree, tree: Path
) -> tuple[AbRunner, list[str]]:
    """The runner of both sides and the warnings about what A/B cannot guarantee."""
    wt = worktree.path
    rootdir_rel = _relative(config.rootpath, tree)
    invocation_rel = _relative(config.invocation_params.dir, tree)
    scratch = wt.parent / f"run-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    scratch.mkdir(parents=True, exist_ok=True)
    plugin_dir = str(scratch / "plugin")
    editable = editable_mappings()
    existing = os.environ.get("PYTHONPATH", "")
    args = test_args(config)
    warnings = editable_warnings(tree, wt, editable)
    packages = package_dirs(tree, [tree / "src", tree, config.rootpath], editable)
    names = ",".join(sorted({p.name for p in packages}))
    a_paths = [*a_side_paths(tree, wt, list(sys.path), editable), plugin_dir]
    b_paths = [str(p) for p in (tree / "src", tree) if p.is_dir()]  # the working tree's code, not an installed copy
    a_env = child_env(dict(os.environ), pythonpath(a_paths, existing, tree), tree, wt)
    b_env = child_env(dict(os.environ), pythonpath(b_paths, os.pathsep.join([existing, plugin_dir])), None, tree)
    a_env["GPUPERF_AB_PACKAGES"] = b_env["GPUPERF_AB_PACKAGES"] = names
    a_cwd = wt / invocation_rel if (wt / invocation_rel).is_dir() else wt / rootdir_rel
    side_a = Side("A", wt, a_cwd, wt / rootdir_rel, a_env, side_scope(args, tree, wt))
    side_b = Side("B", tree, config.invocation_params.dir, config.rootpath, b_env, args)
    runner = AbRunner(
        side_a,
        side_b,
        worker_args(config, session),
        min_processes=get_option(config, "gpuperf_ab_processes"),
        max_processes=get_option(config, "gpuperf_ab_max_processes"),
        timeout=get_option(config, "gpuperf_ab_timeout"),
        scratch=scratch,
        cache_dir=workers_cache(config),
    )
    try:
        built = untracked_extensions(tree, packages)
    except AbRefError as exc:
        built = []
        warnings.append(f"could not check for compiled extensions: {exc}")
    if built:
        warnings.append(
            f"compiled extension(s) built only in the working tree, not tracked by git: {', '.join(built[:5])}; "
            "REF's worktree does not have them, so A/B cannot guarantee that side A ran REF's code "
            "(build them for REF, or compare pure-Python changes only)"
        )
    return runner, warnings
