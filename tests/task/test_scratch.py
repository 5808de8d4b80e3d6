"""Scratch directories (raytf/_task/scratch.py): a killed task's is swept, a live one's is not."""

import os
import signal
import subprocess
import sys

import pytest

from raytf._task import scratch
from tests.conftest import ROOT

pytestmark = [pytest.mark.timeout(60)]

HOLDER = ("import sys; from raytf._task.scratch import Scratch; s = Scratch('run1', 'worker0-a1', base=sys.argv[1]); "
          "open(s.path + '/ckpt.data', 'wb').write(b'x' * 1000); print(s.path, flush=True); sys.stdin.read()")


def _holder(base):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(base)], cwd=ROOT, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()


def test_a_killed_tasks_scratch_is_swept_a_live_ones_is_kept(tmp_path):
    killed, killed_path = _holder(tmp_path)
    live, live_path = _holder(tmp_path)
    try:
        killed.send_signal(signal.SIGKILL)  # as ray.kill does: no finally, no cleanup
        killed.wait(10)
        assert scratch.leftovers("run1", base=str(tmp_path)) == [killed_path]
        assert scratch.sweep(base=str(tmp_path)) == [killed_path]
        assert not os.path.exists(killed_path) and os.path.exists(live_path)
    finally:
        live.kill()
        live.wait(10)
    assert scratch.sweep(base=str(tmp_path)) == [live_path]
    assert os.listdir(tmp_path) == []  # the run's root goes once empty


def test_a_scratch_directory_caught_before_its_owner_locks_it_is_left_alone(tmp_path):
    # The owner has made the directory and its lock file, and not yet locked and signed it (a sweep by another
    # task on the node can come right then): not a dead owner's.
    fresh = tmp_path / "run1" / "worker0-a1-abcd"
    fresh.mkdir(parents=True)
    (fresh / ".owner").write_bytes(b"")
    assert scratch.sweep(base=str(tmp_path)) == [] and fresh.exists()
    (fresh / ".owner").write_bytes(b"12345\n")  # signed, and nobody holds its lock: its owner is gone
    assert scratch.sweep(base=str(tmp_path)) == [str(fresh)]
