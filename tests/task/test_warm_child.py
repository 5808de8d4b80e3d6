"""A warm child (raytf/_task/script/spawn.py): a script's process started, TensorFlow imported, before its script is
known. The script must not be able to tell it from a cold child: the same argv, directory, sys.path, environment,
flags, tf-keras, thread caps and frozen import-time objects. A child that cannot be used gives way to a cold one;
one let go leaves nothing."""

import array
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import raytf
from raytf._core.plan import TaskSpec
from raytf._task.script import keeper, protocol, spawn
from raytf._task.script.host import ScriptHost, child_env
from raytf._task.script.spawn import WarmChild
from tests.conftest import ROOT
from tests.processes import leftover_script_processes as _leftovers
from tests.processes import wait_exit


class _NoStorage:
    """A RunDir the probe never writes to (no checkpoints; its log and work directories stay empty)."""

    uri = "/nowhere/run"

    def uri_of(self, *parts):
        return "/".join([self.uri, *parts])


def _probe(tmp_path, name: str, warm: WarmChild | None = None) -> dict:
    """tests/scripts/place_probe.py run by a ScriptHost (in a warm child when given): what it printed, with this
    run's scratch directory written as <scratch>."""
    cfg = raytf.load_config(ROOT / "conf/script.yaml", [
        "run.name=probe", "train.script=tests/scripts/place_probe.py", "train.args=[--rank, '{rank}', '{work_dir}']",
        "cluster.num_workers=1", "cluster.strategy=mirrored"])
    spec = TaskSpec(role="worker", index=0, rank=0, cpus=1, gpus=0)
    scratch = tmp_path / name
    scratch.mkdir()
    log_file = io.BytesIO()
    host = ScriptHost(cfg=cfg, spec=spec, run_dir=_NoStorage(), emit=lambda k, p: None, attempt=1, is_chief=True,
                      scratch=str(scratch), log_file=log_file, stream=True, warm=warm)
    host.restore(None)
    # The task's environment when its script is given, as ScriptHost.environment takes it: this process's now.
    env = child_env(base={**os.environ, "TF_USE_LEGACY_KERAS": "1"}, tf_config=None, spec=spec, cfg=cfg,
                    run_uri="/nowhere/run", attempt=1, is_chief=True, num_workers=1,
                    checkpoint_dir=host.checkpoint_dir, resume_from=None, python_path=[str(ROOT)],
                    log_dir=host.log_dir, launch_dir=host.launch_dir, work_dir=host.work_dir)
    code, tail = host.run(env)
    assert code == 0, "\n".join(tail)
    (line,) = [x for x in log_file.getvalue().decode().splitlines() if x.startswith("PLACE ")]
    return json.loads(line[len("PLACE "):].replace(str(scratch), "<scratch>"))


@pytest.mark.timeout(180)
def test_a_script_cannot_tell_a_warm_child_from_a_cold_one(tmp_path, monkeypatch):
    cold = _probe(tmp_path, "cold")
    # The warm child starts elsewhere, with a PYTHONPATH entry and a variable the script's environment lacks.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with monkeypatch.context() as spawn_time:
        spawn_time.setenv("PYTHONPATH", str(tmp_path / "spawn-only"))
        spawn_time.setenv("RAYTF_TEST_SPAWN_ONLY", "1")
        spawn_time.setenv("TF_USE_LEGACY_KERAS", "1")
        child = WarmChild(cwd=str(elsewhere))
    assert child.ready() > 0  # TensorFlow imported before the script is known
    warm = _probe(tmp_path, "warm", warm=child)
    assert warm.pop("warm") is True and cold.pop("warm") is False
    assert warm.pop("forked") is False and cold.pop("forked") is False
    assert {k: (cold["env"].get(k), warm["env"].get(k)) for k in {*cold["env"], *warm["env"]}
            if cold["env"].get(k) != warm["env"].get(k)} == {}
    assert warm == cold
    assert cold["argv"] == [str(ROOT / "tests/scripts/place_probe.py"), "--rank", "0", "<scratch>/work"]
    assert cold["cwd"] == "<scratch>/work" and cold["name"] == "__main__" and cold["unbuffered"] is True
    assert cold["keras"] == "tf_keras" and cold["threads"] == [1, 1] and cold["own_group"] and cold["frozen"]
    assert str(tmp_path / "spawn-only") not in warm["path"] and "RAYTF_TEST_SPAWN_ONLY" not in warm["env"]
    assert _leftovers() == []


@pytest.mark.timeout(180)
def test_a_script_cannot_tell_a_child_the_nodes_template_forked_from_a_cold_one(tmp_path, monkeypatch, caplog):
    """The template (template.py) imported TensorFlow with its own environment, elsewhere; the child it forks runs
    the script as a cold child would, and its exit and its end are the host's as for a child of its own."""
    cold = _probe(tmp_path, "cold")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    name = f"raytf-test-template-{os.getpid()}"
    with monkeypatch.context() as start_time:
        start_time.setenv("PYTHONPATH", str(tmp_path / "template-only"))
        start_time.setenv("RAYTF_TEST_TEMPLATE_ONLY", "1")
        start_time.setenv("TF_USE_LEGACY_KERAS", "1")
        proc = keeper.start(name)
    try:
        first = WarmChild(cwd=str(elsewhere), template=name)
        second = WarmChild(cwd=str(elsewhere), template=name)
        assert first.forked and second.forked
        assert second.ready() == first.ready() > 0  # (the template's one import)
        assert {first.pid, second.pid}.isdisjoint({proc.pid, os.getpid(), None})
        forked = _probe(tmp_path, "forked", warm=first)
        second.close()
        assert _reaped(second.pid)  # killed, and reaped by the template
        third = WarmChild(cwd=str(elsewhere), template=name)
        third.ready()
    finally:
        proc.kill()
        proc.wait()
    # A template gone takes the children it forked with it (the parent-death signal); their hosts see them killed.
    assert spawn.wait_exit(third.child.proc) == -signal.SIGKILL
    third.close()
    # And a child asked of a template that is gone imports TensorFlow itself, said once.
    with caplog.at_level(logging.WARNING, logger="raytf"):
        fallback = WarmChild(cwd=str(elsewhere), template=name)
    assert not fallback.forked and "did not answer" in caplog.text
    fallback.close()
    assert forked.pop("forked") is True and cold.pop("forked") is False
    assert forked.pop("warm") is False and cold.pop("warm") is False
    assert {k: (cold["env"].get(k), forked["env"].get(k)) for k in {*cold["env"], *forked["env"]}
            if cold["env"].get(k) != forked["env"].get(k)} == {}
    assert forked == cold
    assert str(tmp_path / "template-only") not in forked["path"] and "RAYTF_TEST_TEMPLATE_ONLY" not in forked["env"]
    assert _leftovers() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another user needs root")
@pytest.mark.timeout(120)
def test_the_template_forks_for_its_own_user_only():
    """An abstract socket has no permissions: the template checks who connects (SO_PEERCRED). Another user's
    request (here a fork of this process turned `nobody`) gets no child: the connection closes unanswered."""
    name = f"raytf-test-template-user-{os.getpid()}"
    proc = keeper.start(name)
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # (socket calls only: no exec, so nothing needs to be readable by nobody)
            try:
                os.setgid(65534)
                os.setuid(65534)
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.settimeout(60)
                conn.connect(protocol.template_address(name))
                pipes = [fd for _ in range(3) for fd in os.pipe()][:len(protocol.TEMPLATE_FDS)]
                conn.sendmsg([protocol.ForkRequest(host_pid=os.getpid(), cwd="/").encode()],
                             [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", pipes))])
                os.write(write_end, b"answer:" + conn.recv(100))
            except BaseException as e:
                os.write(write_end, f"error: {e!r}".encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as f:
            said = f.read()
        os.waitpid(pid, 0)
    finally:
        proc.kill()
        proc.wait()
    # Closed unanswered (reset: the request was left unread), never a {"pid": ...}.
    assert said in (b"answer:", b"error: ConnectionResetError(104, 'Connection reset by peer')"), said


@pytest.mark.timeout(180)
def test_a_warm_child_that_could_not_import_tensorflow_gives_way_to_a_cold_one(tmp_path, monkeypatch, caplog):
    broken = tmp_path / "broken" / "tensorflow"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('no TensorFlow in this process')\n")
    with monkeypatch.context() as spawn_time:
        spawn_time.setenv("PYTHONPATH", str(broken.parent))
        child = WarmChild(cwd=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="raytf._task.script.host"):
        out = _probe(tmp_path, "fallback", warm=child)
    assert out["warm"] is False and out["keras"] == "tf_keras"
    assert child.child.proc.wait(timeout=30) != 0  # (reaped on a thread of its own: spawn.reap_later)
    (record,) = [r for r in caplog.records if "starting the script in a new process" in r.getMessage()]
    assert "ended before its script was given" in record.getMessage()
    assert _leftovers() == []


@pytest.mark.timeout(60)
def test_a_warm_child_let_go_leaves_no_process(tmp_path):
    child = WarmChild(cwd=str(tmp_path))
    child.close()  # mid-import
    child.child.proc.wait(timeout=30)  # (reaped on a thread of its own: spawn.reap_later)
    child.close()  # once only: a second close touches nothing
    assert _leftovers() == []


def _reaped(pid: int, timeout_s: float = 15.0) -> bool:
    """Whether `pid` has exited and been reaped (its /proc entry gone) within `timeout_s`: its exit waited on (a
    pidfd), then its parent's reap, which follows at once, polled for."""
    deadline = time.monotonic() + timeout_s
    wait_exit([pid], timeout_s)
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.02)
    return not os.path.exists(f"/proc/{pid}")


def _state(pid: int) -> str:
    """A process's state letter (Linux /proc/<pid>/stat: Z for a zombie)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("argv", "signal_it", "code"), [
    (["-c", "raise SystemExit(3)"], False, 3),
    (["-c", "import time; print(flush=True); time.sleep(60)"], True, -9),
])
def test_a_scripts_exit_is_known_without_reaping_it_and_the_reap_holds_nothing_up(argv, signal_it, code):
    # (spawn.wait_exit: the kernel's release of a TensorFlow process took a run's end tens of seconds)
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, start_new_session=True)
    if signal_it:
        proc.stdout.readline()  # (running)
        os.killpg(proc.pid, signal.SIGKILL)
    assert spawn.wait_exit(proc) == code
    assert _state(proc.pid) == "Z" and proc.returncode is None  # exited, not reaped: its pid, its group still held
    assert spawn.wait_exit(proc) == code  # (asked again: the same)
    spawn.reap_later(proc)
    assert proc.wait(timeout=30) == code
    assert not os.path.exists(f"/proc/{proc.pid}") or _state(proc.pid) != "Z"
    proc.stdout.close()
