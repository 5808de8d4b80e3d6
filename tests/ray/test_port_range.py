"""cluster.port_range on a local Ray (issue 19): every task's TF port in the range; a range with no free port fails
the run at once, naming it, however many retries are allowed. (Across hosts, with the README's firewall recipe:
tests/cluster/test_hosts_firewall.py.)"""

import json
import logging
import random
import socket
from pathlib import Path

import pytest

import raytf

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def _held_block(size: int) -> list[socket.socket]:
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


def test_the_tasks_ports_lie_in_the_range_and_loopback_is_not_warned_about(fast_cfg, no_leaks, caplog):
    held = _held_block(4)
    low, high = held[0].getsockname()[1], held[-1].getsockname()[1]
    for s in held:
        s.close()  # free again: the range the run gets
    caplog.set_level(logging.INFO, logger="raytf")
    result = raytf.fit(fast_cfg("run.name=ports", f"cluster.port_range=[{low},{high}]",
                                "train.entrypoint=tests.train_fns:paced_loop", "train.epochs=1",
                                "train.steps_per_epoch=2", "train.params.step_s=0"), quiet=True)
    assert result.status == "succeeded", result.error
    tasks = json.loads((Path(result.run_dir) / "result.json").read_text())["tasks"]
    assert len(tasks) == 2 and all(low <= t["port"] <= high for t in tasks), tasks
    assert len({t["port"] for t in tasks}) == 2
    # Every address is 127.0.0.1 (embedded Ray): nothing to warn about.
    assert "TF's gRPC servers accept anyone" not in caplog.text


def test_no_free_port_in_the_range_fails_the_run_without_a_retry(fast_cfg, no_leaks):
    held = _held_block(2)
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
