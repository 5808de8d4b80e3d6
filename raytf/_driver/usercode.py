"""The driver's side of getting the program to the tasks (raytf issue 32; the rules are `_core.shipping`'s): what
`ray.init` is given (the launch directory shipped as the job's working_dir), how the tasks take `train.script` and
`train.python_path`, what they must find (read from the program's source, never run here: the driver imports no
TensorFlow), and Ray's refusals as one line. Imports Ray, never TensorFlow."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from raytf._core import imports, shipping
from raytf._core.finder import find_spec
from raytf._core.plan import is_server
from raytf._core.shipping import PACKAGE, PROJECT, CodeNeeds, Need
from raytf._core.tasks import TaskInfo
from raytf.config import Config, is_function_label, script_mode
from raytf.errors import ConfigError

log = logging.getLogger("raytf")

# Set by Ray's job supervisor for the entrypoint of `ray job submit` (ray._private.runtime_env.constants): the job's
# config, its runtime_env included, which ray.init merges with its own (a key in both is refused).
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
_MAX_FILES = 200  # the program's own modules read for their imports, at most (a check, not a build)


def submitted_job_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The runtime_env of the Ray job this process is the entrypoint of (`ray job submit`), {} for none."""
    environ = os.environ if environ is None else environ
    try:
        return dict(json.loads(environ.get(JOB_CONFIG_ENV) or "{}").get("runtime_env") or {})
    except (ValueError, AttributeError):
        return {}


def virtualenvs(launch_dir: str) -> list[str]:
    """The launch directory's virtual environments (a `pyvenv.cfg` inside), whatever their names: never shipped."""
    try:
        with os.scandir(launch_dir) as entries:
            return sorted(e.name for e in entries
                          if e.is_dir(follow_symlinks=False) and os.path.isfile(os.path.join(e.path, "pyvenv.cfg")))
    except OSError:
        return []


def init_env(cfg: Config, *, embedded: bool, launch_dir: str | None = None) -> shipping.JobEnv:
    """The runtime_env to give ray.init (the job's), for a process about to connect; refuses, before anything
    starts, a local path of the user's that does not exist and a relative train.script missing from the directory
    to be shipped."""
    launch_dir = launch_dir or os.getcwd()
    user = cfg.ray.runtime_env
    for key in shipping.JOB_KEYS:
        for path in shipping.local_paths(user, key):
            if not os.path.exists(os.path.join(launch_dir, path)):
                raise ConfigError(f"ray.runtime_env.{key} ({path!r}): no such directory or file (from {launch_dir}). "
                                  "Fix: a path from the directory you launch in, or a URI (s3://.../code.zip)")
    env = shipping.job_env(user, submitted_job_env(), embedded=embedded, ship=cfg.ray.ship_code, launch_dir=launch_dir,
                           excludes=shipping.ship_excludes(launch_dir, cfg.storage.path, virtualenvs(launch_dir)),
                           home=os.path.expanduser("~"))
    script = cfg.train.script
    if env.shipped and script and not os.path.isabs(script) and not os.path.isfile(os.path.join(launch_dir, script)):
        raise ConfigError(f"train.script ({script!r}): no such file in {launch_dir}, the directory shipped to the "
                          "tasks. Fix: its path from the directory you launch in (launch from the project's root)")
    return env


class _DefaultExcludesNotice(logging.Filter):
    """Ray 2.60 warns, once per name, that `.git`, `.venv`, `venv` and `__pycache__` are no longer shipped: raytf
    leaves them out anyway (shipping.ALWAYS_EXCLUDED) and says what it leaves out in its own line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is now ignored by default when packaging" not in str(record.msg)


@contextlib.contextmanager
def quiet_default_excludes():
    """Around ray.init: without Ray's notice about its default excludes (logged by its worker module, which
    packs the job's working_dir while connecting)."""
    logger, notice = logging.getLogger("ray._private.worker"), _DefaultExcludesNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


def init_error(e: Exception, env: shipping.JobEnv) -> ConfigError | None:
    """ray.init's refusal of the job's runtime_env as a one-line ConfigError (None: the error is another)."""
    what = (f"ray.ship_code: the launch directory {env.shipped}" if env.shipped
            else "ray.runtime_env's working_dir/py_modules")
    line = shipping.too_big(str(e), what)
    if line is not None:
        return ConfigError(line)
    if env.runtime_env and (type(e).__name__ == "RuntimeEnvSetupError"
                            or any(k in str(e) for k in (*shipping.JOB_KEYS, "runtime_env", "runtime env"))):
        return ConfigError(f"{what}: Ray refused it: {shipping.ray_reason(str(e)) or type(e).__name__}")
    return None


@dataclass(frozen=True)
class CodePlan:
    """How this run's tasks get the program, once connected: `where` it comes from (shipping.WORKING_DIR, ...),
    train.python_path and train.script as the tasks take them, and what each task running the program checks."""

    where: str
    python_path: list[str]
    script: str
    needs: CodeNeeds
    key: str  # names the program in messages: "train.entrypoint 'mod:fn'"

    def needs_of(self, cfg: Config, role: str) -> CodeNeeds | None:
        """What a task of `role` checks: nothing for a ParameterServerStrategy server (it runs no Python of the
        user's)."""
        return None if is_server(cfg.cluster.strategy, role) else self.needs

    def refuse_missing(self, infos: list[TaskInfo]) -> None:
        """One ConfigError line for every task that lacks part of the program (their `code_missing`)."""
        blind = [(i.host, i.role, i.rank, list(i.code_missing)) for i in infos if i.code_missing]
        if blind:
            raise ConfigError(shipping.missing_line(blind, where=self.where, key=self.key))


def job_runtime_env() -> dict[str, Any]:
    """The runtime_env of the Ray job (or, in a Ray worker such as a sweep's trial, of this process) in force."""
    import ray

    try:
        return dict(ray.get_runtime_context().runtime_env or {})
    except Exception as e:  # an old or client connection without it: as if none
        log.debug("runtime_env of the job: %s", e)
        return {}


def plan(cfg: Config, *, embedded: bool, launch_dir: str | None = None, job: Mapping[str, Any] | None = None,
         validate: Callable[[Mapping[str, Any]], None] | None = None) -> CodePlan:
    """How the tasks get the program, once this process is connected (`job`: the job's runtime_env, read from
    Ray when not given; `validate`: Ray's check of the tasks' runtime_env, check_runtime_env unless given). Raises
    ConfigError for what cannot reach them (a local working_dir Ray was not given at ray.init, a runtime_env Ray
    refuses) and, on one machine, for a train.script the driver cannot find."""
    launch_dir = launch_dir or os.getcwd()
    job = job_runtime_env() if job is None else job
    user = cfg.ray.runtime_env
    problem = shipping.joined_problem(user, job)
    if problem is not None:
        raise ConfigError(problem)
    (validate or check_runtime_env)(shipping.task_level(user))
    working_dir = bool(job.get("working_dir") or user.get("working_dir"))
    where = shipping.where(embedded=embedded, working_dir=working_dir, ship=cfg.ray.ship_code)
    root = shipping.shipped_root(user, job, launch_dir)

    def task_path(p: str) -> str:
        return shipping.task_path(p, launch_dir=launch_dir, root=root, working_dir=working_dir)

    python_path = [task_path(p) for p in cfg.train.python_path]
    if embedded:
        python_path.append(launch_dir)  # one machine: the tasks import what the driver's directory holds
    script = task_path(cfg.train.script) if cfg.train.script else ""
    driver_paths = [*([root] if root else []), *(os.path.normpath(os.path.join(launch_dir, p))
                                                  for p in cfg.train.python_path), launch_dir]
    if cfg.train.script:
        key = f"train.script {cfg.train.script!r}"
        where_script = os.path.normpath(os.path.join(launch_dir, cfg.train.script))
        if embedded and not working_dir and not os.path.isfile(where_script):
            raise ConfigError(f"train.script ({cfg.train.script!r}): no such file (relative to {launch_dir}). Fix: its "
                              "path from the directory you launch in, or an absolute path")
        modules = program_modules(script_file=where_script, paths=driver_paths, launch_dir=launch_dir, root=root)
    elif cfg.train.module:
        key = f"train.module {cfg.train.module!r}"
        modules = program_modules(module=cfg.train.module, paths=driver_paths, launch_dir=launch_dir, root=root)
    else:
        key = f"train.entrypoint {cfg.train.entrypoint!r}"
        modules = []
        # A function sent by value (raytf.fit(train_fn=...) from __main__ or a notebook) travels with the call:
        # there is no module of its own to find, and what it imports is unknown here.
        for entrypoint in (cfg.train.entrypoint,
                           cfg.train.eval_entrypoint if cfg.cluster.evaluator.enabled else ""):
            if entrypoint and not is_function_label(entrypoint):
                more = program_modules(entrypoint=entrypoint, paths=driver_paths, launch_dir=launch_dir, root=root)
                modules += [n for n in more if n.module not in {m.module for m in modules}]
    needs = CodeNeeds(modules=tuple(modules), script=script, program=script_mode(cfg),
                      python_path=tuple(python_path))
    return CodePlan(where=where, python_path=python_path, script=script, needs=needs, key=key)


def check_runtime_env(runtime_env: Mapping[str, Any]) -> None:
    """Ray's own validation of the tasks' runtime_env (types, fields), before anything is reserved: a refusal
    later, when the actors are made, would come with a traceback and leave the attempt half started."""
    from ray.runtime_env import RuntimeEnv

    try:
        RuntimeEnv(**runtime_env)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"ray.runtime_env: Ray refuses it: {e}. Fix: see Ray's runtime_env reference "
                          "(docs.ray.io, 'Runtime environments')") from None


# -- what the program imports for certain ---------------------------------------------------------------------------

def _inside(path: str, roots: list[str]) -> bool:
    path = os.path.realpath(path)
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _installed(path: str) -> bool:
    """Whether `path` is an installed package's, not the program's own: under a site-packages (dist-packages)
    directory or a Python environment's prefix. A project's virtual environment often lives in the project
    (`python -m venv .venv`): its TensorFlow is under the launch directory, yet a package; followed as the program's
    own, its imports (hundreds of TensorFlow's modules) took seconds before every launch."""
    parts = os.path.realpath(path).split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts or _inside(path, _PREFIXES)


_PREFIXES = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def _own(origin: str | None, roots: list[str]) -> bool:
    """Whether a module found at `origin` is the program's own: a file under the launch directory (or the shipped
    root) that is not an installed package's."""
    return origin is not None and _inside(origin, roots) and not _installed(origin)


_SKIP = frozenset({*sys.stdlib_module_names, *sys.builtin_module_names, "raytf"})


def program_modules(*, entrypoint: str = "", module: str = "", script_file: str = "", paths: list[str],
                    launch_dir: str, root: str | None = None) -> list[Need]:
    """The modules a task must find to run the program: its own module (the entrypoint's, train.module), the
    program's own modules it imports (files under the launch directory or `root`, followed through their imports)
    and the packages any of them import (top-level names; the standard library and raytf left out). Read from the
    source on the driver (`imports.imports_of`): what the driver does not have is not followed."""
    roots = [os.path.realpath(r) for r in (launch_dir, root) if r]
    needs: dict[str, Need] = {}
    queue: list[tuple[str, str, bool, str | None]] = []  # (file, its package, runs as __main__, function)
    if script_file:
        if os.path.isfile(script_file):
            queue.append((script_file, "", True, None))
            paths = [os.path.dirname(script_file), *paths]
    else:
        name, _, function = (entrypoint.partition(":") if entrypoint else (module, "", ""))
        spec = find_spec(name, paths)
        own = spec is None or _own(spec.origin, roots)
        needs[name] = Need(name, PROJECT if own else PACKAGE)
        if spec is not None and own and spec.origin and spec.origin.endswith(".py"):
            package = name if spec.submodule_search_locations else name.rpartition(".")[0]
            queue.append((spec.origin, package, bool(module) and not spec.submodule_search_locations,
                          function or None))
            if module and spec.submodule_search_locations:  # `python -m pkg` runs its __main__.py
                queue.append((os.path.join(os.path.dirname(spec.origin), "__main__.py"), name, True, None))
    seen: set[str] = set()
    while queue and len(seen) < _MAX_FILES:
        file, package, main, function = queue.pop(0)
        if file in seen:
            continue
        seen.add(file)
        try:
            with open(file, encoding="utf-8") as f:
                source = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        via = os.path.relpath(file, launch_dir) if _inside(file, roots[:1]) else os.path.basename(file)
        for imp in imports.imports_of(source, main=main, function=function):
            imp = imports.absolute(imp, package)
            if imp is None or not imp.module:
                continue
            if imports.top(imp.module) in _SKIP:
                continue
            # `from pkg import mod`: mod may be a module of the program too.
            for name in [imp.module, *(f"{imp.module}.{n}" for n in imp.names)]:
                spec = find_spec(name, paths)
                if spec is None or not _own(spec.origin, roots):
                    if name == imp.module and imports.top(name) not in needs:
                        needs.setdefault(imports.top(name), Need(imports.top(name), PACKAGE, via))
                    continue
                needs.setdefault(name, Need(name, PROJECT, via))
                if spec.origin.endswith(".py"):
                    queue.append((spec.origin, name if spec.submodule_search_locations else name.rpartition(".")[0],
                                  False, None))
    return list(needs.values())
