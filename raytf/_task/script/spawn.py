"""Script mode: the host's child process (`python -m raytf._task.script.child`), started one of two ways.

- cold (`start_cold`): for its script, with the ChildSpec in its environment; it imports TensorFlow itself, ~3 s
  before the script's first line;
- warm (`WarmChild`): before its script is known, by a standby (raytf/_driver/standby.py) or by a task's actor as it
  starts (beside the driver's addressing and the others' start). It imports TensorFlow and tf-keras, says so, and
  waits; `hand()` gives it the script, the environment and the directory a cold child would have started with.
  So a script in a standby process starts as a training function does (raytf issue 38).

Either way the host gets a `Child`: the process (its own session: whatever the script starts is in its group; its
stdout and stderr on pipes), the read end of its events pipe and the write end of its liveness pipe (child.py's
sentinel takes the group down once that closes).
"""

from __future__ import annotations

import dataclasses
import json
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


class WarmChildLost(RaytfError):
    """A warm child ended before its script was handed over (its TensorFlow import failed, or it was killed)."""


@dataclass
class Child:
    """A child process and the host's ends of its pipes (the host closes them)."""

    proc: subprocess.Popen
    events_fd: int  # the events pipe's read end: EOF once the child (the only writer) is gone
    alive_fd: int  # the liveness pipe's write end: closing it ends the child's group (its sentinel)


def _popen(argv: list[str], env: dict[str, str], cwd: str | None, pass_fds: tuple[int, ...]) -> subprocess.Popen:
    # A session of its own: whatever the script starts (a TensorBoard, os.system, forked workers) is in the
    # child's process group, and goes with it.
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            pass_fds=pass_fds, start_new_session=True, cwd=cwd)


def kill_session(sid: int, sig: int = signal.SIGKILL, but: int = 0) -> None:
    """Every process of the session `sid` (a script's: it starts as its own session's leader), its own process group
    and each group a process of it made (setpgid, as job-control shells and some launchers do: raytf issue 71, such
    children outlived the run), but `but` (the caller). A process that made a session of its own has left: as
    documented (docs/scripts.md). Linux /proc; elsewhere the leader's group only."""
    for pid in [*_session_members(sid), sid]:  # (the leader's group last: the caller may be in it)
        if pid == but:
            continue
        try:
            os.killpg(pid, sig) if pid == sid else os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):  # gone already
            pass


def _session_members(sid: int) -> list[int]:
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # (after the command's name, which may hold spaces)
        except OSError:  # exited while we looked
            continue
        if len(fields) > 3 and int(fields[3]) == sid and int(name) != sid:  # state ppid pgrp session
            members.append(int(name))
    return members


def wait_exit(proc: subprocess.Popen) -> int:
    """Until `proc` has exited; its exit code as Popen writes it (-N: killed by signal N). The process is left a
    zombie, for `reap_later`: its pid stays taken, so its group can still be signalled by it.

    Not `proc.wait()`: reaping a TensorFlow process has taken a task's thread tens of seconds at a run's end, and
    the run waited for it. The kernel's stack throughout (kernel 6.18): wait4 -> release_task ->
    proc_invalidate_siblings_dcache -> d_invalidate -> shrink_dcache_parent, the child already gone, its pipes
    closed: in 1 run of ~50 alone (37.6 s) and 5 of ~110 beside a process that kept a core busy (12-162 s), on 2
    cores. (Ray's workers, and so their threads doing that, run at niceness 15: Ray's worker_niceness.) Nothing about
    the run needs the reap: its exit status is known without it (waitid's WNOWAIT)."""
    if proc.returncode is not None or not hasattr(os, "waitid"):
        return proc.wait()
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:  # reaped already (Popen's own poll)
        return proc.wait()
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def reap_later(proc: subprocess.Popen) -> None:
    """Reap `proc` (exited: `wait_exit`) on a thread of its own, so that whatever the kernel takes to release it
    holds nothing up (`wait_exit` says why). A daemon thread: a process leaving meanwhile leaves the zombie to init."""
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
    importing at the lowest CPU priority when `idle` (a standby's, beside training: raytf/_task/warm.py);
    `ready()` waits for its import, `hand()` gives it its script, `close()` lets it go unused."""

    def __init__(self, cwd: str | None = None, idle: bool = True) -> None:
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
            # The fd numbers stay in `start` (the child's are the same: pass_fds); the host's copies go.
            os.close(events_w)
            os.close(alive_r)
            child_end.close()
        self.child = Child(proc, events_r, alive_w)
        self._child_fds = {"events_fd": events_w, "alive_fd": alive_r}  # (the numbers the child holds them by)
        self._control: socket.socket | None = host_end
        self._closed = False
        self.import_s: float | None = None

    @property
    def pid(self) -> int:
        return self.child.proc.pid

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
        self.import_s = float(json.loads(line)["import_s"])
        return self.import_s

    def hand(self, spec: ChildSpec, env: dict[str, str], cwd: str) -> Child:
        """Give it its script (`spec`, its fds filled in here), to run with environment `env` in `cwd`, once it has
        imported TensorFlow; the child is the caller's from now on. Raises WarmChildLost (and cleans up) if it is
        gone: the caller starts a cold child instead."""
        try:
            self.ready()
            spec = dataclasses.replace(spec, **self._child_fds)
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
        if self.child.proc.returncode is None:
            kill_session(self.child.proc.pid)
        os.close(self.child.alive_fd)
        os.close(self.child.events_fd)
        for pipe in (self.child.proc.stdout, self.child.proc.stderr):
            if pipe is not None:
                pipe.close()
        wait_exit(self.child.proc)
        reap_later(self.child.proc)
