"""Which Ray to use and how the tasks find the user's code. Imports Ray, never TensorFlow."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Mapping

import ray

from raytf._core import private_apis as apis
from raytf._driver.headwatch import unreachable
from raytf.config import Config
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
    """Connect to (or start) Ray as configured; True when this call started an embedded Ray."""
    if ray.is_initialized():
        return False
    r = cfg.ray
    address = resolve_address(cfg)
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
            ray.init(address="local", num_cpus=r.num_cpus, include_dashboard=r.include_dashboard,
                     log_to_driver=r.log_to_driver, configure_logging=False)
            return True
        check_reachable(address)
        ray.init(address=address, log_to_driver=r.log_to_driver, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
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
    """sys.path entries for the tasks: train.python_path, plus the driver's cwd on an embedded Ray."""
    paths = [os.path.abspath(p) for p in cfg.train.python_path]
    if resolve_address(cfg) is None:
        # Embedded Ray runs on this machine: let tasks import what the driver's cwd can.
        paths.append(os.getcwd())
    return paths


def check_script(cfg: Config) -> None:
    """Script mode: make train.script absolute where the tasks can use the driver's path (an embedded Ray, or
    a cluster without ray.runtime_env.working_dir, whose nodes then share the driver's filesystem); with a
    working_dir it stays relative to it. Fails before reserving anything when the file is missing."""
    script = cfg.train.script
    if cfg.ray.runtime_env.get("working_dir"):
        return
    if os.path.isfile(script):
        cfg.train.script = os.path.abspath(script)
        return
    msg = (f"train.script ({script!r}): no such file (relative to {os.getcwd()}). Fix: give its path from the "
           "directory you launch in, or an absolute path")
    if resolve_address(cfg) is None:
        raise ConfigError(msg)
    log.warning("%s; assuming the cluster's nodes have it", msg)


def check_entrypoint(cfg: Config, paths: list[str]) -> None:
    """Fail before reserving anything when the entrypoint's (or train.module's) module cannot be found
    (without importing it: that would pull TensorFlow into the driver)."""
    if cfg.train.script:
        check_script(cfg)
        return
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
    if found:
        return
    msg = (f"{key} ({cfg.train.module or cfg.train.entrypoint!r}): module {module!r} not found on the driver "
           f"(searched sys.path and {paths}). Fix: run from the directory that holds it, or add it "
           f"with train.python_path=[...]")
    if resolve_address(cfg) is None:
        raise ConfigError(msg)
    log.warning("%s; assuming the cluster's nodes have it (ray.runtime_env.working_dir)", msg)
