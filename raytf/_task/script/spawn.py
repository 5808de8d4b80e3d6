"""Script mode: the host's child process (`python -m raytf._task.script.child`), started one of two ways.

- cold (`start_cold`): for its script, with the ChildSpec in its environment; it imports TensorFlow itself, ~3 s
  before the script's first line;
- warm (`WarmChild`): before its script is known, by a standby (raytf/_driver/standby.py) or by a task's actor as it
  starts (beside the driver's addressing and the others' start). It imports TensorFlow and tf-keras, says so, and
  waits; `hand()` gives it the script, the environment and the directory a cold child would have started with.
  So a script in a standby process starts as a training function does (raytf issue 38). Where the node has a
  script template (template.py), the warm child is forked from it, TensorFlow imported already (issue 53): its
  process is then the template's child, not the host's (`ForkedProc`).

Either way the host gets a `Child`: the process (its own session: whatever the script starts is in its group; its
stdout and stderr on pipes), the read end of its events pipe and the write end of its liveness pipe (child.py's
sentinel takes the group down once that closes).
"""

from __future__ import annotations

import array
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass

from raytf._task.script import protocol
from raytf._task.script.protocol import ChildSpec
from raytf.errors import RaytfError

# -u: the script's prints reach the driver as they happen, not when a buffer fills.
_COMMAND = (sys.executable, "-u", "-m", "raytf._task.script.child")
_READY_LINE_BYTES = 4096

log = logging.getLogger("raytf")


class WarmChildLost(RaytfError):
    """A warm child ended before its script was handed over (its TensorFlow import failed, or it was killed)."""


@dataclass
class Child:
    """A child process and the host's ends of its pipes (the host closes them)."""

    proc: subprocess.Popen | ForkedProc
    events_fd: int  # the events pipe's read end: EOF once the child (the only writer) is gone
    alive_fd: int  # the liveness pipe's write end: closing it ends the child's group (its sentinel)


class ForkedProc:
    """A warm child the node's template forked (template.py). It is the template's child, not this process's: its
    pid and its exit come from the template over `conn`. What the host uses of a Popen: `pid`, `stdout`, `stderr`,
    `returncode`, and `wait_exit` and `reap_later` below."""

    def __init__(self, conn: socket.socket, stdout_fd: int, stderr_fd: int) -> None:
        self._conn = conn
        self._lines = conn.makefile("rb")
        self.stdout = os.fdopen(stdout_fd, "rb")
        self.stderr = os.fdopen(stderr_fd, "rb")
        self.known_pid: int | None = None
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        """Its pid, once the template has forked it (until then, this waits: `forked`)."""
        return self.forked()

    def forked(self) -> int:
        """Until the template has forked it; its pid. Raises WarmChildLost when the template ended first."""
        if self.known_pid is None:
            try:
                self.known_pid = self._read("pid")
            except (EOFError, OSError, ValueError) as e:
                raise WarmChildLost(f"the node's script template ended before forking a child for it ({e})") from e
        return self.known_pid

    def _read(self, key: str) -> int:
        while True:
            line = self._lines.readline()
            if not line:
                raise EOFError("the template closed the connection")
            obj = json.loads(line)
            if "pid" in obj:
                self.known_pid = int(obj["pid"])
            if key in obj:
                return int(obj[key])

    def exit_code(self) -> int:
        """Until it has exited; its exit code (-N: killed by signal N). A template gone meanwhile took its children
        with it (the parent-death signal): -SIGKILL."""
        if self.returncode is None:
            try:
                self.returncode = self._read("exit")
            except (EOFError, OSError, ValueError):
                self.returncode = -signal.SIGKILL
        return self.returncode

    def release(self) -> None:
        """The template may reap it now (its group is no longer this process's to signal)."""
        self._lines.close()
        self._conn.close()


def _popen(argv: list[str], env: dict[str, str], cwd: str | None, pass_fds: tuple[int, ...]) -> subprocess.Popen:
    # A session of its own: whatever the script starts (a TensorBoard, os.system, forked workers) is in the
    # child's process group, and goes with it.
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            pass_fds=pass_fds, start_new_session=True, cwd=cwd)


def wait_exit(proc: subprocess.Popen | ForkedProc) -> int:
    """Until `proc` has exited; its exit code as Popen writes it (-N: killed by signal N). The process is left a
    zombie, for `reap_later`: its pid stays taken, so its group can still be signalled by it.

    Not `proc.wait()`: reaping a TensorFlow process has taken a task's thread tens of seconds at a run's end, and
    the run waited for it. The kernel's stack throughout (kernel 6.18): wait4 -> release_task ->
    proc_invalidate_siblings_dcache -> d_invalidate -> shrink_dcache_parent, the child already gone, its pipes
    closed: in 1 run of ~50 alone (37.6 s) and 5 of ~110 beside a process that kept a core busy (12-162 s), on 2
    cores. (Ray's workers, and so their threads doing that, run at niceness 15: Ray's worker_niceness.) Nothing about
    the run needs the reap: its exit status is known without it (waitid's WNOWAIT)."""
    if isinstance(proc, ForkedProc):
        return proc.exit_code()
    if proc.returncode is not None or not hasattr(os, "waitid"):
        return proc.wait()
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:  # reaped already (Popen's own poll)
        return proc.wait()
    return protocol.exit_code(info)


def reap_later(proc: subprocess.Popen | ForkedProc) -> None:
    """Reap `proc` (exited: `wait_exit`) on a thread of its own, so that whatever the kernel takes to release it
    holds nothing up (`wait_exit` says why). A daemon thread: a process leaving meanwhile leaves the zombie to init."""
    if isinstance(proc, ForkedProc):  # (the template reaps it)
        proc.release()
        return
    threading.Thread(target=proc.wait, daemon=True, name=f"raytf-reap-{proc.pid}").start()


def start_cold(spec: ChildSpec, env: dict[str, str], cwd: str) -> Child:
    """Start the child for `spec` (its fds filled in here) with environment `env`, in `cwd`."""
    events_r, events_w = os.pipe()
    alive_r, alive_w = os.pipe()
    spec = dataclasses.replace(spec, events_fd=events_w, alive_fd=alive_r)
    try:
        proc = _popen([*_COMMAND], {**env, **spec.to_env()}, cwd, (events_w, alive_r))
    except BaseException:
        os.close(events_r)
        os.close(alive_w)
        raise
    finally:
        os.close(events_w)  # the child holds the only write end: EOF when it exits
        os.close(alive_r)
    return Child(proc, events_r, alive_w)


class WarmChild:
    """A child started before its script: TensorFlow imported while it waits (child.py's `--warm`). Started with this
    process's environment (the runtime_env's variables TensorFlow reads at its import are in it already) in `cwd`,
    importing at the lowest CPU priority when `idle` (a standby's, beside training: raytf/_task/warm.py); or forked
    by the node's script template `template` (template.py), TensorFlow imported already, where that one listens.
    `ready()` waits for its import, `hand()` gives it its script, `close()` lets it go unused."""

    def __init__(self, cwd: str | None = None, idle: bool = True, template: str | None = None) -> None:
        self._control: socket.socket | None = None
        self._closed = False
        self.import_s: float | None = None
        self.forked = False
        if template is not None:
            try:
                self.child, self._control = _fork(template, cwd)
                self.forked = True
                return
            except OSError as e:
                log.warning("the node's script template did not answer (%s): TensorFlow is imported in a new process",
                            e)
        events_r, events_w = os.pipe()
        alive_r, alive_w = os.pipe()
        host_end, child_end = socket.socketpair()
        start = protocol.WarmStart(parent_pid=os.getpid(), control_fd=child_end.fileno(), events_fd=events_w,
                                   alive_fd=alive_r, idle=idle)
        try:
            proc = _popen([*_COMMAND, "--warm"], {**os.environ, **start.to_env()}, cwd,
                          (events_w, alive_r, child_end.fileno()))
        except BaseException:
            os.close(events_r)
            os.close(alive_w)
            host_end.close()
            raise
        finally:
            # The child holds its fds by the numbers in `start` (pass_fds keeps them); the host's copies go.
            os.close(events_w)
            os.close(alive_r)
            child_end.close()
        self.child = Child(proc, events_r, alive_w)
        self._control = host_end

    @property
    def pid(self) -> int | None:
        """Its pid (None: not forked yet, or never: the template ended first)."""
        proc = self.child.proc
        return proc.known_pid if isinstance(proc, ForkedProc) else proc.pid

    def ready(self) -> float:
        """Until it has imported TensorFlow; the seconds that took. Raises WarmChildLost if it ended first (its end
        of the control socket closes with it: no timeout is needed for that)."""
        if self.import_s is not None:
            return self.import_s
        if self._control is None:
            raise WarmChildLost("the warm child was handed over or closed already")
        line = b""
        while not line.endswith(b"\n") and len(line) < _READY_LINE_BYTES:
            more = self._control.recv(_READY_LINE_BYTES - len(line))
            if not more:
                code = wait_exit(self.child.proc)
                raise WarmChildLost(f"the warm child (pid {self.pid}) ended before its script was given (exit code "
                                    f"{code}) while importing TensorFlow")
            line += more
        if isinstance(self.child.proc, ForkedProc):  # (the template sent its pid before the child could say this)
            self.child.proc.forked()
        self.import_s = float(json.loads(line)["import_s"])
        return self.import_s

    def hand(self, spec: ChildSpec, env: dict[str, str], cwd: str) -> Child:
        """Give it its script (`spec`: the child names its own fds in it), to run with environment `env` in `cwd`,
        once it has imported TensorFlow; the child is the caller's from now on. Raises WarmChildLost (and cleans up)
        if it is gone: the caller starts a cold child instead."""
        try:
            self.ready()
            self._control.sendall(protocol.Handoff(spec=spec, env=env, cwd=cwd).encode())
        except WarmChildLost:
            self.close()
            raise
        except OSError as e:  # (it ended between its ready line and the handoff)
            self.close()
            raise WarmChildLost(f"the warm child (pid {self.pid}) is gone: {e}") from e
        self._control.close()
        self._control = None
        self._closed = True  # (the caller's now: close() leaves it be)
        return self.child

    def close(self) -> None:
        """Let it go unused: its group killed, its pipes closed, the process reaped. Once only; not after hand()."""
        if self._closed:
            return
        self._closed = True
        if self._control is not None:
            self._control.close()
            self._control = None
        proc = self.child.proc
        if proc.returncode is None and self.pid is not None:  # (one not forked yet: its sentinel ends it below)
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # gone already
                pass
        os.close(self.child.alive_fd)
        os.close(self.child.events_fd)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if isinstance(proc, ForkedProc):  # the template reaps it, once it has exited: no wait here
            proc.release()
            return
        wait_exit(proc)
        reap_later(proc)


def _fork(name: str, cwd: str | None) -> tuple[Child, socket.socket]:
    """A warm child forked by the template `name` (template.py): the Child (its process a ForkedProc) and the host's
    end of its control socket. Raises OSError when no template listens there."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    events_r, events_w = os.pipe()
    alive_r, alive_w = os.pipe()
    host_end, child_end = socket.socketpair()
    theirs = {"stdout": out_w, "stderr": err_w, "events": events_w, "alive": alive_r, "control": child_end.fileno()}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(protocol.template_address(name))
        request = protocol.ForkRequest(host_pid=os.getpid(), cwd=cwd or os.getcwd()).encode()
        conn.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                  array.array("i", [theirs[n] for n in protocol.TEMPLATE_FDS]))])
    except BaseException:
        conn.close()
        for fd in (out_r, err_r, events_r, alive_w):
            os.close(fd)
        host_end.close()
        raise
    finally:  # (the template holds its copies now)
        for fd in (out_w, err_w, events_w, alive_r):
            os.close(fd)
        child_end.close()
    return Child(ForkedProc(conn, out_r, err_r), events_r, alive_w), host_end
