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


OWNER = """
import os, subprocess, sys, tempfile
from raytf._task import scratch
own = scratch.own_tempdir()
assert scratch.own_tempdir() == own and tempfile.gettempdir() == own == os.environ["TMPDIR"]
# What TF's autograph does (delete=False, removed at exit: which a killed process never reaches), a task's log
# before its upload, and a run's scratch directory, which stays under the root, not in the process's own directory.
with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="__autograph_generated_file", delete=False) as f:
    f.write("x = 1")
os.makedirs(os.path.join(tempfile.mkdtemp(prefix="raytf-log-"), "task.log"))
run = scratch.Scratch("run1", "worker0-a1")
subprocess.run([sys.executable, "-c", "import tempfile; tempfile.mkstemp(prefix='child-')"], check=True)
# A script's data socket when the run's scratch path is too long for AF_UNIX (a long run.name): in its own directory.
from raytf._task.script import feed
sock = feed.socket_path("/" + "x" * 120)
assert sock.startswith(own + "/"), sock  # (short with TMPDIR=/tmp: this test's is long)
print(own, run.path, flush=True)
sys.stdin.read()
"""


def test_a_task_processs_temporary_files_are_swept_with_it(tmp_path, monkeypatch):
    """A task process's temporary directory is a scratch directory it owns (scratch.own_tempdir): what it and its
    children put in "the temporary directory" goes with it when it is killed, and nothing is left in the real one."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    env.pop(scratch.ROOT_ENV, None)
    p = subprocess.Popen([sys.executable, "-c", OWNER], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    own, run = p.stdout.readline().split()
    root = tmp / scratch.ROOT_NAME
    assert own.startswith(f"{root}/{scratch.PROCESSES}/") and run.startswith(f"{root}/run1/")
    assert os.listdir(tmp) == [scratch.ROOT_NAME]  # nothing beside the root
    names = os.listdir(own)
    assert any(n.startswith("__autograph_generated_file") for n in names), names
    assert any(n.startswith("child-") for n in names) and any(n.startswith("raytf-log-") for n in names), names
    assert scratch.sweep(base=str(root)) == []  # its owner lives
    p.send_signal(signal.SIGKILL)  # as ray.kill does: no atexit, no finally
    p.wait(10)
    scratch.wait_gone([p.pid], timeout_s=5)
    assert sorted(scratch.sweep(base=str(root))) == sorted([own, run])
    # The driver's sweep (a process whose temporary directory is the real one): the root goes too, once empty.
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.delenv(scratch.ROOT_ENV, raising=False)
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)
    assert scratch.root() == str(root) and scratch.sweep() == [] and os.listdir(tmp) == []


def test_the_driver_sweeps_its_tasks_roots_where_it_shares_their_place(tmp_path):
    """tasks.local_sweeps: a node all of whose tasks see files and processes as the driver does (machine, mount and
    PID namespaces, user) is swept in the driver's process, from the roots the tasks reported; any other node by a Ray
    task there."""
    from raytf._core.tasks import TaskInfo, local_sweeps
    from raytf._task.actor import sweep_roots

    here = scratch.place()
    assert here and here == subprocess.run([sys.executable, "-c", "from raytf._task import scratch; "
                                            "print(scratch.place())"], capture_output=True, text=True,
                                           cwd=ROOT).stdout.strip()  # a child shares its parent's place

    def info(rank, node, root, place, pid):
        return TaskInfo(role="worker", index=rank, rank=rank, host="h", port=1, node_id=node, pid=pid,
                        scratch_root=root, place=place)

    killed, killed_path = _holder(tmp_path / "a")
    killed.send_signal(signal.SIGKILL)
    infos = [info(0, "n1", str(tmp_path / "a"), here, killed.pid), info(1, "n1", str(tmp_path / "b"), here, 0),
             info(2, "n2", "/tmp", "other-machine:mnt:pid", 7),  # another machine: a Ray task's
             info(3, "n3", "/tmp", here, 8), info(4, "n3", "/tmp", "", 9),  # one of n3's not known: all of it is
             info(5, "n4", "", here, 10)]  # an older raytf's task (no root): a Ray task's
    nodes, roots = local_sweeps(infos, here)
    assert nodes == {"n1"} and roots == {str(tmp_path / "a"): (killed.pid,), str(tmp_path / "b"): ()}
    assert local_sweeps(infos, "") == (set(), {})  # no place known here: every node gets a Ray task
    assert sweep_roots(roots) == [killed_path]  # (it waited for the killed one to be gone)
    assert not (tmp_path / "a").exists()  # the root dropped once empty, as a node's own sweep drops its own
    killed.wait(10)


def test_a_scratch_made_while_a_sweep_removes_its_runs_directory_is_made_again(tmp_path, monkeypatch):
    """os.makedirs(exist_ok=True) raises FileExistsError when the directory its mkdir found is swept before its
    isdir() looks (another task's sweep of the run's empty directory): the making is retried (raytf issue 71: a
    relaunch failed on it, blamed on the program)."""
    real, raced = os.makedirs, []

    def racing(path, exist_ok=False):
        if not raced:
            raced.append(path)
            raise FileExistsError(17, "File exists", path)
        return real(path, exist_ok=exist_ok)

    monkeypatch.setattr(scratch.os, "makedirs", racing)
    made = scratch.Scratch("run1", "worker0-a1", base=str(tmp_path))
    assert raced and os.path.isdir(made.path)
    made.remove()
