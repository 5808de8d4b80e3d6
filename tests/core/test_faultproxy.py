"""The fault-injecting TCP proxy the storage tests put in front of the S3 test server (tests/faultproxy.py): it
forwards faithfully, resets a seeded share of connections at accept or mid-response, and all of them during an
outage. A small server on 127.0.0.1 answers each request with a large body; milliseconds, no Ray, no TF."""

import errno
import random
import socket
import socketserver
import threading
import time

import pytest

from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.timeout(60)

BODY = random.Random(1).randbytes(200_000)  # several recv()s' worth
SLOW_STARTED = threading.Event()  # a SLOW answer's first part is sent
SLOW_GO_ON = threading.Event()  # ... and the rest may follow


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        request = self.request.recv(1024)
        if request.startswith(b"SLOW"):  # an answer still being sent when an outage begins
            self.request.sendall(BODY[:1000])
            SLOW_STARTED.set()
            SLOW_GO_ON.wait(10)
        self.request.sendall(BODY)


@pytest.fixture(scope="module")
def server():
    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address
    srv.shutdown()
    srv.server_close()


def ask(proxy: FaultProxy, request: bytes = b"GET", half_close: bool = True) -> tuple[bytes, str | None]:
    """The bytes received for one request and how the connection ended: None (whole), "reset", "eof".
    `half_close=False`: the client keeps its side open while it reads, as an HTTP client with keep-alive does."""
    got = bytearray()
    try:
        with socket.create_connection((proxy.host, proxy.port), timeout=10) as s:
            s.sendall(request)
            if half_close:
                s.shutdown(socket.SHUT_WR)
            while True:
                data = s.recv(65536)
                if not data:
                    return bytes(got), (None if bytes(got) == BODY else "eof")
                got += data
    except OSError as e:  # (a reset at accept can reach the client while it still connects)
        if e.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):
            return bytes(got), "reset"
        raise


def test_forwards_every_byte_when_no_fault_is_asked(server):
    with FaultProxy(server) as proxy:
        for _ in range(20):
            assert ask(proxy) == (BODY, None)
    assert proxy.stats.accepted == 20 and proxy.stats.reset == 0


def test_resets_at_accept_before_a_byte(server):
    with FaultProxy(server, reset_share=1.0, mid_response_share=0.0) as proxy:
        for _ in range(10):
            assert ask(proxy) == (b"", "reset")
    assert proxy.stats.reset_at_accept == 10 and proxy.stats.reset_mid_response == 0


@pytest.mark.parametrize("half_close", [True, False], ids=["half-closed", "keep-alive"])
def test_resets_mid_response_after_part_of_the_answer(server, half_close):
    with FaultProxy(server, reset_share=1.0, mid_response_share=1.0) as proxy:
        answers = [ask(proxy, half_close=half_close) for _ in range(10)]
    assert all(end == "reset" and len(got) < len(BODY) and BODY.startswith(got) for got, end in answers)
    # (a reset drops what the client had not read yet: most, not always all, saw the first part of the answer)
    assert any(got for got, _ in answers)
    assert proxy.stats.reset_mid_response == 10 and proxy.stats.reset_at_accept == 0


def test_a_seeded_share_of_connections_is_reset_the_same_way_every_time(server):
    runs = []
    for _ in range(2):
        with FaultProxy(server, reset_share=0.3, seed=42) as proxy:
            runs.append([ask(proxy)[1] for _ in range(60)])
    assert runs[0] == runs[1]  # the same faults, in the same order
    resets = runs[0].count("reset")
    assert 8 <= resets <= 30 and runs[0].count(None) == 60 - resets  # ~30 %; the others whole
    assert proxy.stats.reset == resets


def test_an_outage_resets_everything_for_a_while_then_forwards_again(server):
    with FaultProxy(server) as proxy:
        results = {}
        slow = threading.Thread(target=lambda: results.setdefault("slow", ask(proxy, b"SLOW", half_close=False)))
        slow.start()
        assert SLOW_STARTED.wait(10)  # its answer has started, the rest held back
        proxy.outage(0.5)
        slow.join(10)
        SLOW_GO_ON.set()
        got, end = results["slow"]
        assert end == "reset" and len(got) < len(BODY)  # open when it began: reset mid-response
        assert proxy.down and ask(proxy) == (b"", "reset")  # new ones: at accept
        deadline = time.monotonic() + 10
        while proxy.down and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the outage's clock, bounded
        assert ask(proxy) == (BODY, None)
    assert proxy.stats.reset_by_outage == 1 and proxy.stats.reset_at_accept >= 1


def test_a_server_that_is_down_looks_like_a_reset_and_stop_ends_everything():
    spare = socket.create_server(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    spare.close()  # nothing listens there now
    proxy = FaultProxy(("127.0.0.1", port)).start()
    assert ask(proxy) == (b"", "reset")
    proxy.stop()
    with pytest.raises(OSError):
        socket.create_connection((proxy.host, proxy.port), timeout=2).close()
