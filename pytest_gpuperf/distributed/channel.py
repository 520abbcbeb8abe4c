"""The authenticated local channel between the pytest process and its worker processes.

Anything on the machine can connect to a 127.0.0.1 port, so nothing that arrives on it
is unpickled before the peer proved it holds the pool's secret key: both sides run an
HMAC-SHA256 challenge-response on raw bytes (``recv_bytes`` with a 256-byte cap, never
``recv``), in both directions, and only then exchange pickled messages.

* :class:`AuthListener` (pytest process): one thread accepts connections as they arrive and
  runs every handshake at once, each against its own deadline (a peer that connects and
  stalls, or a flood of them, cannot block the others or fail a pool start), and hands
  out authenticated connections only; rejected peers are counted in ``rejected``.
* :func:`connect` (worker): connects and authenticates, retrying a handshake a flood cut off
  (with a growing pause, for a bounded time); raises :class:`AuthenticationError` at once
  when the listener cannot prove it holds the key.
"""

from __future__ import annotations

import errno
import hmac
import os
import pickle
import queue
import selectors
import socket
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

CHALLENGE_BYTES = 32
MAX_HANDSHAKE_MESSAGE = 256
#: Seconds each connection has to answer the challenge (its own deadline, not the pool's).
HANDSHAKE_SECONDS = 10.0
#: Handshakes held at once; past that the oldest is dropped (a flood cannot exhaust descriptors or memory).
MAX_PENDING = 256
#: The worker's answer: its proof (32 bytes) and its own challenge.
_PROOF_MESSAGE = 32 + 32
_DIGEST = "sha256"


class AuthenticationError(ConnectionError):
    """The peer did not prove it holds the pool's key."""


class HandshakeBroken(AuthenticationError):
    """The handshake was cut off or never answered (a flood pushed it out of the listener): worth a retry."""


def new_key() -> bytes:
    """A fresh random secret for one pool."""
    return os.urandom(32)


def _proof(key: bytes, role: bytes, challenge: bytes) -> bytes:
    return hmac.new(key, role + challenge, _DIGEST).digest()


def _recv_raw(conn: Connection, timeout: float) -> bytes:
    """At most 256 raw bytes within ``timeout`` (never unpickled)."""
    if not conn.poll(timeout):
        raise HandshakeBroken(f"no handshake message within {timeout:g} s")
    try:
        return conn.recv_bytes(MAX_HANDSHAKE_MESSAGE)
    except EOFError as exc:
        raise HandshakeBroken("the peer closed the connection during the handshake") from exc


def server_handshake(conn: Connection, key: bytes, timeout: float = HANDSHAKE_SECONDS) -> None:
    """Challenge the peer, check its proof, then prove ourselves; raises on any mismatch."""
    challenge = os.urandom(CHALLENGE_BYTES)
    conn.send_bytes(challenge)
    answer = _recv_raw(conn, timeout)
    if len(answer) != 32 + CHALLENGE_BYTES or not hmac.compare_digest(answer[:32], _proof(key, b"worker", challenge)):
        raise AuthenticationError("the peer's proof of the pool key is wrong")
    conn.send_bytes(_proof(key, b"pool", answer[32:]))


def client_handshake(conn: Connection, key: bytes, timeout: float = HANDSHAKE_SECONDS) -> None:
    """Answer the listener's challenge, challenge it back, and check its proof."""
    challenge = _recv_raw(conn, timeout)
    if len(challenge) != CHALLENGE_BYTES:
        raise AuthenticationError("the listener's challenge has the wrong size")
    mine = os.urandom(CHALLENGE_BYTES)
    conn.send_bytes(_proof(key, b"worker", challenge) + mine)
    answer = _recv_raw(conn, timeout)
    if not hmac.compare_digest(answer, _proof(key, b"pool", mine)):
        raise AuthenticationError("the listener's proof of the pool key is wrong")


#: First pause between two connection attempts (doubled up to :data:`RETRY_MAX_PAUSE`).
RETRY_FIRST_PAUSE = 0.05
RETRY_MAX_PAUSE = 1.0


def connect(address: str, key: bytes, timeout: float = 60.0) -> Connection:
    """Connect to ``host:port`` and authenticate both ways; the connection is then safe for pickles.

    A refused connection or a handshake cut off (another local user's flood pushed it out of the listener's
    pending handshakes) is retried with a growing pause until ``timeout`` seconds have passed; a listener that
    proves it does not hold the key is refused at once.
    """
    deadline = time.monotonic() + timeout
    pause = RETRY_FIRST_PAUSE
    while True:
        left = deadline - time.monotonic()
        try:
            return _connect_once(address, key, max(0.1, min(left, HANDSHAKE_SECONDS)))
        except (HandshakeBroken, OSError) as exc:
            if isinstance(exc, AuthenticationError) and not isinstance(exc, HandshakeBroken):
                raise
            if time.monotonic() + pause >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_PAUSE)


def _connect_once(address: str, key: bytes, timeout: float) -> Connection:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.settimeout(None)
    conn = Connection(sock.detach())
    try:
        client_handshake(conn, key, timeout)
    except BaseException:
        conn.close()
        raise
    return conn


def send_message(conn: Connection, message: object) -> None:
    """Send ``message`` pickled by the standard pickler: tensors travel by value.

    ``Connection.send`` uses multiprocessing's pickler, for which torch registers reducers that share a CPU
    tensor's storage through a file descriptor handed over by ``multiprocessing.resource_sharer``, a connection
    authenticated with the *sending process's* ``authkey``, which a pool worker does not have: a test whose
    fixture held a tensor (the README's module-scoped model) died in the worker with "digest received was wrong".
    """
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def recv_message(conn: Connection) -> object:
    """Receive a message sent with :func:`send_message` (only on an authenticated connection)."""
    return pickle.loads(conn.recv_bytes())


@dataclass
class _Pending:
    """One connection in its handshake: what it was sent, what it sent back so far, when it runs out of time."""

    sock: socket.socket
    challenge: bytes
    deadline: float
    received: bytearray = field(default_factory=bytearray)


def _frame(payload: bytes) -> bytes:
    """``payload`` framed the way ``Connection.send_bytes`` frames it (a 4-byte big-endian length first)."""
    return struct.pack("!i", len(payload)) + payload


class AuthListener:
    """A 127.0.0.1 listener that hands out only connections whose peer proved it holds ``key``.

    One thread accepts every connection as it arrives (the backlog never fills behind a slow one) and runs all
    handshakes at once through a selector, each with its *own* deadline of ``handshake_timeout`` seconds: a
    flood of connections that never speak (another local user's) is dropped connection by connection and
    cannot delay a worker that answers at once, nor fail a pool start. At most ``max_pending`` handshakes are
    held; past that the oldest is dropped. Nothing a peer sends is unpickled: the handshake reads one framed
    message of exactly the proof's size (a larger announced size is refused before it is read).
    """

    def __init__(
        self, key: bytes, handshake_timeout: float = HANDSHAKE_SECONDS, max_pending: int = MAX_PENDING
    ) -> None:
        self.key = key
        self.handshake_timeout = handshake_timeout
        self.max_pending = max_pending
        self.server = socket.create_server(("127.0.0.1", 0), backlog=socket.SOMAXCONN)
        self.server.setblocking(False)
        self.rejected = 0
        self._ready: queue.Queue[Connection] = queue.Queue()
        self._pending: OrderedDict[int, _Pending] = OrderedDict()
        self._wake_read, self._wake_write = socket.socketpair()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="gpuperf-auth-listener", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        host, port = self.server.getsockname()[:2]
        return f"{host}:{port}"

    def accept(self, timeout: float) -> Connection | None:
        """An authenticated connection within ``timeout`` seconds, else None."""
        try:
            return self._ready.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    # -- the listener thread ---------------------------------------------------------------------------------
    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.server, selectors.EVENT_READ, "accept")
        selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        try:
            while not self._closed.is_set():
                wait = 1.0
                if self._pending:
                    wait = max(0.0, min(wait, next(iter(self._pending.values())).deadline - time.monotonic()))
                for key, _ in selector.select(wait):
                    if key.data == "accept":
                        self._accept_all(selector)
                    elif key.data == "wake":
                        continue
                    else:
                        self._read(selector, key.data)
                self._expire(selector)
        finally:
            for fd in list(self._pending):
                self._drop(selector, fd, count=False)
            selector.close()
            self.server.close()
            self._wake_read.close()

    def _accept_all(self, selector: selectors.BaseSelector) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # EMFILE/ENFILE under a flood: make room by dropping the oldest handshake
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._pending:
                    self._drop(selector, next(iter(self._pending)))
                    continue
                return
            self._start(selector, sock)

    def _start(self, selector: selectors.BaseSelector, sock: socket.socket) -> None:
        challenge = os.urandom(CHALLENGE_BYTES)
        try:
            sock.setblocking(False)
            sock.send(_frame(challenge))  # 36 bytes into an empty send buffer: sent whole or the peer is broken
        except OSError:
            self.rejected += 1
            sock.close()
            return
        pending = _Pending(sock, challenge, time.monotonic() + self.handshake_timeout)
        self._pending[sock.fileno()] = pending
        selector.register(sock, selectors.EVENT_READ, sock.fileno())
        while len(self._pending) > self.max_pending:  # the oldest silent one goes: a worker mid-answer stays
            silent = next((fd for fd, p in self._pending.items() if not p.received), None)
            self._drop(selector, silent if silent is not None else next(iter(self._pending)))

    def _read(self, selector: selectors.BaseSelector, fd: int) -> None:
        pending = self._pending.get(fd)
        if pending is None:
            return
        wanted = 4 + _PROOF_MESSAGE
        try:
            chunk = pending.sock.recv(wanted - len(pending.received))
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(selector, fd)
            return
        pending.received += chunk
        if len(pending.received) >= 4 and struct.unpack("!i", pending.received[:4])[0] != _PROOF_MESSAGE:
            self._drop(selector, fd)  # announces another size: never read, never unpickled
            return
        if len(pending.received) < wanted:
            return
        answer = bytes(pending.received[4:])
        if not hmac.compare_digest(answer[:32], _proof(self.key, b"worker", pending.challenge)):
            self._drop(selector, fd)
            return
        del self._pending[fd]
        selector.unregister(pending.sock)
        try:
            pending.sock.setblocking(True)
            pending.sock.settimeout(self.handshake_timeout)
            pending.sock.sendall(_frame(_proof(self.key, b"pool", answer[32:])))
            pending.sock.settimeout(None)
        except OSError:
            self.rejected += 1
            pending.sock.close()
            return
        self._ready.put(Connection(pending.sock.detach()))

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while self._pending:
            fd, pending = next(iter(self._pending.items()))
            if pending.deadline > now:
                return
            self._drop(selector, fd)

    def _drop(self, selector: selectors.BaseSelector, fd: int, count: bool = True) -> None:
        pending = self._pending.pop(fd, None)
        if pending is None:
            return
        if count:
            self.rejected += 1
        try:
            selector.unregister(pending.sock)
        except (KeyError, ValueError):
            pass
        pending.sock.close()

    def close(self) -> None:
        """Stop listening; break off handshakes still running; close connections never handed out."""
        self._closed.set()
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout=10)
        self._wake_write.close()
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                break
