"""The rank pool's channel authenticates before it unpickles anything (issue 11, item 2)."""

from __future__ import annotations

import pickle
import socket
import threading
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
import torch

from pytest_gpuperf.distributed import channel, pool
from pytest_gpuperf.distributed.channel import (
    AuthenticationError,
    AuthListener,
    connect,
    new_key,
    recv_message,
    send_message,
)
from pytest_gpuperf.distributed.tasks import STATUS_OK, RankTask


class _CreatesAFile:
    """A pickle whose loading runs ``open(path, "w")``: proof that a peer's bytes were unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.path), "w"))


def _hostile_send(address: str, payload: object) -> socket.socket:
    """Connect like any local process could and send a pickle straight away."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)))
    keep = sock.dup()
    Connection(sock.detach()).send(payload)
    return keep


def _accept(listener: AuthListener, seconds: float = 30.0) -> Connection | None:
    for _ in range(int(seconds / 0.2)):
        conn = listener.accept(0.2)
        if conn is not None:
            return conn
    return None


def test_a_peer_without_the_key_is_refused_before_its_pickle_is_loaded_and_a_keyed_one_gets_through(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "pwned"
    key = new_key()
    listener = AuthListener(key, handshake_timeout=5)
    try:
        hostile = _hostile_send(listener.address, _CreatesAFile(marker))
        staller = socket.create_connection(listener.server.getsockname()[:2])  # connects and never speaks
        big = _hostile_send(listener.address, b"x" * 100_000)
        results: list[Connection] = []
        worker = threading.Thread(target=lambda: results.append(connect(listener.address, key)))
        worker.start()
        conn = _accept(listener)
        worker.join(30)
        assert conn is not None and results, "the keyed worker was not accepted"
        send_message(results[0], {"hello": 1, "weights": torch.arange(6.0)})  # a tensor travels by value
        message = recv_message(conn)
        assert message["hello"] == 1 and torch.equal(message["weights"], torch.arange(6.0))
        assert not marker.exists(), "a pickle from an unauthenticated peer was loaded"
        assert listener.rejected >= 2
        for sock in (hostile, staller, big):
            sock.close()
        conn.close()
        results[0].close()
    finally:
        listener.close()
    assert not marker.exists()


def test_a_worker_refuses_a_listener_that_does_not_hold_the_key() -> None:
    listener = AuthListener(new_key(), handshake_timeout=5)
    try:
        errors: list[BaseException] = []

        def worker() -> None:
            try:  # each attempt is refused at once; connect retries until its timeout
                connect(listener.address, new_key(), timeout=1)
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                errors.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(30)
        assert not thread.is_alive()
        assert _accept(listener, 0.2) is None  # the worker gave up: whatever the listener accepted is queued
        assert errors and isinstance(errors[0], (AuthenticationError, EOFError, OSError))
    finally:
        listener.close()


def test_a_handshake_message_is_never_unpickled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handshake reads raw bytes only: ``Connection.recv`` (a pickle load) is never called."""
    calls: list[str] = []
    original = Connection.recv

    def spy(self: Connection) -> object:
        calls.append("recv")
        return original(self)

    monkeypatch.setattr(Connection, "recv", spy)
    key = new_key()
    listener = AuthListener(key, handshake_timeout=5)
    try:
        sock = _hostile_send(listener.address, pickle.dumps("anything"))
        for _ in range(150):  # until the listener has refused it (at most 30 s)
            if listener.rejected:
                break
            assert _accept(listener, 0.2) is None
        assert listener.rejected == 1 and _accept(listener, 0.2) is None
        sock.close()
    finally:
        listener.close()
    assert calls == []
    assert channel.MAX_HANDSHAKE_MESSAGE <= 256


BODY = """
def body():
    return None
"""


@pytest.mark.e2e
def test_a_hostile_client_connecting_first_neither_runs_code_nor_stops_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    sockets: list[socket.socket] = []

    class HostileFirst(AuthListener):
        def __init__(self, key: bytes) -> None:
            super().__init__(key)
            sockets.append(_hostile_send(self.address, _CreatesAFile(marker)))  # before any rank starts

    monkeypatch.setattr(pool, "AuthListener", HostileFirst)
    (tmp_path / "hostile_body_mod.py").write_text(BODY)
    task = RankTask(
        node_id="hostile_body_mod.py::body",
        module_name="hostile_body_mod",
        module_file=str(tmp_path / "hostile_body_mod.py"),
        qualname="body",
        backend="cpu",
        sys_path=[str(tmp_path)],
    )
    ranks = pool.RankPool(1, "cpu")
    try:
        ranks.start(timeout=240)
        outcome = ranks.run(task, timeout=120)
        assert outcome.results[0].status == STATUS_OK, outcome
        assert ranks.rejected_connections >= 1
    finally:
        ranks.close()
        for sock in sockets:
            sock.close()
    assert not marker.exists(), "the pool unpickled a message from a peer without the key"


def test_a_flood_of_silent_connections_neither_delays_a_keyed_worker_nor_exhausts_the_listener() -> None:
    """Issue 24: another user's flood failed a pool start ("no handshake message within 60 s")."""
    key = new_key()
    listener = AuthListener(key, handshake_timeout=60)  # the flood would hold a per-pool wait for a minute
    host, port = listener.server.getsockname()[:2]
    flood = [socket.create_connection((host, port)) for _ in range(channel.MAX_PENDING + 100)]
    try:
        results: list[Connection] = []
        worker = threading.Thread(target=lambda: results.append(connect(listener.address, key, timeout=20)))
        worker.start()
        conn = _accept(listener, 20)
        worker.join(30)
        assert conn is not None and results, "a keyed worker behind a flood was not accepted"
        send_message(results[0], "through")
        assert recv_message(conn) == "through"
        assert listener.rejected >= 100, "the oldest silent connections past the cap are dropped"
        conn.close()
        results[0].close()
    finally:
        for sock in flood:
            sock.close()
        listener.close()


def test_each_connection_has_its_own_handshake_deadline() -> None:
    listener = AuthListener(new_key(), handshake_timeout=0.5)
    host, port = listener.server.getsockname()[:2]
    try:
        staller = socket.create_connection((host, port))
        staller.settimeout(30)
        assert staller.recv(64)[:4] == (32).to_bytes(4, "big")  # the challenge arrives at once
        assert staller.recv(64) == b"", "a silent peer is disconnected when its own deadline passes"
        assert listener.rejected == 1
        staller.close()
    finally:
        listener.close()


@pytest.mark.e2e
def test_a_pool_starts_although_a_flood_of_silent_connections_came_first(monkeypatch: pytest.MonkeyPatch) -> None:
    flood: list[socket.socket] = []

    class FloodedFirst(AuthListener):
        def __init__(self, key: bytes) -> None:
            super().__init__(key, handshake_timeout=120)
            host, port = self.server.getsockname()[:2]
            flood.extend(socket.create_connection((host, port)) for _ in range(400))

    monkeypatch.setattr(pool, "AuthListener", FloodedFirst)
    ranks = pool.RankPool(1, "cpu", solo=True)
    try:
        ranks.start(timeout=120)
        assert ranks.alive and ranks.rejected_connections >= 100
    finally:
        ranks.close()
        for sock in flood:
            sock.close()
