"""The keeper of a node's template (template.py): the process started, and gone with its keeper. No TensorFlow here:
the standby pool (raytf/_driver/standby_pool.py) imports this module to make the keeper actor."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from raytf._task.script.protocol import TEMPLATE_IMPORTED, TEMPLATE_LISTENING

START_S = 60.0  # a keeper's start, waited for at most: a Ray worker, then the template's interpreter (~1 s here)


def start(name: str) -> subprocess.Popen:
    """Start the template `name` as this process's child, which dies with this process; returns once it listens (a
    host may connect from then on: it is answered once the template has imported TensorFlow, `imported`). Raises
    OSError when it could not start. `-u` as spawn's children: a script's prints reach the driver as they happen."""
    proc = subprocess.Popen([sys.executable, "-u", "-m", "raytf._task.script.template", name, str(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    if proc.stdout.readline() != TEMPLATE_LISTENING:
        _failed(proc)
    return proc


def imported(proc: subprocess.Popen) -> None:
    """Until the template `proc` (start's) has imported TensorFlow. Raises OSError if it ended first."""
    if proc.stdout.readline() != TEMPLATE_IMPORTED:
        _failed(proc)
    proc.stdout.close()


def _failed(proc: subprocess.Popen) -> None:
    proc.kill()
    code = proc.wait()
    proc.stdout.close()
    raise OSError(f"the node's template ended (exit code {code}) before it could fork a child")


class TemplateKeeper:
    """The Ray actor that keeps a node's template for one runtime_env (raytf/_driver/standby_pool.py makes it,
    `num_cpus=0`, with that runtime_env, threaded: `imported` blocks): started in its __init__, so once a call
    returns the template listens; gone with the actor (its parent-death signal). `env`: raytf's variables, where the
    runtime_env did not bring them (plan.actor_env), set before the template imports TensorFlow."""

    def __init__(self, name: str, env: dict[str, str] | None = None) -> None:
        os.environ.update(env or {})
        self.name = name
        self._proc = start(name)

    def address(self) -> str:
        """The template's name (`WarmChild(template=...)`)."""
        return self.name

    def imported(self) -> str:
        """Until the template has imported TensorFlow (a fork is immediate from then on); its name."""
        imported(self._proc)
        return self.name

    def worker_command(self) -> str:
        """The `py_executable` (a runtime_env's) of a Ray actor whose process this template forks, TensorFlow
        imported (worker_shim.py): this node's interpreter, as a shell command."""
        return worker_command(self.name)


@dataclass(frozen=True)
class Template:
    """A node's template, once it has imported TensorFlow (the standby pool's, for a task group's start): its `keeper`,
    which a script task's child forks from (TaskActor's `template`), and `worker_command`, the `py_executable` of a
    training function's task actor that it forks (None: its keeper did not say)."""

    keeper: Any
    worker_command: str | None


def worker_command(name: str) -> str:
    """The shell command that makes a Ray worker of the template `name` (worker_shim.py), with this interpreter."""
    return shlex.join([sys.executable, "-m", "raytf._task.script.worker_shim", name])
