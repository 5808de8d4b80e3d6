"""The keeper of a node's script template (template.py): the process started, and gone with its keeper. No
TensorFlow here: the standby pool (raytf/_driver/standby_pool.py) imports this module to make the keeper actor."""

from __future__ import annotations

import os
import subprocess
import sys

from raytf._task.script.protocol import TEMPLATE_IMPORTED, TEMPLATE_LISTENING


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
    raise OSError(f"the script template ended (exit code {code}) before it could fork a child")


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
