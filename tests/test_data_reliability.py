"""Issue 35: lost or refused data, and local denial of service through the baselines and the reports.

N7 the writer stores only what the reader accepts and an update repairs a file that holds a refused entry; N9 a
huge list in an unknown field is refused before it is composed; N10 a report that cannot be written is one line,
never a traceback or half a file; N11 category values are capped; N12 invisible characters are shown in Markdown;
a cancelled ``-n 2`` update writes nothing and leaves no process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml  # noqa: F401 - imported before any pytester test, whose module snapshot would drop it (the C loader keeps the first import's classes)

from pytest_gpuperf.baselines.schema import BaselineError, load_baseline_file, parse_baseline_text
from pytest_gpuperf.baselines.store import update_baseline_file

ROOT = Path(__file__).resolve().parents[1]
FINGERPRINT = {"backend": "cpu"}

RECORDS = """
def test_ok(gpuperf):
    gpuperf.record("count", 7, better="equal")

def test_huge(gpuperf):
    gpuperf.record("count", 10**35, better="equal")
"""


def _baseline(pytester: pytest.Pytester) -> Path:
    [path] = sorted((pytester.path / "baselines").glob("*.yaml"))
    return path


# -- N7: the writer refuses what the reader refuses; an update repairs -------------------------------------------


def test_a_36_digit_integer_fails_its_own_test_and_the_others_are_recorded(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_rec=RECORDS)
    result = pytester.runpytest("--gpuperf", "--gpuperf-update", *fast_args, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_huge*integer of 36 digits (at most 30)*"])
    loaded = load_baseline_file(_baseline(pytester), cached=False)
    assert loaded is not None and list(loaded.tests) == ["test_rec.py::test_ok[cpu]"]
    pytester.runpytest("--gpuperf", *fast_args, "-k", "test_ok").assert_outcomes(passed=1)


@pytest.mark.parametrize("char", ["\u202e", "\u200b"], ids=["rlo", "zwsp"])
def test_an_invisible_character_in_a_test_id_fails_that_test_only(
    pytester: pytest.Pytester, fast_args: list[str], char: str
) -> None:
    pytester.makepyfile(test_rec=RECORDS.replace("10**35", "8"))
    bad = pytester.mkpydir(f"sub{char}dir")
    (bad / "test_other.py").write_text("def test_x(gpuperf):\n    gpuperf.record('count', 3, better='equal')\n")
    result = pytester.runpytest("--gpuperf", "--gpuperf-update", *fast_args, "-rf")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*cannot be recorded as a baseline: test id*unprintable character*"])
    loaded = load_baseline_file(_baseline(pytester), cached=False)
    assert loaded is not None and sorted(loaded.tests) == ["test_rec.py::test_huge[cpu]", "test_rec.py::test_ok[cpu]"]


def test_an_update_repairs_a_file_holding_an_entry_the_reader_refuses(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_rec=RECORDS.replace("10**35", "8"))
    pytester.runpytest("--gpuperf", "--gpuperf-update", *fast_args).assert_outcomes(passed=2)
    path = _baseline(pytester)
    text = path.read_text()
    path.write_text(text + "  bad\u202eid::test:\n    count: {value: 1, unit: '', better: equal, kind: custom}\n")
    blocked = pytester.runpytest("--gpuperf", *fast_args)
    blocked.assert_outcomes(failed=2)  # the reader refuses the file: every test of the fingerprint
    repaired = pytester.runpytest("--gpuperf", "--gpuperf-update", *fast_args)
    repaired.assert_outcomes(passed=2)
    repaired.stdout.fnmatch_lines(["*dropped an entry the reader refuses:*test id*unprintable character*"])
    assert "\u202e" not in path.read_text()
    pytester.runpytest("--gpuperf", *fast_args).assert_outcomes(passed=2)


def test_the_store_refuses_a_test_id_the_reader_refuses(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    with pytest.raises(BaselineError, match=r"refusing to record test id .* unprintable character"):
        update_baseline_file(path, FINGERPRINT, {"a\u202eb::t": {"m": {"value": 1}}})
    assert not path.exists()


# -- N9: a huge list in an unknown field ---------------------------------------------------------------------------


def test_a_huge_list_in_an_unknown_field_is_refused_before_it_is_composed(tmp_path: Path) -> None:
    items = ", ".join(["1"] * 1_500_000)  # ~4.5 MB on one line
    text = (
        "schema_version: 1\nfingerprint: {backend: cpu}\ntests:\n  t::a:\n    m: {value: 1, unit: s, better: lower, "
        f"kind: time, junk: {{deep: [{items}]}}}}\n"
    )
    with pytest.raises(BaselineError, match=r":5: a list of more than 10000 items"):
        parse_baseline_text(tmp_path / "cpu.yaml", text)


def test_nesting_too_deep_is_refused_with_its_line(tmp_path: Path) -> None:
    deep = "[" * 40 + "]" * 40
    filler = "," * 200_001  # one quoted word: it only makes the text look large enough to be walked first
    text = f"schema_version: 1\nfingerprint: {{backend: cpu}}\nnote: '{filler}'\njunk: {deep}\n"
    with pytest.raises(BaselineError, match="nesting deeper than 32 levels"):
        parse_baseline_text(tmp_path / "cpu.yaml", text)


# -- N11: category values are capped --------------------------------------------------------------------------------


def test_a_category_value_of_a_million_characters_is_refused_on_reading(tmp_path: Path) -> None:
    text = (
        "schema_version: 1\nfingerprint: {backend: cpu}\ntests:\n  t::a:\n"
        f"    step.bound: {{value: {'x' * 1_000_000}, better: equal, kind: category}}\n"
    )
    with pytest.raises(BaselineError, match=r":5: metric 'step.bound' of 't::a': value of a category is 1000000 "):
        parse_baseline_text(tmp_path / "cpu.yaml", text)


def test_a_long_category_value_is_refused_on_recording() -> None:
    from pytest_gpuperf.validate import checked_record_args

    with pytest.raises(ValueError, match="a category value is 201 characters long, more than 200"):
        checked_record_args("t::a", [], set(), "bound", "x" * 201, "", "equal")
    with pytest.raises(BaselineError, match="value of a category is 300 characters long"):
        update_baseline_file(Path("/nonexistent/cpu.yaml"), FINGERPRINT, {"t::a": {"b": {"value": "y" * 300}}})


# -- N12: invisible characters in the Markdown ------------------------------------------------------------------------


def test_bidi_and_zero_width_characters_are_shown_escaped_in_markdown() -> None:
    from pytest_gpuperf.reporting.md_escape import code, text

    invisible = "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff"
    shown = code(f"t::a{invisible}b")
    assert not any(c in shown for c in invisible)
    assert "\\u202e" in shown and "\\ufeff" in shown
    assert not any(c in text(f"x{invisible}") for c in invisible)


# -- N10: a report that cannot be written ---------------------------------------------------------------------------


def test_a_report_that_cannot_be_written_is_one_line_and_no_partial_file(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_rec=RECORDS.replace("10**35", "8"))
    (pytester.path / "report.json").mkdir()  # a directory in the way of the JSON
    (pytester.path / "md").write_text("a file in the way of the folder")
    summary = pytester.path / "summary.md"
    summary.write_text("earlier step\n")
    summary.chmod(0o444)  # the step summary cannot be appended to
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    args = ("--gpuperf", "--gpuperf-json", "report.json", "--gpuperf-markdown", "md/summary.md", *fast_args)
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*could not write report.json*nothing written*", "*could not write md/summary.md*"])
    if os.geteuid() != 0:
        result.stdout.fnmatch_lines(["*could not write *summary.md*"])
        assert summary.read_text() == "earlier step\n"
    assert not [p for p in pytester.path.iterdir() if p.name.endswith(".tmp")]


def test_a_full_disk_leaves_the_old_report_and_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from pytest_gpuperf.reporting.files import write_report

    path = tmp_path / "report.json"
    path.write_text("{}\n")

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space left"):
        write_report(path, '{"a": 1}\n')
    assert path.read_text() == "{}\n" and [p.name for p in tmp_path.iterdir()] == ["report.json"]


# -- a cancelled update --------------------------------------------------------------------------------------------

SLOW = """
import os, time
from pathlib import Path

def _mark():
    Path(os.environ["MARKS"], str(os.getpid())).touch()

{tests}
"""
ONE = """
def test_{i}(gpuperf):
    _mark()
    gpuperf.record("count", {i}, better="equal")
    time.sleep(4)
"""


def _alive(pid: int) -> bool:
    from pytest_gpuperf.procs.lifetime import process_alive

    return process_alive(pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill9"])
def test_a_killed_controller_of_an_n2_update_leaves_no_process_and_writes_nothing(
    pytester: pytest.Pytester, fast_args: list[str], sig: int
) -> None:
    pytest.importorskip("xdist")
    marks = pytester.mkdir("marks")
    pytester.makepyfile(test_slow=SLOW.format(tests="".join(ONE.format(i=i) for i in range(4))))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MARKS": str(marks)}
    command = [sys.executable, "-m", "pytest", "-p", "xdist", "-n", "2", "--gpuperf", "--gpuperf-update", *fast_args]
    controller = subprocess.Popen(
        command, cwd=pytester.path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline and controller.poll() is None:
        time.sleep(0.1)
    workers = [int(p.name) for p in marks.iterdir()]
    assert len(workers) == 2, "the workers did not start their tests"
    tests_end = time.monotonic() + 4  # the tests the workers are running sleep 4 s after their mark
    controller.send_signal(sig)
    controller.wait(timeout=30)
    gone_by = time.monotonic() + 5
    while [pid for pid in workers if _alive(pid)] and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert not [pid for pid in workers if _alive(pid)], "an xdist worker outlived its killed controller by 5 s"
    time.sleep(max(0.0, tests_end + 1 - time.monotonic()))  # past the end of the tests the workers were running
    baselines = pytester.path / "baselines"
    assert not baselines.exists() or not [p for p in baselines.iterdir() if p.suffix in (".yaml", ".tmp")]


# -- B7: a flood of local connections while the pool starts ----------------------------------------------------------


class _Flood:
    """Threads opening connections to ``address`` as fast as they can for ``seconds`` (the newest 64 kept open)."""

    def __init__(self, address: str, seconds: float, threads: int = 3) -> None:
        import socket
        import threading

        host, _, port = address.rpartition(":")
        self.opened = 0
        stop = time.monotonic() + seconds

        def run() -> None:
            held: list[socket.socket] = []
            while time.monotonic() < stop:
                try:
                    held.append(socket.create_connection((host, int(port)), timeout=1))
                    self.opened += 1
                except OSError:
                    continue
                if len(held) > 64:
                    held.pop(0).close()
            for sock in held:
                sock.close()

        self.threads = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(30)


def test_a_worker_gets_through_a_flood_that_pushes_its_handshake_out() -> None:
    from pytest_gpuperf.distributed.channel import AuthListener, connect, new_key, recv_message, send_message

    key = new_key()
    listener = AuthListener(key, max_pending=4)  # 4 pending handshakes: every flood connection pushes one out
    flood = _Flood(listener.address, seconds=2.0)
    try:
        client = connect(listener.address, key, timeout=30)
        server = listener.accept(30)
        assert server is not None
        send_message(client, "through")
        assert recv_message(server) == "through"
        assert flood.opened > 4 and listener.rejected > 0
        client.close()
        server.close()
    finally:
        flood.join()
        listener.close()


def test_a_pool_starts_while_another_local_user_floods_its_port(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpuperf.distributed import pool
    from pytest_gpuperf.distributed.channel import AuthListener

    floods: list[_Flood] = []

    class Flooded(AuthListener):
        def __init__(self, key: bytes) -> None:
            super().__init__(key, max_pending=4)
            floods.append(_Flood(self.address, seconds=3.0))

    monkeypatch.setattr(pool, "AuthListener", Flooded)
    ranks = pool.RankPool(1, "cpu", solo=True)
    try:
        ranks.start(timeout=120)
        assert ranks.alive and floods[0].opened > 4
    finally:
        ranks.close()
        for flood in floods:
            flood.join()
