"""Issues 24 and 35 (N4, N5): the --gpuperf-update lock is a file in the baselines folder it protects.

Every writer of one folder takes the same lock whatever its ``HOME`` / ``XDG_*`` (two environments used to take
two locks and lose entries), a writable folder is all an update needs, and ``git`` ignores the lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuperf.baselines.schema import load_baseline_file
from pytest_gpuperf.baselines.store import LOCK_NAME, lock_path, update_baseline_file

ENTRY = {"t::a": {"m": {"value": 1}}}
ROOT = Path(__file__).resolve().parents[1]

WRITER = """
import sys
from pathlib import Path
from pytest_gpuperf.baselines.store import update_baseline_file
path, who = Path(sys.argv[1]), sys.argv[2]
for i in range(int(sys.argv[3])):
    update_baseline_file(path, {"backend": "cpu"}, {f"t::{who}_{i}": {"m": {"value": i + 1}}})
"""


def test_the_lock_is_a_file_in_the_baselines_folder(tmp_path: Path) -> None:
    baselines = tmp_path / "baselines"
    update_baseline_file(baselines / "cpu.yaml", {"backend": "cpu"}, ENTRY)
    assert lock_path(baselines) == baselines / LOCK_NAME and lock_path(baselines).exists()


def test_writers_from_different_environments_share_the_lock_and_keep_every_entry(tmp_path: Path) -> None:
    """N4: different HOME / XDG_RUNTIME_DIR / XDG_CACHE_HOME, one folder: no entry lost."""
    path = tmp_path / "baselines" / "cpu.yaml"
    procs = []
    for who in ("a", "b", "c"):
        home = tmp_path / f"home_{who}"
        home.mkdir()
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HOME": str(home),
            "XDG_CACHE_HOME": str(home / "cache"),
            "XDG_RUNTIME_DIR": str(home / "run"),
        }
        procs.append(subprocess.Popen([sys.executable, "-c", WRITER, str(path), who, "8"], env=env))
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    loaded = load_baseline_file(path, cached=False)
    assert loaded is not None
    assert sorted(loaded.tests) == sorted(f"t::{w}_{i}" for w in "abc" for i in range(8))


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX HOME")
def test_an_update_needs_no_writable_home_only_the_baselines_folder(tmp_path: Path) -> None:
    """N5: no writable HOME and no XDG_RUNTIME_DIR (a container as a non-root uid): the entry is still written."""
    path = tmp_path / "baselines" / "cpu.yaml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(PYTHONPATH=str(ROOT), HOME="/nonexistent/home")
    subprocess.run([sys.executable, "-c", WRITER, str(path), "x", "1"], env=env, check=True, timeout=120)
    loaded = load_baseline_file(path, cached=False)
    assert loaded is not None and list(loaded.tests) == ["t::x_0"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_add_never_picks_up_the_lock_or_a_temp_file(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    baselines = tmp_path / "baselines"
    update_baseline_file(baselines / "cpu.yaml", {"backend": "cpu"}, ENTRY)
    (baselines / ".cpu.yaml.abc123.tmp").write_text("half a file")  # a writer killed mid-write
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path, capture_output=True, text=True
    ).stdout.split("\n")
    assert sorted(line for line in status if line) == ["?? baselines/.gitignore", "?? baselines/cpu.yaml"]


def test_an_existing_gitignore_is_completed_not_replaced(tmp_path: Path) -> None:
    baselines = tmp_path / "baselines"
    baselines.mkdir()
    (baselines / ".gitignore").write_text("old.yaml")
    update_baseline_file(baselines / "cpu.yaml", {"backend": "cpu"}, ENTRY)
    update_baseline_file(baselines / "cpu.yaml", {"backend": "cpu"}, {"t::b": {"m": {"value": 2}}})
    lines = (baselines / ".gitignore").read_text().splitlines()
    assert lines[0] == "old.yaml" and lines.count(LOCK_NAME) == 1 and lines.count(".*.tmp") == 1


def test_a_symlink_in_place_of_the_lock_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    baselines = tmp_path / "baselines"
    path = baselines / "cpu.yaml"
    update_baseline_file(path, {"backend": "cpu"}, ENTRY)
    before = path.read_bytes()
    lock = lock_path(baselines)
    lock.unlink()
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    lock.symlink_to(victim)
    with pytest.raises(OSError, match=r"the update lock .* is a symlink; refusing to follow it"):
        update_baseline_file(path, {"backend": "cpu"}, {"t::a": {"m": {"value": 2}}})
    assert path.read_bytes() == before and victim.read_text() == "keep me"
