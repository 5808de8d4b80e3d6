"""Which Ray to use and how the tasks find the user's code. Imports Ray, never TensorFlow."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Mapping

import ray
from ray.exceptions import RuntimeEnvSetupError

from raytf._core import private_apis as apis
from raytf._core import shipping
from raytf._core.function import Functions, unrunnable
from raytf._driver import usercode
from raytf._driver.headwatch import unreachable
from raytf.config import Config, is_function_label
from raytf.errors import ConfigError, RaytfError

log = logging.getLogger("raytf")


def resolve_address(cfg: Config, environ: Mapping[str, str] = os.environ) -> str | None:
    """The Ray cluster to use: ray.address (the CLI's --address lands there), else RAY_ADDRESS, else None
    for an embedded local Ray."""
    return cfg.ray.address or environ.get("RAY_ADDRESS") or None


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not minutes, when a host:port address has nothing listening."""
    e = unreachable(address, timeout_s)
    if e is not None:
        raise RaytfError(f"ray.address ({address!r}): nothing reachable there ({e}). Fix: start the cluster "
                         "with `ray start --head` and pass its address, or ray.address=null for an embedded "
                         "local Ray") from None


AUTH_MODE_ENV = "RAY_AUTH_MODE"


def ensure_ray(cfg: Config) -> bool:
    """Connect to (or start) Ray as configured; True when this call started an embedded Ray. Joining a cluster, the
    launch directory goes with the connection as the job's working_dir (ray.ship_code; usercode.init_env)."""
    if ray.is_initialized():
        return False
    r = cfg.ray
    address = resolve_address(cfg)
    job = usercode.init_env(cfg, embedded=address is None)  # (a ConfigError here: nothing started yet)
    runtime_env = job.runtime_env or None
    if job.shipped:
        log.info("shipping %s to every task as the Ray job's working_dir (.gitignore and .rayignore honoured; left "
                 "out: %s); ray.ship_code=off if the nodes have the code", job.shipped,
                 ", ".join(job.runtime_env.get(shipping.EXCLUDES, [])))
    try:
        if address is None:
            # Token auth for the embedded Ray, explicitly: Ray turns it on by default for a new local cluster
            # only from 2.59, and says so in a warning on every start; a Ray without it runs any code sent to
            # its ports by anyone who can reach this machine. A user's RAY_AUTH_MODE stands (and is warned of).
            if AUTH_MODE_ENV not in os.environ and apis.available(apis.EMBEDDED_AUTH, log.warning):
                os.environ[AUTH_MODE_ENV] = "token"
                _reload_ray_config()
            if os.environ.get(AUTH_MODE_ENV, "token").lower() != "token":
                log.warning("%s=%s: the embedded Ray accepts work from anyone who can reach this machine's Ray "
                            "ports. Fix: unset it (raytf then starts Ray with token auth)", AUTH_MODE_ENV,
                            os.environ[AUTH_MODE_ENV])
            with usercode.quiet_default_excludes():
                ray.init(address="local", num_cpus=r.num_cpus, include_dashboard=r.include_dashboard,
                         log_to_driver=r.log_to_driver, configure_logging=False, runtime_env=runtime_env)
            return True
        check_reachable(address)
        with usercode.quiet_default_excludes():
            ray.init(address=address, log_to_driver=r.log_to_driver, configure_logging=False, runtime_env=runtime_env)
    except (ConnectionError, RuntimeError, ValueError, RuntimeEnvSetupError) as e:
        refused = usercode.init_error(e, job)
        # Ray refuses the job's runtime_env after starting an embedded Ray's processes (or connecting): none is left.
        ray.shutdown()
        if refused is not None:
            raise refused from None
        raise RaytfError(f"ray.address ({address!r}): cannot connect to Ray: {e}. Fix: start it with "
                         "`ray start --head`, or set ray.address=null for an embedded local Ray") from None
    if not address.startswith("ray://") and token_auth() is False:
        log.warning("the Ray cluster at %s does not use token auth: anyone who can reach its ports can run code "
                    "on every node. Fix: start every node (and this driver) with RAY_AUTH_MODE=token and the "
                    "cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN (README: Security)", address)
    return False


def _reload_ray_config() -> None:
    """This process's Ray reads RAY_AUTH_MODE once, when it loads: re-read it, as Ray's own
    `authentication_token_setup._enable_token_auth` does (Ray 2.60), or this driver would talk to its own
    token-auth GCS without a token (InvalidAuthToken). A private API (raytf/_core/private_apis.py, EMBEDDED_AUTH):
    without it raytf leaves the mode to Ray."""
    apis.lookup(apis.RAYLET_CONFIG)("")


def token_auth() -> bool | None:
    """Whether this process talks to Ray with token auth (the mode is process-wide: RAY_AUTH_MODE); None when this
    Ray cannot say (its private accessor moved: one warning, AUTH_CHECK)."""
    if not apis.available(apis.AUTH_CHECK, log.warning):
        return None
    return apis.lookup(apis.AUTH_MODE)() == apis.lookup(apis.AUTH_TOKEN)


def started_here() -> bool:
    """Whether the Ray this process is connected to was started by this process (`ray.init()` without an
    address, here or in the user's notebook: one machine, no autoscaler), not a cluster it joined
    (`ray.init(address=...)`, Ray Client). Ray keeps that only on its private node object: a head node
    started in-process, not a connection to a running one (raytf/_core/private_apis.py, EMBEDDED: without it, a
    cluster is assumed: an impossible placement is waited for, not refused at once)."""
    if not apis.available(apis.EMBEDDED, log.warning):
        return False
    node = apis.owner(apis.GLOBAL_NODE)[0]._global_node  # (read now: None until Ray is up)
    return bool(node is not None and getattr(node, "head", False))


def python_path(cfg: Config) -> list[str]:
    """sys.path entries for the driver's own imports of the user's code (train.datasets' function): train.python_path
    from the launch directory, plus the launch directory on an embedded Ray. (The tasks' are usercode.plan's.)"""
    paths = [os.path.abspath(p) for p in cfg.train.python_path]
    if resolve_address(cfg) is None:
        # Embedded Ray runs on this machine: let tasks import what the driver's cwd can.
        paths.append(os.getcwd())
    return paths


def check_entrypoint(cfg: Config, paths: list[str], functions: Functions | None = None) -> None:
    """Fail before anything starts when the config records a function sent by value that this run was not given
    (raytf._core.function); on an embedded Ray, also when the entrypoint's (or train.module's) module cannot be
    found (without importing it: that would pull TensorFlow into the driver) or train.script is not there. Joining
    a cluster the nodes may have what the driver lacks (an image): each task checks for itself (usercode.plan)."""
    functions = functions or Functions()
    for key, value, given in (("train.entrypoint", cfg.train.entrypoint, functions.train),
                              ("train.eval_entrypoint", cfg.train.eval_entrypoint, functions.evaluate)):
        if is_function_label(value) and given is None:
            raise unrunnable(key, value)
    if resolve_address(cfg) is not None:
        return
    if cfg.train.script:
        if not os.path.isfile(cfg.train.script):
            raise ConfigError(f"train.script ({cfg.train.script!r}): no such file (relative to {os.getcwd()}). Fix: "
                              "give its path from the directory you launch in, or an absolute path")
        return
    if functions.train is not None and is_function_label(cfg.train.entrypoint):
        return  # sent by value: nothing to import by name
    key = "train.module" if cfg.train.module else "train.entrypoint"
    module = cfg.train.module or cfg.train.entrypoint.partition(":")[0]
    saved = list(sys.path)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path[:] = saved
    if not found:
        raise ConfigError(f"{key} ({cfg.train.module or cfg.train.entrypoint!r}): module {module!r} not found on the "
                          f"driver (searched sys.path and {paths}). Fix: run from the directory that holds it, or add "
                          "it with train.python_path=[...]")
