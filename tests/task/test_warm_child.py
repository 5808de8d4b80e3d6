"""A warm child (raytf/_task/script/spawn.py): a script's process started, TensorFlow imported, before its script is
known. The script must not be able to tell it from a cold child: the same argv, directory, sys.path, environment,
flags, tf-keras, thread caps and frozen import-time objects. A child that cannot be used gives way to a cold one;
one let go leaves nothing."""

import io
import json
import logging
import os
import signal
import subprocess
import sys

import pytest

import raytf
from raytf._core.plan import TaskSpec
from raytf._task.script import spawn
from raytf._task.script.host import ScriptHost, child_env
from raytf._task.script.spawn import WarmChild
from tests.conftest import ROOT
from tests.processes import leftover_script_processes as _leftovers


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
    assert {k: (cold["env"].get(k), warm["env"].get(k)) for k in {*cold["env"], *warm["env"]}
            if cold["env"].get(k) != warm["env"].get(k)} == {}
    assert warm == cold
    assert cold["argv"] == [str(ROOT / "tests/scripts/place_probe.py"), "--rank", "0", "<scratch>/work"]
    assert cold["cwd"] == "<scratch>/work" and cold["name"] == "__main__" and cold["unbuffered"] is True
    assert cold["keras"] == "tf_keras" and cold["threads"] == [1, 1] and cold["own_group"] and cold["frozen"]
    assert str(tmp_path / "spawn-only") not in warm["path"] and "RAYTF_TEST_SPAWN_ONLY" not in warm["env"]
    assert _leftovers() == []


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
