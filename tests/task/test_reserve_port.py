"""A task's port (raytf/_task/actor.py reserve_port): held in cluster.port_range, never shared with another holder,
yet bindable by TF's server (TF_GRPC_REUSE_PORT). Imports Ray's module (the actor's), starts no Ray."""

import random
import socket

import pytest

pytestmark = [pytest.mark.timeout(120)]


def reserve_port(port_range=None):
    # The actor's module imports Ray: inside the tests, so collection loads no Ray (tests/core/conftest.py).
    from raytf._task.actor import reserve_port

    return reserve_port(port_range)


def _free_block(size: int) -> tuple[int, int]:
    """`size` consecutive ports nobody holds now, below the ephemeral range (and above Ray's worker ports)."""
    for _ in range(100):
        low = random.randrange(21000, 32000 - size)
        probes = [socket.socket() for _ in range(size)]
        try:
            for s, port in zip(probes, range(low, low + size)):
                s.bind(("", port))
            return low, low + size - 1
        except OSError:
            continue
        finally:
            for s in probes:
                s.close()
    pytest.skip(f"no {size} consecutive free ports found")


def test_every_port_of_the_range_once_then_none():
    low, high = _free_block(3)
    held = [reserve_port((low, high)) for _ in range(3)]
    try:
        assert sorted(s.getsockname()[1] for s in held) == [low, low + 1, low + 2]
        assert reserve_port((low, high)) is None
    finally:
        for s in held:
            s.close()


def test_a_port_another_socket_holds_is_skipped_even_with_so_reuseport():
    """Two SO_REUSEPORT sockets of one user may share a port (two tasks' TF servers would split its
    connections): a holder with it set, as every task's is and as TF's server is, is still skipped."""
    low, high = _free_block(2)
    other = socket.socket()
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    other.bind(("", low))
    mine = None
    try:
        for _ in range(5):  # whatever the random offset
            mine = reserve_port((low, high))
            assert mine.getsockname()[1] == high
            mine.close()
        mine = reserve_port((low, high))
        assert reserve_port((low, high)) is None  # the one left is held now
    finally:
        other.close()
        if mine is not None:
            mine.close()


def test_without_a_range_any_free_port():
    sock = reserve_port()
    try:
        assert sock.getsockname()[1] > 0
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
    finally:
        sock.close()


def test_tfs_server_binds_the_held_port(tf, monkeypatch):
    low, high = _free_block(4)
    sock = reserve_port((low, high))
    port = sock.getsockname()[1]
    monkeypatch.setenv("TF_GRPC_REUSE_PORT", "true")  # in every task's runtime_env (plan.TASK_ENV)
    try:
        tf.distribute.Server({"worker": [f"localhost:{port}"]}, job_name="worker", task_index=0, protocol="grpc",
                             start=True)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # TF listens on it
        assert reserve_port((port, port)) is None  # and holds it: no other task gets it
    finally:
        sock.close()
