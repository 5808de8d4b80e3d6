"""How the user's code reaches the tasks (raytf issue 32). Pure.

On a cluster the nodes share no files with the driver but the storage: the program's code goes to them as the
Ray job's `working_dir`, which Ray takes only when the process connects (`ray.init`; local paths in an actor's
options are refused), packs (honouring `.gitignore` and `.rayignore`), uploads through the head and unpacks under
each node's own Ray directory, where that node's tasks start. Here: what raytf gives `ray.init` (the launch
directory, shipped as `ray job submit --working-dir .` would, unless something else already gives the job one),
what a task's own runtime_env keeps, where a task finds a relative `train.script` or `train.python_path` entry,
what each task must be able to import, and the one-line messages when that fails.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raytf._core import brief
from raytf.config import ShipCode
from raytf.errors import ConfigError

# The runtime_env keys Ray uploads from local paths, at the job level only.
JOB_KEYS = ("working_dir", "py_modules")
EXCLUDES = "excludes"  # what the upload leaves out (gitignore patterns): only with an upload

# Left out of what is shipped wherever they are: a repository's history, virtual environments, bytecode. Ray 2.60
# leaves these out by default too; said again so that a RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES does not ship
# them.
ALWAYS_EXCLUDED = (".git", ".venv", "venv", "__pycache__")

# Where the tasks' code comes from (the fix a missing module's message gives depends on it).
EMBEDDED = "embedded"  # one machine: the tasks see the driver's files
WORKING_DIR = "working_dir"  # the job has one: the launch directory raytf shipped, ray job submit's, the user's
OFF = "off"  # ray.ship_code=off on a cluster: the nodes have the code
JOINED = "joined"  # this process joined a cluster itself, before raytf and without a working_dir

# What a task must find (Need.kind, Missing.kind).
PROJECT = "project"  # the program's own code: shipped with it, or installed with the project
PACKAGE = "package"  # a third-party package it imports
SCRIPT = "script"  # train.script's file


def is_uri(value: Any) -> bool:
    """A remote package Ray downloads on each node (s3://, gs://, https://, gcs://...), not a local path."""
    return isinstance(value, str) and bool(re.match(r"^[A-Za-z][\w+.-]*://", value))


def _entries(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def local_paths(runtime_env: Mapping[str, Any], key: str) -> list[str]:
    """The entries of runtime_env[key] (working_dir, py_modules) that are local paths, which Ray uploads only at the
    job level. (Modules given as objects, `py_modules=[mypkg]`, count as local: Ray uploads them too.)"""
    if key not in runtime_env or runtime_env[key] in (None, "", []):
        return []
    return [str(getattr(e, "__name__", e)) for e in _entries(runtime_env[key]) if not is_uri(e)]


def env_text(env_vars: Mapping[str, Any] | None) -> dict[str, str]:
    """A runtime_env's env_vars as Ray takes them, strings: `ray.runtime_env.env_vars.N=4` on the command line (or
    `N: 4` in YAML) gives a number, `X: true` a bool (written "true", as a shell would)."""
    return {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (env_vars or {}).items()}


def task_level(runtime_env: Mapping[str, Any]) -> dict[str, Any]:
    """What of the user's runtime_env goes in a task actor's options: all but what only the job can have (a
    working_dir or py_modules with a local path, and `excludes`), which the tasks inherit from the job. Remote
    URIs stay: Ray takes them in an actor's options, and a process that joined Ray itself can give them no
    other way. (py_modules is replaced whole by an actor's own list, so a list with one local entry stays with
    the job whole.)"""
    out = {k: v for k, v in runtime_env.items() if k != EXCLUDES}
    if "env_vars" in out:
        out["env_vars"] = env_text(out["env_vars"])
    for key in JOB_KEYS:
        if local_paths(runtime_env, key):
            out.pop(key, None)
    return out


def ship_excludes(launch_dir: str, storage_path: str, venvs: Sequence[str] = ()) -> list[str]:
    """Ray `excludes` patterns (gitignore's, relative to the shipped directory) for what the tasks never need:
    `ALWAYS_EXCLUDED`, the virtual environments found in it (`venvs`, relative paths: any name), and the run
    storage when it is a local path inside it (checkpoints would otherwise travel to every node on the next
    launch)."""
    out = list(ALWAYS_EXCLUDED)
    out += [f"/{v.strip('/')}/" for v in venvs if v.strip("/") and v.strip("/") not in ALWAYS_EXCLUDED]
    path = storage_path.removeprefix("file://") if storage_path.startswith("file://") else storage_path
    if path and not is_uri(path):
        full = posixpath.normpath(posixpath.join(launch_dir, path))
        inside = posixpath.relpath(full, launch_dir)
        if inside != "." and not inside.startswith(".."):
            out.append(f"/{inside}/")
    return out


@dataclass(frozen=True)
class JobEnv:
    """What raytf gives ray.init as the job's runtime_env, and the directory it ships ("" for none)."""

    runtime_env: dict[str, Any]
    shipped: str = ""


def job_env(user: Mapping[str, Any], job: Mapping[str, Any], *, embedded: bool, ship: ShipCode, launch_dir: str,
            excludes: Sequence[str], home: str = "") -> JobEnv:
    """The job-level runtime_env for a process that connects now (ray.init): the user's working_dir, py_modules and
    excludes (local paths or URIs: the job's, so every process of the run, Ray Data's included, has them), plus,
    joining a cluster with ray.ship_code=auto, the launch directory as the working_dir, unless the job has one
    already (`ray job submit --working-dir`: `job`, its runtime_env) or the user gives one. Raises ConfigError when
    the user's and the submitted job's runtime_env both set a key (Ray refuses to merge them), and rather than pack
    the whole of `/` or the home directory (`home`) for every node (minutes of hashing, then Ray's size limit)."""
    env = {k: user[k] for k in (*JOB_KEYS, EXCLUDES) if user.get(k) not in (None, "", [])}
    for key in JOB_KEYS:
        if key in env and job.get(key):
            raise ConfigError(
                f"ray.runtime_env.{key} ({env[key]!r}): the Ray job already has its own {key} (ray job submit "
                f"--working-dir or --runtime-env), and Ray takes one. Fix: drop ray.runtime_env.{key}, or submit the "
                "job without its own")
    shipped = ""
    if not embedded and ship is ShipCode.auto and not job.get("working_dir") and "working_dir" not in env:
        if launch_dir in ("/", home.rstrip("/") or "/"):
            raise ConfigError(f"ray.ship_code=auto would ship {launch_dir} (the directory you launch from) to every "
                              "node. Fix: launch from your project's directory, or ray.ship_code=off when the nodes "
                              "have the code")
        env["working_dir"] = launch_dir
        env[EXCLUDES] = [*excludes, *_entries(env.get(EXCLUDES) or [])]
        shipped = launch_dir
    if not any(k in env for k in JOB_KEYS):
        env.pop(EXCLUDES, None)  # nothing uploaded: nothing to leave out
    return JobEnv(env, shipped)


def joined_problem(user: Mapping[str, Any], job: Mapping[str, Any]) -> str | None:
    """For a process that was connected to Ray before raytf (a notebook's ray.init, a sweep's trial): a local
    working_dir or py_modules the job does not have cannot reach the tasks any more (Ray uploads local paths only
    at ray.init). The ConfigError's message, or None. (One the job has was given there: by raytf's own connection,
    or the user's ray.init.)"""
    for key in JOB_KEYS:
        local = local_paths(user, key)
        if local and not job.get(key):
            return (f"ray.runtime_env.{key} ({user[key]!r}) has local paths, which Ray uploads only when a process "
                    f"connects (ray.init), and this process was connected to Ray before raytf. Fix: give it to that "
                    f"ray.init (ray.init(address=..., runtime_env={{{key!r}: {user[key]!r}}})), or a URI "
                    "(s3://.../code.zip), or leave the connecting to raytf (ray.address=..., no ray.init before)")
    return None


def where(*, embedded: bool, working_dir: bool, ship: ShipCode) -> str:
    """Where the tasks' code comes from, once connected (`working_dir`: the job or the user's runtime_env gives the
    tasks one)."""
    if working_dir:
        return WORKING_DIR
    if embedded:
        return EMBEDDED
    return OFF if ship is ShipCode.off else JOINED


def shipped_root(user: Mapping[str, Any], job: Mapping[str, Any], launch_dir: str) -> str | None:
    """The local directory the tasks' working_dir is a copy of: the user's local working_dir, or the launch
    directory when the job has one (raytf shipped it; under `ray job submit` the driver runs in its copy); None
    when there is none, or it is a remote URI's."""
    wd = user.get("working_dir")
    if wd and not is_uri(wd):
        return posixpath.normpath(posixpath.join(launch_dir, str(wd)))
    if wd:
        return None
    return launch_dir if job.get("working_dir") else None


def task_path(path: str, *, launch_dir: str, root: str | None, working_dir: bool) -> str:
    """A path the user gave from the launch directory (train.script, a train.python_path entry), as a task must
    take it. With a working_dir, a path inside the shipped directory (`root`) is made relative: each task finds it
    in its own copy (its current directory), wherever its node unpacked it; a relative one with a remote working_dir
    is left relative to that. Otherwise (one machine, or code already on the nodes) it is made absolute from the
    launch directory: the same path on every node. An absolute path outside stays: it is the nodes' (an image)."""
    full = path if posixpath.isabs(path) else posixpath.normpath(posixpath.join(launch_dir, path))
    if not working_dir:
        return full
    if root is None:
        return path
    inside = posixpath.relpath(full, root)
    return full if inside.startswith("..") else inside


# -- what each task checks before training -------------------------------------------------------------------------

@dataclass(frozen=True)
class Need:
    """A module a task must be able to find."""

    module: str  # dotted; a PACKAGE's top-level name
    kind: str  # PROJECT or PACKAGE
    via: str = ""  # the file that imports it, from the launch directory ("": the entrypoint's own module)


@dataclass(frozen=True)
class CodeNeeds:
    """What every task running the program checks before training: its modules (`modules`), train.script's file
    as the task resolves it (`script`), searched for on the task's train.python_path, its sys.path and, for a
    script's or module's process (`program`), the task's own directory, which is on its PYTHONPATH."""

    modules: tuple[Need, ...] = ()
    script: str = ""
    program: bool = False
    python_path: tuple[str, ...] = ()  # train.python_path as the tasks get it (task_path)


@dataclass(frozen=True)
class Missing:
    """What a task did not find."""

    kind: str  # PROJECT, PACKAGE or SCRIPT
    name: str  # the module; the script's path as the task looked for it
    via: str = ""


_FIX = {
    WORKING_DIR: "the tasks run in a copy of the Ray job's working_dir (the directory raytf ships, ray job submit's "
                 "--working-dir, or ray.runtime_env.working_dir): launch from the directory that holds the code, keep "
                 "it out of .gitignore and .rayignore, or install it on every node",
    OFF: "with ray.ship_code=off the nodes must have it: install the project on every node (or put it in their image "
         "at the same path), or let raytf ship the launch directory (ray.ship_code=auto), or `ray job submit "
         "--working-dir . -- python -m raytf.launch ...`",
    JOINED: "this process joined the cluster itself (ray.init(address=...)) without a working_dir, which Ray takes "
            "only then: ray.init(address=..., runtime_env={'working_dir': '.'}), or leave the connecting to raytf "
            "(ray.address=..., no ray.init before it) and it ships the launch directory, or install the project on "
            "every node",
    EMBEDDED: "launch from the directory that holds it, or add that directory with train.python_path=[...]",
}


def _names(items: list[str]) -> str:
    if len(items) > brief.FEW:  # (a run of 512 tasks on 64 hosts: the first few, and how many more)
        return brief.few(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def missing_line(blind: Sequence[tuple[str, str, int, Sequence[Missing]]], *, where: str, key: str) -> str:
    """One line for every task that misses part of the program: (host address, role, rank, what it missed) each;
    `key` names the program ("train.entrypoint 'mod:fn'"). What is missing, on which hosts, and the fix."""
    hosts: dict[Missing, dict[str, list[str]]] = {}
    for host, role, rank, missing in blind:
        for m in missing:
            hosts.setdefault(m, {}).setdefault(host, []).append(f"{role} {rank}")
    parts, packages = [], []
    for m, on in hosts.items():
        where_ = _names([f"{h} ({brief.few(tasks)})" for h, tasks in sorted(on.items())])
        by = f"imported by {m.via}" if m.via else key
        if m.kind == SCRIPT:
            parts.append(f"{where_} cannot see train.script (no file {m.name} there)")
        elif m.kind == PACKAGE:
            parts.append(f"{where_} {'has' if len(on) == 1 else 'have'} no module {m.name!r} ({by})")
            packages.append(m.name)
        else:
            parts.append(f"{where_} cannot import {m.name!r} ({by})")
    fixes = []
    if len(packages) < len(hosts):
        fixes.append(_FIX[where])
    if packages:
        fixes.append(f"install {_names(sorted(set(packages)))} on every node (or list "
                     f"{'it' if len(set(packages)) == 1 else 'them'} in ray.runtime_env's pip)")
    return f"the program is not on every host: {'; '.join(parts)}. Fix: {'; and '.join(fixes)}"


# -- Ray's own refusals, in one line -------------------------------------------------------------------------------

_SIZE = re.compile(r"Package size \(([^)]+)\) exceeds the maximum size of ([\d.]+\s*\w+)")


def too_big(ray_message: str, what: str) -> str | None:
    """Ray's refusal of a package over its upload limit, as one line naming `what` was packed; None for another
    message."""
    m = _SIZE.search(ray_message)
    if m is None:
        return None
    return (f"{what} packs to {m.group(1)}, over Ray's limit of {m.group(2)} for an upload. Fix: list what the tasks "
            "do not need (data, outputs, checkpoints) in .gitignore or .rayignore, keep data on shared storage, or "
            "set ray.ship_code=off and install the code on the nodes")


_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit)):\s*(\S.*)$")


_GENERIC = ("Failed to set up runtime environment.",
            "Could not create the actor because its associated runtime env failed to be created.")


def ray_reason(text: str) -> str:
    """The line that says why in one of Ray's runtime_env errors (a page of traceback, or two generic lines before
    the reason): its last `SomeError: ...` line, else its last line that is not one of the generic ones."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [m for m in map(_ERROR_LINE.match, lines) if m]
    if errors:
        return f"{errors[-1].group(1)}: {errors[-1].group(2)}".rstrip(".")
    said = [line for line in lines if line not in _GENERIC]
    return (said or lines or [text])[-1].rstrip(".")


def setup_failure(text: str) -> str:
    """Ray's RuntimeEnvSetupError (a node could not set up a task's runtime_env: a package that does not install, a
    URI it cannot fetch), a page of traceback, as one line: the node and the last error in it."""
    node = re.search(r"\[Node ([^\]]+)\]", text)
    return (f"ray.runtime_env could not be set up{f' on {node.group(1)}' if node else ''}: {ray_reason(text)}. "
            "Fix: correct ray.runtime_env (a package that installs, URIs every node can fetch), or put what it "
            "needs on the nodes")
