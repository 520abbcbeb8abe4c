"""Issue 24: the --gpuperf-update lock lives in a folder no other local user can enter (no predictable /tmp file)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from pytest_gpuperf.baselines import store
from pytest_gpuperf.baselines.store import lock_path, private_lock_dir, update_baseline_file

posix_only = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")
ENTRY = {"t::a": {"m": {"value": 1}}}


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private XDG_RUNTIME_DIR and a separate XDG_CACHE_HOME, both in ``tmp_path``."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return folder


@posix_only
def test_the_lock_is_in_a_private_folder_of_the_runtime_dir_never_in_the_shared_temp_dir(
    tmp_path: Path, runtime: Path
) -> None:
    baselines = tmp_path / "baselines"
    before = set(os.listdir(tempfile.gettempdir()))
    update_baseline_file(baselines / "cpu.yaml", {"backend": "cpu"}, ENTRY)
    lock = lock_path(baselines)
    assert lock.parent == runtime / "pytest-gpuperf" and lock.exists()
    info = os.stat(lock.parent)
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
    assert stat.S_IMODE(os.stat(lock).st_mode) & 0o077 == 0
    assert not {n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("pytest-gpuperf")}


@posix_only
def test_a_runtime_dir_others_can_enter_is_not_used(tmp_path: Path, runtime: Path) -> None:
    runtime.chmod(0o777)  # a misconfigured XDG_RUNTIME_DIR (say /tmp): another user could pre-create the folder
    assert private_lock_dir() == tmp_path / "cache" / "pytest-gpuperf" / "locks"
    assert stat.S_IMODE(os.stat(private_lock_dir()).st_mode) == 0o700


@posix_only
def test_a_lock_folder_of_ours_left_open_is_closed_and_one_of_another_user_is_refused(
    tmp_path: Path, runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = runtime / "pytest-gpuperf"
    folder.mkdir(mode=0o755)
    folder.chmod(0o777)
    assert private_lock_dir() == folder and stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    monkeypatch.setattr(store.os, "getuid", lambda: os.stat(folder).st_uid + 1)  # everything is "another user's"
    path = tmp_path / "baselines" / "cpu.yaml"
    with pytest.raises(OSError, match=r"no private folder for the baselines update lock .*belongs to another user"):
        update_baseline_file(path, {"backend": "cpu"}, ENTRY)
    assert not path.exists()


@posix_only
def test_a_symlink_in_place_of_the_lock_is_refused_and_nothing_is_written(tmp_path: Path, runtime: Path) -> None:
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


@posix_only
def test_a_symlinked_lock_folder_is_refused(tmp_path: Path, runtime: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (runtime / "pytest-gpuperf").symlink_to(elsewhere)
    assert private_lock_dir() == tmp_path / "cache" / "pytest-gpuperf" / "locks"  # the symlink is passed over
