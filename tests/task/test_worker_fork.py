"""A Ray worker forked from its node's template (raytf issue 53): Ray execs the shim (`py_executable`:
keeper.worker_command) where it would exec Python, and the process the template forks must be the one Ray would have
started (its argv run as `__main__`, with the shim's environment, directory, sys.path and standard streams), with
TensorFlow imported; it and its shim end together, and without a template the shim starts Python itself. No Ray here:
a program of the test's stands in for Ray's default_worker.py (tests/ray/test_standby.py: real task actors)."""

import json
import os
import select
import shlex
import signal
import subprocess

import pytest

from raytf._task.script import keeper

pytestmark = [pytest.mark.timeout(120)]

# With `wait`: as a Ray worker does, it runs until it is ended; at the latest when the test closes its stdin (or exits).
PROGRAM = """
import json, os, sys
waits = sys.argv[1:] == ["wait"]
facts = {"tf": "tensorflow" in sys.modules, "pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
         "argv": sys.argv, "main": __name__, "path": sys.path, "stdin": "" if waits else sys.stdin.read(),
         "shim_env": os.environ.get("RAYTF_TEST_SHIM"), "template_env": os.environ.get("RAYTF_TEST_TEMPLATE_ONLY"),
         "oom": open("/proc/self/oom_score_adj").read().strip(), "own_session": os.getsid(0) == os.getpid()}
print(json.dumps(facts), flush=True)
if waits:
    sys.stdin.read()
sys.exit(3)
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A template (as a keeper starts it), imported: (its name, its process)."""
    root = tmp_path_factory.mktemp("template")
    name = f"raytf-test-worker-template-{os.getpid()}"
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "RAYTF_TEST_TEMPLATE_ONLY": "1",
           "PYTHONPATH": str(root / "template-only")}
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        proc = keeper.start(name)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        keeper.imported(proc)
        yield name, proc
    finally:
        proc.kill()
        proc.wait()


def _exited(pid: int, timeout_s: float = 15.0) -> bool:
    """Whether `pid` exits within `timeout_s` (its pidfd readable: exited, reaped or not; its parent, the template,
    reaps it on a thread of its own)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def _program(tmp_path) -> str:
    path = tmp_path / "prog" / "default_worker.py"
    path.parent.mkdir()
    path.write_text(PROGRAM)
    return str(path)


def _shim(name: str, program: str, *args: str, cwd, **popen):
    env = {**os.environ, "RAYTF_TEST_SHIM": "1", "PYTHONPATH": str(cwd / "shipped")}
    return [*shlex.split(keeper.worker_command(name)), program, *args], dict(cwd=cwd, env=env, text=True, **popen)


def test_the_process_the_template_forks_for_ray_is_the_one_ray_would_have_started(template, tmp_path):
    name, proc = template
    argv, kwargs = _shim(name, _program(tmp_path), "--node-id=x", cwd=tmp_path)
    out = subprocess.run(argv, input="on stdin", capture_output=True, timeout=60, **kwargs)
    assert out.returncode == 3, out.stderr[-3000:]  # the worker's exit code is the shim's
    facts = json.loads(out.stdout)
    assert facts["tf"] is True and facts["ppid"] == proc.pid  # forked by the template, TensorFlow imported
    assert facts["argv"] == [str(tmp_path / "prog/default_worker.py"), "--node-id=x"] and facts["main"] == "__main__"
    assert facts["cwd"] == str(tmp_path) and facts["stdin"] == "on stdin"  # the shim's directory and streams
    assert facts["shim_env"] == "1" and facts["template_env"] is None  # the shim's environment, not the template's
    # `python default_worker.py`'s path: its directory, then PYTHONPATH's entries, then the environment's own.
    assert facts["path"][:2] == [str(tmp_path / "prog"), str(tmp_path / "shipped")]
    assert not [p for p in facts["path"] if "template-only" in p]
    assert facts["oom"] == "1000" and facts["own_session"] is True  # as Ray's raylet makes its workers


def test_a_forked_worker_and_its_shim_end_together(template, tmp_path):
    name, _ = template
    argv, kwargs = _shim(name, _program(tmp_path), "wait", cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    shims: list[subprocess.Popen] = []

    def started() -> tuple[subprocess.Popen, int]:
        shims.append(subprocess.Popen(argv, **kwargs))
        return shims[-1], json.loads(shims[-1].stdout.readline())["pid"]

    try:
        # The shim killed (Ray kills what it started when a worker does not register in time): the worker goes too.
        shim, worker = started()
        shim.kill()
        shim.wait(timeout=10)
        assert _exited(worker)
        # The worker killed (Ray kills the pid it registered with): its shim exits, with the shell's code for it.
        shim, worker = started()
        os.kill(worker, signal.SIGTERM)
        assert shim.wait(timeout=15) == 128 + signal.SIGTERM
        # And a signal to the shim reaches the worker.
        shim, worker = started()
        shim.send_signal(signal.SIGTERM)
        assert shim.wait(timeout=15) == 128 + signal.SIGTERM and _exited(worker)
    finally:  # (a worker left by a failed check ends with its stdin)
        for s in shims:
            s.stdin.close()
            s.stdout.close()


def test_without_a_template_the_shim_starts_python_itself(tmp_path):
    argv, kwargs = _shim(f"raytf-test-no-template-{os.getpid()}", _program(tmp_path), cwd=tmp_path,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with subprocess.Popen(argv, **kwargs) as shim:
        out, err = shim.communicate(timeout=60)
    assert shim.returncode == 3, err[-3000:]
    facts = json.loads(out)
    assert facts["pid"] == shim.pid and facts["tf"] is False  # Python exec'd in the shim's place, as Ray would have
    assert "raytf: the node's template did not fork this Ray worker" in err


def test_with_interpreter_flags_the_shim_starts_python_itself(template, tmp_path):
    """Ray passes its own interpreter's -S or -s on to its workers' command line; the template's interpreter was
    started without them, so a fork would not be the process Ray asked for: Python is exec'd, with them."""
    argv, kwargs = _shim(template[0], "-s", _program(tmp_path), cwd=tmp_path,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with subprocess.Popen(argv, **kwargs) as shim:
        out, err = shim.communicate(timeout=60)
    assert shim.returncode == 3, err[-3000:]
    facts = json.loads(out)
    assert facts["pid"] == shim.pid and facts["tf"] is False and "interpreter flags" in err
