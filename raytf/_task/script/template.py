"""A node's template (raytf issue 53): one process per node and runtime_env that imported TensorFlow and tf-keras
once, and forks the warm children (spawn.WarmChild) the node's script tasks and standbys ask it for, and the Ray
worker processes of a training function's tasks and standbys (worker_shim.py asks; worker.py runs in the child). A
forked child has TensorFlow imported the moment it exists: no task imports it again.

Why: each import is ~3.5 s of CPU. Two tasks' children importing on 2 cores took as long as one; but a standby's
import beside a run's training slowed its steps (repeat runs 0.83-0.94x the hand launch against the 0.8 target)
and a failure in a run's first seconds found its standbys still importing (`recovery_s` 4.6-4.9 s against 3 s):
benchmarks/RESULTS.md, issue 53's measurements. A fork costs milliseconds and no import.

Forking after TensorFlow's import is safe as long as its runtime never started in the template: no op run, no
device touched, no strategy built (none is, here). The threads the import starts (jemalloc's background thread and
two more) do not exist in a fork; the child starts TensorFlow's runtime itself, as a cold child does. Measured
here: two children forked from such a process built MultiWorkerMirroredStrategy and trained `fit` in sync, twice
over. GPU tasks never come here (their tasks start afresh: raytf/_driver/standby.py).

The template is single-threaded (a selector over its socket, its requests and each child's pidfd), so a fork never
copies a lock another thread holds (but for the reaps' threads, which hold none: `_reap`). It is started by a
`TemplateKeeper` actor (keeper.py; the standby pool makes one per node and runtime_env: raytf/_driver/standby_pool.py)
and dies with it (the parent-death signal); its script children die with it too, and each with its host besides
(child.py's sentinel).

The wire (protocol.py): a host connects to the template's abstract Unix socket and sends a `ForkRequest` with its
kind's fds (SCM_RIGHTS); the template forks and answers `{"pid": N}`, then `{"exit": code}` once the child has
exited. It reaps the child once the host has closed the connection (spawn.ForkedProc): until then the child's pid,
and so its process group, stays the host's to signal (spawn.wait_exit says why). A Ray worker's host is its shim:
the worker goes when the shim does, and not with the template (Ray ends it).
"""

from __future__ import annotations

import array
import json
import logging
import os
import selectors
import signal
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field

from raytf._task.script import child
from raytf._task.script.protocol import (
    SCRIPT,
    TEMPLATE_FDS,
    TEMPLATE_IMPORTED,
    TEMPLATE_LISTENING,
    WORKER,
    WORKER_FDS,
    ForkRequest,
    exit_code,
    template_address,
)

_MAX_REQUEST = 1 << 20  # a request's JSON line, at most (a Ray worker's: its whole environment)
_CHUNK = 65536
_READ_S = 10.0  # a request's bytes come in one write: a host that stalls mid-request is not waited for longer

# On this process's stderr (its keeper's Ray worker log), as a script's child says raytf's things: child.own_logging.
log = logging.getLogger("raytf")


@dataclass
class Forked:
    """What a forked child starts from (returned by `serve` in the child only): the request, its fds by name, the
    environment before TensorFlow's import and how long the template's import took."""

    request: ForkRequest
    fds: dict[str, int]
    before: dict[str, str]
    import_s: float


@dataclass
class _Kid:
    pid: int
    conn: socket.socket
    pidfd: int
    kind: str = SCRIPT
    code: int | None = None
    host_gone: bool = False


@dataclass
class _Template:
    listener: socket.socket
    before: dict[str, str]
    import_s: float
    sel: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    kids: dict[int, _Kid] = field(default_factory=dict)

    def serve(self) -> Forked:
        """Fork children until this process is killed; returns only in a child, with what it starts from."""
        self.sel.register(self.listener, selectors.EVENT_READ, ("accept", None))
        while True:
            for key, _ in self.sel.select():
                what, obj = key.data
                if what == "accept":
                    try:
                        conn, _ = self.listener.accept()
                    except OSError:
                        continue
                    if not _same_user(conn):
                        conn.close()
                        continue
                    self.sel.register(conn, selectors.EVENT_READ, ("request", conn))
                elif what == "request":
                    forked = self._fork(obj)
                    if forked is not None:
                        return forked
                elif what == "exit":
                    self._exited(obj)
                else:  # "host": the host closed its end (or wrote to it, which it never does)
                    self._host_closed(obj)

    def _fork(self, conn: socket.socket) -> Forked | None:
        self.sel.unregister(conn)
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError, TypeError) as e:
            log.warning("the node's template refused a request: %s", e)
            conn.close()
            return None
        if request is None:  # the host closed before asking
            conn.close()
            return None
        try:
            pid = os.fork()
        except OSError as e:  # (out of memory or processes: the host starts a cold child instead)
            log.warning("the node's template could not fork: %s", e)
            for fd in fds.values():
                os.close(fd)
            conn.close()
            return None
        if pid == 0:
            self._leave_to_child(conn, request.kind)
            return Forked(request, fds, self.before, self.import_s)
        for fd in fds.values():
            os.close(fd)
        kid = _Kid(pid, conn, os.pidfd_open(pid), request.kind)
        self.kids[pid] = kid
        self.sel.register(kid.pidfd, selectors.EVENT_READ, ("exit", kid))
        self.sel.register(conn, selectors.EVENT_READ, ("host", kid))
        self._send(kid, {"pid": pid})
        return None

    def _leave_to_child(self, conn: socket.socket, kind: str) -> None:
        """In the forked child: a session of its own (whatever its script starts is in its group; a Ray worker's
        group is its own, as Ray's process-group cleanup expects), a script's child gone with the template (a Ray
        worker is Ray's to end: its shim's going ends it, `_host_closed`), and none of the template's sockets held."""
        os.setsid()
        if kind == SCRIPT:
            child.die_with_parent(os.getppid())
        self.sel.close()
        self.listener.close()
        conn.close()
        for kid in self.kids.values():
            kid.conn.close()
            os.close(kid.pidfd)
        self.kids.clear()

    def _exited(self, kid: _Kid) -> None:
        self.sel.unregister(kid.pidfd)
        os.close(kid.pidfd)
        info = os.waitid(os.P_PID, kid.pid, os.WEXITED | os.WNOWAIT)  # (reaped once the host is done with it)
        kid.code = exit_code(info)
        self._send(kid, {"exit": kid.code})
        if kid.host_gone:
            self._reap(kid)

    def _host_closed(self, kid: _Kid) -> None:
        try:
            more = kid.conn.recv(64)
        except OSError:
            more = b""
        if more:
            return
        self.sel.unregister(kid.conn)
        kid.conn.close()
        kid.host_gone = True
        if kid.code is not None:
            self._reap(kid)
        elif kid.kind == WORKER:  # its shim went (killed by Ray: the worker did not register in time): so does it
            try:
                os.kill(kid.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _reap(self, kid: _Kid) -> None:
        """On a thread of its own: a kernel slow to release an exited TensorFlow process (spawn.wait_exit: tens of
        seconds, seen) must not hold up this loop's forks and other children's exits. That thread holds no lock a
        fork could copy: it waits in the kernel, the GIL released."""
        del self.kids[kid.pid]
        threading.Thread(target=os.waitpid, args=(kid.pid, 0), daemon=True, name=f"raytf-reap-{kid.pid}").start()

    def _send(self, kid: _Kid, obj: dict) -> None:
        if kid.host_gone:
            return
        try:
            kid.conn.sendall(json.dumps(obj).encode() + b"\n")
        except OSError:  # the host is gone: its child's sentinel ends the child's group
            pass


def _same_user(conn: socket.socket) -> bool:
    """Whether the process at the other end of `conn` runs as this one's user (SO_PEERCRED). An abstract socket has
    no file permissions, and anyone on the host can list its name (/proc/net/unix): a child forked for another user
    would run the script that user hands it as this one."""
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.getuid():
        log.warning("the script template refused a request from user %s", uid)
        return False
    return True


def _receive(conn: socket.socket) -> tuple[ForkRequest | None, dict[str, int]]:
    """A request and its fds by name (None: the host closed first). A script's request is a few hundred bytes; a Ray
    worker's carries its environment, read to its end (at most _MAX_REQUEST, each read at most _READ_S apart)."""
    fds = array.array("i")
    conn.settimeout(_READ_S)
    try:
        msg, ancdata, _, _ = conn.recvmsg(_CHUNK, socket.CMSG_LEN(max(len(TEMPLATE_FDS), len(WORKER_FDS)) *
                                                                   fds.itemsize))
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
        while msg and not msg.endswith(b"\n") and len(msg) < _MAX_REQUEST:
            more = conn.recv(_CHUNK)
            if not more:
                break
            msg += more
        if not msg:
            for fd in fds:
                os.close(fd)
            return None, {}
        request = ForkRequest(**json.loads(msg))
        if len(fds) != len(request.fds):
            raise ValueError(f"{len(fds)} fds, not {len(request.fds)}")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        conn.settimeout(None)
    return request, dict(zip(request.fds, fds))


def main(argv: list[str]) -> int:
    name, parent_pid = argv[0], int(argv[1])
    child.die_with_parent(parent_pid)
    child.own_logging()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(template_address(name))
    listener.listen(64)
    os.write(1, TEMPLATE_LISTENING)
    before = dict(os.environ)
    from raytf._task import warm

    # On idle CPU, as a standby's own import was: it is asked for beside training (the pool's fill), and no task's
    # first start waits for it (a group's tasks fork from a template only once it has imported: keeper.py).
    import_s = warm.import_tensorflow(idle=True)
    os.write(1, TEMPLATE_IMPORTED)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    forked = _Template(listener, before, import_s).serve()
    if forked.request.kind == WORKER:
        from raytf._task.script import worker

        return worker.main_forked(forked)
    return child.main_forked(forked)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
