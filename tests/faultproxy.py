"""A fault-injecting TCP proxy for tests (raytf issue 33): in front of a server on 127.0.0.1 (the S3 test server,
say), it forwards every connection, except that it resets

  - a share of the connections (`reset_share`, decided per connection by a seeded random generator, so a test's
    run of faults is the same every time): each one either at accept, before a byte of it reaches the server, or
    mid-response, after the first part of the server's first answer has reached the client (`mid_response_share`
    of them);
  - on command, all of them for a while (`outage(seconds)`): new connections are reset at accept, and those open
    when it starts are reset at once, in whatever state they are (mid-request, mid-response).

A reset is a TCP RST (SO_LINGER 0, then close), what a client sees when a load balancer, a NAT or the server's host
drops it: ECONNRESET, never a clean end of stream. `stats` counts what it did. Threads only, no dependencies:

    proxy = FaultProxy(("127.0.0.1", server_port), reset_share=0.1).start()
    ...  # point the client at proxy.address
    proxy.outage(5.0)
    proxy.stop()
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from dataclasses import dataclass

CHUNK = 64 * 1024


@dataclass
class Stats:
    accepted: int = 0
    reset_at_accept: int = 0
    reset_mid_response: int = 0
    reset_by_outage: int = 0  # connections open when an outage began
    forwarded: int = 0  # connections forwarded whole (however their peers ended them)

    @property
    def reset(self) -> int:
        return self.reset_at_accept + self.reset_mid_response + self.reset_by_outage


def reset(sock: socket.socket) -> None:
    """Close `sock` with a TCP RST instead of a FIN (SO_LINGER on, timeout 0). Another thread blocked in a recv on it
    holds the socket open past close(): shutting its reading side first wakes that thread, and the RST goes once
    both have let go."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Connection:
    """One client connection and its connection to the server, pumped both ways by two threads."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, cut_response: bool) -> None:
        self.proxy, self.client, self.cut_response = proxy, client, cut_response
        self.server: socket.socket | None = None
        self._lock = threading.Lock()
        self._closed = False

    def run(self) -> None:
        try:
            self.server = socket.create_connection(self.proxy.target, timeout=10)
            self.server.settimeout(None)
        except OSError:
            self.abort()  # the server is down: the client sees its connection reset, as through a dead backend
            return
        threading.Thread(target=self._pump, args=(self.client, self.server, False), daemon=True,
                         name="faultproxy-up").start()
        self._pump(self.server, self.client, True)

    def _pump(self, src: socket.socket, dst: socket.socket, response: bool) -> None:
        try:
            while True:
                data = src.recv(CHUNK)
                if not data:
                    break
                if response and self.cut_response:
                    dst.sendall(data[:max(1, len(data) // 2)])  # the first part of the answer, then the reset
                    time.sleep(0.05)  # (a client reads it first, mostly: a reset drops the data not yet read)
                    self.proxy._count("reset_mid_response")
                    self.abort()
                    return
                dst.sendall(data)
        except OSError:
            self.abort()
            return
        try:  # a clean end from one side: passed on (half-close), the other direction goes on
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        if response:
            self.close()

    def abort(self) -> None:
        """Both sides reset, now."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        reset(self.client)
        if self.server is not None:
            reset(self.server)
        self.proxy._forget(self)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for s in (self.client, self.server):
            try:
                if s is not None:
                    s.close()
            except OSError:
                pass
        self.proxy._count("forwarded")
        self.proxy._forget(self)


class FaultProxy:
    """See the module's docstring. `target`: (host, port) of the real server."""

    def __init__(self, target: tuple[str, int], *, reset_share: float = 0.0, mid_response_share: float = 0.5,
                 seed: int = 0, host: str = "127.0.0.1") -> None:
        if not 0.0 <= reset_share <= 1.0 or not 0.0 <= mid_response_share <= 1.0:
            raise ValueError("reset_share and mid_response_share are shares, from 0 to 1")
        self.target = target
        self.reset_share, self.mid_response_share = reset_share, mid_response_share
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._open: set[_Connection] = set()
        self._down_until = 0.0
        self.stats = Stats()
        self._listener = socket.create_server((host, 0))
        self.host, self.port = self._listener.getsockname()[:2]
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._accept, daemon=True, name="faultproxy-accept")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and reset every connection still open."""
        self._stopped.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        except OSError:
            pass
        self._listener.close()
        if self._thread is not None:
            self._thread.join(5)
        for c in self._take_open():
            c.abort()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def set_share(self, reset_share: float) -> None:
        with self._lock:
            self.reset_share = reset_share

    def outage(self, seconds: float) -> None:
        """Every connection reset for `seconds` from now: those open now at once, new ones at accept."""
        with self._lock:
            self._down_until = max(self._down_until, time.monotonic() + seconds)
        for c in self._take_open():
            self._count("reset_by_outage")
            c.abort()

    @property
    def down(self) -> bool:
        return time.monotonic() < self._down_until

    def _decide(self) -> str:
        """"forward", "accept" (reset at once) or "response" (reset mid-response), for the next connection."""
        with self._lock:
            if time.monotonic() < self._down_until:
                return "accept"
            if self._rng.random() >= self.reset_share:
                return "forward"
            return "response" if self._rng.random() < self.mid_response_share else "accept"

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._count("accepted")
            fate = self._decide()
            if fate == "accept":
                self._count("reset_at_accept")
                reset(client)
                continue
            conn = _Connection(self, client, cut_response=fate == "response")
            with self._lock:
                self._open.add(conn)
            threading.Thread(target=conn.run, daemon=True, name="faultproxy-conn").start()

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self.stats, what, getattr(self.stats, what) + 1)

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._open.discard(conn)

    def _take_open(self) -> list[_Connection]:
        with self._lock:
            conns, self._open = list(self._open), set()
        return conns
