"""cluster.port_range on a local Ray (issue 19): a range with no free port fails the run at once, naming it,
however many retries are allowed. (Every task's TF port in the range: test_mwms_local.py's interrupted run; across
hosts, with the firewall recipe of docs/security.md: tests/cluster/test_hosts_firewall.py.)"""

import random
import socket

import pytest

import raytf

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def held_block(size: int) -> list[socket.socket]:
    """`size` consecutive free ports, bound here (no SO_REUSEPORT: nobody else can bind them) until closed."""
    for _ in range(100):
        low = random.randrange(21000, 32000 - size)
        held: list[socket.socket] = []
        try:
            for port in range(low, low + size):
                held.append(socket.socket())
                held[-1].bind(("", port))
            return held
        except OSError:
            for s in held:
                s.close()
    pytest.skip(f"no {size} consecutive free ports found")


def test_no_free_port_in_the_range_fails_the_run_without_a_retry(fast_cfg, no_leaks):
    held = held_block(2)
    low, high = held[0].getsockname()[1], held[-1].getsockname()[1]
    try:
        result = raytf.fit(fast_cfg("run.name=noport", f"cluster.port_range=[{low},{high}]",
                                    "failure.max_failures=-1"), quiet=True, raise_on_failure=False)
    finally:
        for s in held:
            s.close()
    assert result.status == "failed"
    message = str(result.error)
    assert f"cluster.port_range [{low}, {high}]: no free port on host 127.0.0.1 (tried all 2" in message, message
    assert "Fix: widen cluster.port_range, or place fewer tasks per host" in message
    (attempt,) = result.attempts
    assert attempt["cause"] == "config" and attempt["decision"] == "raise", attempt
