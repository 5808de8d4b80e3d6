"""The `py_executable` of a task actor forked from its node's template (raytf issue 53): Ray's worker start execs
`<this> <default_worker.py> <args>` where it would exec Python (`python -m raytf._task.script.worker_shim TEMPLATE`
is the runtime_env's `py_executable`: keeper.worker_command). This process asks the template `TEMPLATE` for a Ray
worker with its argv, environment, directory and standard streams (protocol.ForkRequest, kind WORKER; the child:
worker.py), then lives as long as that worker: it forwards the signals it gets, and exits with the worker's exit
code. The template ends the worker if this process goes first (the raylet kills what it started when a worker does not
register in time).

Where no template answers (gone, or refusing), Python is exec'd in this process instead, as Ray would have: the task
then imports TensorFlow itself, as without a template."""

from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import sys
from typing import Any

from raytf._task.script import protocol

_EXIT_WORD_S = 5.0  # the template's answer after its worker's exit, waited for at most


def _ask(name: str, argv: list[str]) -> tuple[socket.socket, Any, int]:
    """The template's connection (and its answers, read as lines) and the pid of the worker it forked. Raises
    OSError (ValueError, KeyError: a bad answer)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(protocol.template_address(name))
        request = protocol.ForkRequest(host_pid=os.getpid(), cwd=os.getcwd(), kind=protocol.WORKER,
                                       argv=tuple(argv), env=dict(os.environ))
        conn.sendmsg([request.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        answers = conn.makefile("rb")
        line = answers.readline()  # (until the template has imported TensorFlow, if it still is)
        return conn, answers, int(json.loads(line)["pid"])
    except BaseException:
        conn.close()
        raise


def _follow(conn: socket.socket, answers: Any, pid: int) -> int:
    """Until the worker `pid` exits: its exit code (the template's answer; 1 when the template is gone and cannot give
    it), signals forwarded to it meanwhile."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(signum, lambda s, _frame: _forward(pid, s))
    try:
        gone = os.pidfd_open(pid)
    except OSError:  # already reaped
        gone = None
    # The template's answer follows the worker's exit (the template waits on it too): once the worker has gone, the
    # answer is waited for _EXIT_WORD_S more.
    while gone is not None:
        ready, _, _ = select.select([conn, gone], [], [])
        if conn in ready:
            break
        os.close(gone)
        gone = None
        if not select.select([conn], [], [], _EXIT_WORD_S)[0]:
            return 1
    line = answers.readline()
    if line:
        return int(json.loads(line).get("exit", 1))
    if gone is not None:  # the template went first: no word will come, the worker's own end is the end
        select.select([gone], [], [])
        os.close(gone)
    return 1


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    name, worker = argv[0], argv[1:]
    try:
        if not worker or worker[0].startswith("-"):  # the interpreter's own flags (Ray passes on its -S, -s): the
            raise ValueError(f"interpreter flags {worker[:1]}")  # template's interpreter has none, a fork would differ
        conn, answers, pid = _ask(name, worker)
    except (OSError, ValueError, KeyError) as e:
        print(f"raytf: the node's template did not fork this Ray worker ({e}): starting it afresh", file=sys.stderr,
              flush=True)
        os.execv(sys.executable, [sys.executable, *worker])
    code = _follow(conn, answers, pid)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
