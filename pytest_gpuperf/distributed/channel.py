"""The authenticated local channel between the pytest process and its worker processes.

Anything on the machine can connect to a 127.0.0.1 port, so nothing that arrives on it
is unpickled before the peer proved it holds the pool's secret key: both sides run an
HMAC-SHA256 challenge-response on raw bytes (``recv_bytes`` with a 256-byte cap, never
``recv``), in both directions, and only then exchange pickled messages.

* :class:`AuthListener` (pytest process): accepts connections, runs each handshake in
  its own thread (a peer that connects and stalls cannot block the others) and hands
  out authenticated connections only; rejected peers are counted in ``rejected``.
* :func:`connect` (worker): connects and authenticates; raises :class:`AuthenticationError`
  when the listener cannot prove it holds the key either.
"""

from __future__ import annotations

import hmac
import os
import pickle
import queue
import socket
import threading
from multiprocessing.connection import Connection

CHALLENGE_BYTES = 32
MAX_HANDSHAKE_MESSAGE = 256
HANDSHAKE_SECONDS = 30.0
_DIGEST = "sha256"


class AuthenticationError(ConnectionError):
    """The peer did not prove it holds the pool's key."""


def new_key() -> bytes:
    """A fresh random secret for one pool."""
    return os.urandom(32)


def _proof(key: bytes, role: bytes, challenge: bytes) -> bytes:
    return hmac.new(key, role + challenge, _DIGEST).digest()


def _recv_raw(conn: Connection, timeout: float) -> bytes:
    """At most 256 raw bytes within ``timeout`` (never unpickled)."""
    if not conn.poll(timeout):
        raise AuthenticationError(f"no handshake message within {timeout:g} s")
    return conn.recv_bytes(MAX_HANDSHAKE_MESSAGE)


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


def connect(address: str, key: bytes, timeout: float = 60.0) -> Connection:
    """Connect to ``host:port`` and authenticate both ways; the connection is then safe for pickles."""
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


class AuthListener:
    """A 127.0.0.1 listener that hands out only connections whose peer proved it holds ``key``."""

    def __init__(self, key: bytes, handshake_timeout: float = HANDSHAKE_SECONDS) -> None:
        self.key = key
        self.handshake_timeout = handshake_timeout
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.rejected = 0
        self._ready: queue.Queue[Connection] = queue.Queue()
        self._in_handshake: dict[int, socket.socket] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        host, port = self.server.getsockname()[:2]
        return f"{host}:{port}"

    def accept(self, timeout: float) -> Connection | None:
        """An authenticated connection within about ``timeout`` seconds, else None."""
        try:
            sock, _ = self.server.accept()
        except TimeoutError:
            pass
        else:
            self._start_handshake(sock)
        try:
            return self._ready.get(timeout=max(0.0, timeout - 0.1))
        except queue.Empty:
            return None

    def _start_handshake(self, sock: socket.socket) -> None:
        sock.settimeout(None)
        watch = sock.dup()  # kept to shut the socket down (waking a stalled handshake) on close()
        conn = Connection(sock.detach())
        with self._lock:
            self._in_handshake[id(conn)] = watch
        threading.Thread(target=self._handshake, args=(conn, watch), daemon=True).start()

    def _handshake(self, conn: Connection, watch: socket.socket) -> None:
        try:
            server_handshake(conn, self.key, self.handshake_timeout)
        except (AuthenticationError, EOFError, OSError, ValueError):
            with self._lock:
                self.rejected += 1
            conn.close()
        else:
            if self._closed:
                conn.close()
            else:
                self._ready.put(conn)
        finally:
            with self._lock:
                self._in_handshake.pop(id(conn), None)
            watch.close()

    def close(self) -> None:
        """Stop listening; break off handshakes still running; close connections never handed out."""
        self._closed = True
        self.server.close()
        with self._lock:
            stalled = list(self._in_handshake.values())
        for watch in stalled:
            try:
                watch.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                break
